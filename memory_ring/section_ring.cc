#include "memory_ring/section_ring.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace ringmoe::memory_ring {
namespace {

uint64_t TotalBytes(const std::vector<CopyPiece>& pieces) {
  uint64_t bytes = 0;
  for (const CopyPiece& p : pieces) bytes += p.size;
  return bytes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SectionRing>> SectionRing::Create(
    Tier* tier, uint64_t slot_bytes, RingOptions options, RingStats* stats) {
  if (options.num_slots < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring: need at least 2 slots, got ", options.num_slots));
  }
  if (options.prefetch_depth < 0 ||
      options.prefetch_depth >= options.num_slots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ring: prefetch depth must be in [0, ", options.num_slots - 1, "] for ",
        options.num_slots, " slots, got ", options.prefetch_depth));
  }
  std::unique_ptr<SectionRing> ring(
      new SectionRing(tier, slot_bytes, options, stats));
  for (int i = 0; i < options.num_slots; ++i) {
    absl::StatusOr<std::unique_ptr<TierBuffer>> slot =
        tier->Allocate(slot_bytes);
    if (!slot.ok()) {
      return absl::Status(
          slot.status().code(),
          absl::StrCat("ring: allocating slot ", i, " of ", slot_bytes,
                       " bytes: ", slot.status().message()));
    }
    ring->slots_.push_back(std::move(*slot));
  }
  return ring;
}

SectionRing::SectionRing(Tier* tier, uint64_t slot_bytes, RingOptions options,
                         RingStats* stats)
    : tier_(tier),
      slot_bytes_(slot_bytes),
      options_(options),
      stats_(stats),
      generation_(options.num_slots, 0),
      slot_fence_(options.num_slots) {}

SectionRing::~SectionRing() { Reset(); }

SectionRing::Section* SectionRing::Find(Ticket ticket) {
  if (ticket < first_ ||
      ticket >= first_ + static_cast<Ticket>(sections_.size())) {
    return nullptr;
  }
  return &sections_[ticket - first_];
}

bool SectionRing::SlotFree(Ticket ticket) const {
  const Ticket previous = ticket - options_.num_slots;
  if (previous < first_) return true;  // released and retired
  return sections_[previous - first_].state == State::kReleased;
}

std::vector<SectionRing::Launch> SectionRing::CollectLoads() {
  std::vector<Launch> launches;
  const Ticket last = std::min<Ticket>(first_ + sections_.size() - 1,
                                       frontier_ + options_.prefetch_depth);
  for (Ticket t = first_; t <= last; ++t) {
    Section& s = sections_[t - first_];
    if (s.state != State::kQueued || !SlotFree(t)) continue;
    const int slot = static_cast<int>(t % options_.num_slots);
    s.state = State::kLoading;
    ++loads_in_flight_;
    ++generation_[slot];
    launches.push_back({t, s.pieces, slots_[slot]->data(), slot_fence_[slot]});
  }
  return launches;
}

void SectionRing::Start(std::vector<Launch> launches) {
  for (Launch& l : launches) {
    const uint64_t bytes = TotalBytes(l.pieces);
    const Ticket ticket = l.ticket;
    tier_->CopyAsync(std::move(l.pieces), l.dst, std::move(l.after),
                     [this, ticket, bytes](absl::Status status) {
                       LoadDone(ticket, bytes, std::move(status));
                     });
  }
}

void SectionRing::LoadDone(Ticket ticket, uint64_t bytes, absl::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  --loads_in_flight_;
  changed_.notify_all();
  Section* s = Find(ticket);
  if (s == nullptr) return;
  s->status = std::move(status);
  if (s->status.ok()) {
    stats_->AddMoved(tier_->name(), bytes);
    ++stats_->sections_loaded;
  } else {
    ++stats_->load_errors;
  }
  if (s->state == State::kLoading) s->state = State::kReady;
}

SectionRing::Ticket SectionRing::Enqueue(std::vector<CopyPiece> pieces) {
  std::vector<Launch> launches;
  Ticket ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = first_ + static_cast<Ticket>(sections_.size());
    sections_.push_back({std::move(pieces), State::kQueued, absl::OkStatus()});
    launches = CollectLoads();
  }
  Start(std::move(launches));
  return ticket;
}

absl::Status SectionRing::LoadNow(std::vector<CopyPiece> pieces, uint8_t* dst,
                                  Tier::Fence after) {
  const uint64_t bytes = TotalBytes(pieces);
  std::mutex done_mu;
  std::condition_variable done_cv;
  bool done = false;
  absl::Status result;
  tier_->CopyAsync(std::move(pieces), dst, std::move(after),
                   [&](absl::Status status) {
                     std::lock_guard<std::mutex> lock(done_mu);
                     result = std::move(status);
                     done = true;
                     done_cv.notify_all();
                   });
  std::unique_lock<std::mutex> lock(done_mu);
  done_cv.wait(lock, [&] { return done; });
  if (result.ok()) {
    stats_->AddMoved(tier_->name(), bytes);
  } else {
    ++stats_->load_errors;
  }
  return result;
}

absl::StatusOr<uint8_t*> SectionRing::Acquire(Ticket ticket,
                                              std::vector<CopyPiece> extra) {
  const absl::Time start = absl::Now();
  bool waited = false;
  uint8_t* slot = nullptr;
  absl::Status status;
  {
    std::vector<Launch> launches;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Section* s = Find(ticket);
      if (s == nullptr || s->state == State::kReleased) {
        return absl::FailedPreconditionError(
            absl::StrCat("ring: section ", ticket, " is not scheduled"));
      }
      frontier_ = std::max(frontier_, ticket);
      launches = CollectLoads();
    }
    Start(std::move(launches));
    std::unique_lock<std::mutex> lock(mu_);
    Section* s = Find(ticket);
    auto ready = [s] { return s->state == State::kReady; };
    if (!ready()) {
      waited = true;
      changed_.wait(lock, ready);
    }
    status = s->status;
    slot = slots_[ticket % options_.num_slots]->data();
  }
  if (status.ok() && !extra.empty()) {
    waited = true;
    status = LoadNow(std::move(extra), slot, nullptr);
  }
  if (waited) {
    stats_->stall_nanos += absl::ToInt64Nanoseconds(absl::Now() - start);
  }
  if (!status.ok()) return status;
  return slot;
}

absl::StatusOr<uint8_t*> SectionRing::Refill(Ticket ticket,
                                             std::vector<CopyPiece> pieces) {
  uint8_t* slot;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Section* s = Find(ticket);
    if (s == nullptr || s->state != State::kReady || ticket > frontier_) {
      return absl::FailedPreconditionError(
          absl::StrCat("ring: section ", ticket, " is not acquired"));
    }
    slot = slots_[ticket % options_.num_slots]->data();
  }
  const absl::Time start = absl::Now();
  absl::Status status =
      LoadNow(std::move(pieces), slot, tier_->RecordComputeFence());
  stats_->stall_nanos += absl::ToInt64Nanoseconds(absl::Now() - start);
  if (!status.ok()) return status;
  return slot;
}

void SectionRing::Release(Ticket ticket) {
  std::vector<Launch> launches;
  {
    std::unique_lock<std::mutex> lock(mu_);
    Section* s = Find(ticket);
    if (s == nullptr || s->state == State::kReleased) return;
    // A load still in flight keeps writing into the slot: wait for it.
    changed_.wait(lock, [s] { return s->state != State::kLoading; });
    s->state = State::kReleased;
    slot_fence_[ticket % options_.num_slots] = tier_->RecordComputeFence();
    while (!sections_.empty() && sections_.front().state == State::kReleased) {
      sections_.pop_front();
      ++first_;
    }
    launches = CollectLoads();
  }
  Start(std::move(launches));
}

void SectionRing::Reset() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [this] { return loads_in_flight_ == 0; });
  const Tier::Fence fence = tier_->RecordComputeFence();
  for (auto& f : slot_fence_) f = fence;
  first_ += static_cast<Ticket>(sections_.size());
  sections_.clear();
  frontier_ = first_ - 1;
}

uint64_t SectionRing::SlotGeneration(int slot) const {
  std::lock_guard<std::mutex> lock(mu_);
  return generation_[slot];
}

}  // namespace ringmoe::memory_ring

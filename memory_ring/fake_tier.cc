#include "memory_ring/fake_tier.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace ringmoe::memory_ring {
namespace {

class VectorBuffer : public TierBuffer {
 public:
  explicit VectorBuffer(size_t n) : bytes_(n, 0xee) {}
  uint8_t* data() override { return bytes_.data(); }
  size_t size() const override { return bytes_.size(); }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace

FakeTier::FakeTier(absl::Duration delay, int threads) : delay_(delay) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
}

FakeTier::~FakeTier() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  for (std::thread& t : threads_) t.join();
}

absl::StatusOr<std::unique_ptr<TierBuffer>> FakeTier::Allocate(size_t bytes) {
  return std::make_unique<VectorBuffer>(bytes);
}

absl::Status FakeTier::Run(const Job& job) {
  for (const CopyPiece& p : job.pieces) {
    if (p.source == failing_source_) {
      return absl::DataLossError(absl::StrCat(
          "fake read error in source ", p.source, " at offset ", p.offset));
    }
    for (uint64_t i = 0; i < p.size; ++i) {
      job.dst[p.dst_offset + i] = SourceByte(p.source, p.offset + i);
    }
  }
  return absl::OkStatus();
}

void FakeTier::CopyAsync(std::vector<CopyPiece> pieces, uint8_t* dst,
                         Fence after, Done done) {
  ++copies_started_;
  Job job{std::move(pieces), dst, std::move(done)};
  if (threads_.empty()) {
    job.done(Run(job));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(job));
  }
  work_.notify_one();
}

absl::Status FakeTier::CopyWithin(uint8_t* dst, const uint8_t* src,
                                  size_t bytes) {
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

void FakeTier::Work() {
  while (true) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    absl::SleepFor(delay_);
    job.done(Run(job));
  }
}

}  // namespace ringmoe::memory_ring

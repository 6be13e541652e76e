#include "memory_ring/staged_tier.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ringmoe::memory_ring {
namespace {

class StagedTier : public Tier {
 public:
  StagedTier(std::unique_ptr<Tier> upper, int host_sources,
             std::vector<TierBuffer*> staging, std::unique_ptr<Tier> disk)
      : upper_(std::move(upper)),
        disk_(std::move(disk)),
        host_sources_(host_sources),
        staging_(std::move(staging)),
        free_(staging_.size(), true) {}

  ~StagedTier() override {
    std::unique_lock<std::mutex> lock(mu_);
    returned_.wait(lock, [this] {
      return std::all_of(free_.begin(), free_.end(), [](bool f) { return f; });
    });
  }

  absl::string_view name() const override { return upper_->name(); }

  absl::StatusOr<std::unique_ptr<TierBuffer>> Allocate(size_t bytes) override {
    return upper_->Allocate(bytes);
  }

  Fence RecordComputeFence() override { return upper_->RecordComputeFence(); }

  absl::Status CopyWithin(uint8_t* dst, const uint8_t* src,
                          size_t bytes) override {
    return upper_->CopyWithin(dst, src, bytes);
  }

  void CopyAsync(std::vector<CopyPiece> pieces, uint8_t* dst, Fence after,
                 Done done) override {
    std::vector<CopyPiece> from_host, from_disk;
    uint64_t span = 0;
    for (const CopyPiece& p : pieces) {
      if (p.source < host_sources_) {
        from_host.push_back(p);
      } else {
        from_disk.push_back(
            {p.source - host_sources_, p.offset, p.size, p.dst_offset});
        span = std::max(span, p.dst_offset + p.size);
      }
    }
    if (from_disk.empty()) {
      upper_->CopyAsync(std::move(pieces), dst, std::move(after),
                        std::move(done));
      return;
    }
    if (span > staging_[0]->size()) {
      done(absl::OutOfRangeError(
          absl::StrCat("a section of ", span,
                       " bytes from disk exceeds the staging "
                       "buffers of ",
                       staging_[0]->size())));
      return;
    }
    const int stage = TakeStage();
    // The disk's pieces land in the staging buffer at their slot offsets
    // and go up from there, beside the section's host pieces.
    std::vector<CopyPiece> up = std::move(from_host);
    for (const CopyPiece& p : from_disk) {
      up.push_back({host_sources_ + stage, p.dst_offset, p.size, p.dst_offset});
    }
    disk_->CopyAsync(
        std::move(from_disk), staging_[stage]->data(), nullptr,
        [this, stage, up = std::move(up), dst, after = std::move(after),
         done = std::move(done)](absl::Status status) mutable {
          if (!status.ok()) {
            ReturnStage(stage);
            done(std::move(status));
            return;
          }
          upper_->CopyAsync(
              std::move(up), dst, std::move(after),
              [this, stage, done = std::move(done)](absl::Status s) {
                ReturnStage(stage);
                done(std::move(s));
              });
        });
  }

 private:
  // Waits for a free staging buffer: at most staging_.size() sections from
  // disk in flight.
  int TakeStage() {
    std::unique_lock<std::mutex> lock(mu_);
    returned_.wait(lock, [this] {
      return std::find(free_.begin(), free_.end(), true) != free_.end();
    });
    const int stage = static_cast<int>(
        std::find(free_.begin(), free_.end(), true) - free_.begin());
    free_[stage] = false;
    return stage;
  }

  void ReturnStage(int stage) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_[stage] = true;
    }
    returned_.notify_all();
  }

  std::unique_ptr<Tier> upper_;
  std::unique_ptr<Tier> disk_;
  const int host_sources_;
  const std::vector<TierBuffer*> staging_;
  std::mutex mu_;
  std::condition_variable returned_;
  std::vector<bool> free_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<Tier> CreateStagedTier(std::unique_ptr<Tier> upper,
                                       int host_sources,
                                       std::vector<TierBuffer*> staging,
                                       std::unique_ptr<Tier> disk) {
  return std::make_unique<StagedTier>(std::move(upper), host_sources,
                                      std::move(staging), std::move(disk));
}

}  // namespace ringmoe::memory_ring

#include "memory_ring/copy_engine_tier.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "memory_ring/host_buffer.h"

namespace ringmoe::memory_ring {
namespace {

class CopyEngineTier : public Tier {
 public:
  CopyEngineTier(std::vector<TierBuffer*> sources, double bytes_per_second)
      : sources_(std::move(sources)),
        bytes_per_second_(bytes_per_second),
        engine_([this] { Work(); }) {}

  ~CopyEngineTier() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    changed_.notify_all();
    engine_.join();
  }

  absl::string_view name() const override { return "host_to_device"; }

  absl::StatusOr<std::unique_ptr<TierBuffer>> Allocate(size_t bytes) override {
    std::unique_ptr<TierBuffer> buffer = NewHostBuffer(bytes);
    if (buffer == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
    }
    return buffer;
  }

  void CopyAsync(std::vector<CopyPiece> pieces, uint8_t* dst, Fence after,
                 Done done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back({std::move(pieces), dst, std::move(done)});
    }
    changed_.notify_all();
  }

  absl::Status CopyWithin(uint8_t* dst, const uint8_t* src,
                          size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }

 private:
  struct Job {
    std::vector<CopyPiece> pieces;
    uint8_t* dst;
    Done done;
  };

  absl::Status Copy(const Job& job) {
    const absl::Time start = absl::Now();
    uint64_t bytes = 0;
    for (const CopyPiece& p : job.pieces) {
      if (p.source < 0 || p.source >= static_cast<int>(sources_.size()) ||
          p.offset + p.size > sources_[p.source]->size()) {
        return absl::OutOfRangeError(
            absl::StrCat("copy of ", p.size, " bytes at offset ", p.offset,
                         " is outside source ", p.source));
      }
      std::memcpy(job.dst + p.dst_offset, sources_[p.source]->data() + p.offset,
                  p.size);
      bytes += p.size;
    }
    if (bytes_per_second_ > 0) {
      absl::SleepFor(absl::Seconds(bytes / bytes_per_second_) -
                     (absl::Now() - start));
    }
    return absl::OkStatus();
  }

  void Work() {
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        changed_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job.done(Copy(job));
    }
  }

  const std::vector<TierBuffer*> sources_;
  const double bytes_per_second_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::thread engine_;  // last: starts once the members above exist
};

}  // namespace

std::unique_ptr<Tier> CreateCopyEngineTier(std::vector<TierBuffer*> sources,
                                           double bytes_per_second) {
  return std::make_unique<CopyEngineTier>(std::move(sources), bytes_per_second);
}

}  // namespace ringmoe::memory_ring

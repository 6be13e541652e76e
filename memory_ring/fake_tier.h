// FakeTier: a test tier whose source bytes are a pure function of
// (source, offset) and whose copies finish on its own threads after a set
// delay, or fail where told to.
#ifndef RINGMOE_MEMORY_RING_FAKE_TIER_H_
#define RINGMOE_MEMORY_RING_FAKE_TIER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "memory_ring/tier.h"

namespace ringmoe::memory_ring {

class FakeTier : public Tier {
 public:
  // Copies complete `delay` after they start, `threads` at a time; with
  // threads == 0 they complete inside CopyAsync.
  FakeTier(absl::Duration delay, int threads);
  ~FakeTier() override;

  static uint8_t SourceByte(int source, uint64_t offset) {
    return static_cast<uint8_t>((source * 131 + offset * 7 + (offset >> 8)) &
                                0xff);
  }

  // Copies touching source `source` fail until cleared.
  void FailSource(int source) { failing_source_ = source; }
  void ClearFailure() { failing_source_ = -1; }

  int copies_started() const { return copies_started_; }

  absl::string_view name() const override { return "disk_to_host"; }
  absl::StatusOr<std::unique_ptr<TierBuffer>> Allocate(size_t bytes) override;
  void CopyAsync(std::vector<CopyPiece> pieces, uint8_t* dst, Fence after,
                 Done done) override;
  absl::Status CopyWithin(uint8_t* dst, const uint8_t* src,
                          size_t bytes) override;

 private:
  struct Job {
    std::vector<CopyPiece> pieces;
    uint8_t* dst;
    Done done;
  };
  absl::Status Run(const Job& job);
  void Work();

  const absl::Duration delay_;
  std::atomic<int> failing_source_{-1};
  std::atomic<int> copies_started_{0};
  std::mutex mu_;
  std::condition_variable work_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_FAKE_TIER_H_

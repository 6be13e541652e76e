// MemoryBudget: the bytes of one memory (a device's) that weights may take,
// shared by the backend's uploads and the ring's slots and cache, so that
// what a plan promised to fit is checked where the memory is taken.
#ifndef RINGMOE_MEMORY_RING_MEMORY_BUDGET_H_
#define RINGMOE_MEMORY_RING_MEMORY_BUDGET_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "memory_ring/tier.h"

namespace ringmoe::memory_ring {

class MemoryBudget {
 public:
  // `limit` bytes (0: no limit) of the memory `memory_name` names in errors.
  MemoryBudget(std::string memory_name, uint64_t limit)
      : memory_name_(std::move(memory_name)), limit_(limit) {}

  // Takes `bytes` for `what`, or fails with RESOURCE_EXHAUSTED naming it,
  // the budget and what is taken already.
  absl::Status Take(uint64_t bytes, absl::string_view what);
  void Give(uint64_t bytes) { used_ -= bytes; }

  uint64_t used() const { return used_; }
  uint64_t limit() const { return limit_; }

 private:
  const std::string memory_name_;
  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
};

// `tier` with every Allocate drawn from `budget` (which must outlive it)
// and given back when the buffer is destroyed.
std::unique_ptr<Tier> WithBudget(std::unique_ptr<Tier> tier,
                                 MemoryBudget* budget);

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_MEMORY_BUDGET_H_

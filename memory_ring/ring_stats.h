// Counters of the memory ring, shared by the ring, the expert cache and the
// tiers; read by the CLI's --stats and the server's metrics.
#ifndef RINGMOE_MEMORY_RING_RING_STATS_H_
#define RINGMOE_MEMORY_RING_RING_STATS_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ringmoe::memory_ring {

struct RingStats {
  std::atomic<uint64_t> bytes_resident{0};  // weights kept in the compute tier
  std::atomic<uint64_t> bytes_streamed{
      0};                                // weights that live in the source tier
  std::atomic<uint64_t> bytes_moved{0};  // copied into the compute tier, total
  std::atomic<uint64_t> bytes_disk_to_host{0};
  std::atomic<uint64_t> bytes_host_to_device{0};
  std::atomic<uint64_t> bytes_slot_to_cache{0};  // ring slot -> expert cache
  std::atomic<uint64_t> stall_nanos{0};  // compute waiting for a section
  std::atomic<uint64_t> sections_loaded{0};
  std::atomic<uint64_t> prefetch_hits{0};  // needed and already requested ahead
  std::atomic<uint64_t> prefetch_misses{0};  // needed, loaded on demand
  std::atomic<uint64_t> cache_hits{0};
  std::atomic<uint64_t> cache_misses{0};
  std::atomic<uint64_t> cache_evictions{0};
  std::atomic<uint64_t> load_errors{0};
  // Routed experts run by a device backend's hybrid executor, by where:
  // from device memory (resident or cached), on the CPU, streamed.
  std::atomic<uint64_t> expert_runs_device{0};
  std::atomic<uint64_t> expert_runs_cpu{0};
  std::atomic<uint64_t> expert_runs_streamed{0};
  // A device's weight memory in use (uploads, ring slots, expert cache).
  std::atomic<uint64_t> bytes_device_weights{0};

  double stall_seconds() const { return stall_nanos.load() * 1e-9; }

  // Counts `bytes` moved along the tier pair `tier_name` ("disk_to_host",
  // "host_to_device" or "slot_to_cache") and in bytes_moved.
  void AddMoved(absl::string_view tier_name, uint64_t bytes);

  // One JSON object with every counter (the CLI's --stats output).
  std::string ToJson() const;
};

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_RING_STATS_H_

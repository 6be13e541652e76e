#include "memory_ring/ring_stats.h"

#include "absl/strings/str_format.h"

namespace ringmoe::memory_ring {

void RingStats::AddMoved(absl::string_view tier_name, uint64_t bytes) {
  bytes_moved += bytes;
  if (tier_name == "disk_to_host") {
    bytes_disk_to_host += bytes;
  } else if (tier_name == "host_to_device") {
    bytes_host_to_device += bytes;
  } else if (tier_name == "slot_to_cache") {
    bytes_slot_to_cache += bytes;
  }
}

std::string RingStats::ToJson() const {
  return absl::StrFormat(
      "{\"bytes_resident\": %d, \"bytes_streamed\": %d, \"bytes_moved\": %d, "
      "\"bytes_disk_to_host\": %d, \"bytes_host_to_device\": %d, "
      "\"bytes_slot_to_cache\": %d, \"stall_seconds\": %.6f, "
      "\"sections_loaded\": %d, \"prefetch_hits\": %d, \"prefetch_misses\": "
      "%d, "
      "\"cache_hits\": %d, \"cache_misses\": %d, \"cache_evictions\": %d, "
      "\"load_errors\": %d, \"expert_runs_device\": %d, "
      "\"expert_runs_cpu\": %d, \"expert_runs_streamed\": %d, "
      "\"bytes_device_weights\": %d}",
      bytes_resident.load(), bytes_streamed.load(), bytes_moved.load(),
      bytes_disk_to_host.load(), bytes_host_to_device.load(),
      bytes_slot_to_cache.load(), stall_seconds(), sections_loaded.load(),
      prefetch_hits.load(), prefetch_misses.load(), cache_hits.load(),
      cache_misses.load(), cache_evictions.load(), load_errors.load(),
      expert_runs_device.load(), expert_runs_cpu.load(),
      expert_runs_streamed.load(), bytes_device_weights.load());
}

}  // namespace ringmoe::memory_ring

// ExpertCache: hot experts kept in the compute-tier memory the ring does not
// use, so the experts a workload keeps routing to stop costing transfers.
// Frequency-aware: every lookup counts for its expert (counts halve every
// `decay_period` lookups so the cache follows shifting traffic); an expert
// just streamed in is admitted when its count beats the coldest entry's,
// which it evicts (ties go to the least recently used). Used from the
// compute thread only.
#ifndef RINGMOE_MEMORY_RING_EXPERT_CACHE_H_
#define RINGMOE_MEMORY_RING_EXPERT_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "memory_ring/ring_stats.h"
#include "memory_ring/tier.h"

namespace ringmoe::memory_ring {

class ExpertCache {
 public:
  using Key = int64_t;  // e.g. layer * num_experts + expert

  // Holds capacity_bytes / entry_bytes entries (possibly none).
  static absl::StatusOr<std::unique_ptr<ExpertCache>> Create(
      Tier* tier, uint64_t capacity_bytes, uint64_t entry_bytes,
      RingStats* stats, int decay_period = 4096);

  // The cached bytes of `key`, or null; counts a hit or a miss.
  const uint8_t* Lookup(Key key);

  // `bytes` (in compute-tier memory, e.g. a ring slot) hold `key`, just
  // streamed in: copies them into the cache if `key` is hot enough.
  absl::Status Offer(Key key, const uint8_t* bytes, uint64_t size);

  int capacity_entries() const { return static_cast<int>(entries_.size()); }
  bool Contains(Key key) const { return where_.contains(key); }

 private:
  struct Entry {
    Key key = -1;
    uint64_t last_use = 0;
  };

  ExpertCache(Tier* tier, uint64_t entry_bytes, RingStats* stats,
              int decay_period)
      : tier_(tier),
        entry_bytes_(entry_bytes),
        stats_(stats),
        decay_period_(decay_period) {}

  Tier* const tier_;
  const uint64_t entry_bytes_;
  RingStats* const stats_;
  const int decay_period_;
  std::unique_ptr<TierBuffer> memory_;
  std::vector<Entry> entries_;
  absl::flat_hash_map<Key, int> where_;        // key -> entry index
  absl::flat_hash_map<Key, uint32_t> counts_;  // lookups per key (decayed)
  uint64_t clock_ = 0;
};

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_EXPERT_CACHE_H_

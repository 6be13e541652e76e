// Placement: from the model's weights and a memory budget, what stays
// resident in the compute tier and what streams through the ring. What every
// token needs (embeddings, attention, norms, routers, shared experts, dense
// layers) is resident first; then two or more ring slots, each holding a
// section: a layer's streamed experts, or where the budget holds less, a
// group of them (down to one expert; a layer then streams in several
// sections). The memory left holds the most-used experts: with the expert
// cache on, dynamically (the cache learns which experts the traffic uses);
// with it off, statically, whole experts in the order given (most used
// first).
#ifndef RINGMOE_MEMORY_RING_PLACEMENT_H_
#define RINGMOE_MEMORY_RING_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringmoe::memory_ring {

struct ExpertSize {
  int layer = 0;
  int expert = 0;
  uint64_t bytes = 0;
};

struct PlacementInput {
  uint64_t always_resident_bytes = 0;
  // Every routed expert, most used first (the order experts become resident
  // when the cache is off).
  std::vector<ExpertSize> experts;
  int num_layers = 0;
  int experts_per_layer = 0;
  uint64_t budget_bytes = 0;  // 0: unlimited (everything resident)
  // Ring slots; 0: none, for experts that do not fit and run elsewhere
  // (the hybrid executor's CPU): they are not streamed, and the memory left
  // holds resident experts (expert_cache must be false).
  int num_slots = 2;
  // Experts per section; 0: a whole layer where num_slots of them fit;
  // otherwise as many as fit, but with the expert cache on no more than
  // twice experts_per_token (room for a decode step's experts and its
  // mispredictions), leaving the rest to the cache. Slots are dropped (down
  // to 2) only when not even one section of this size fits in each.
  int section_experts = 0;
  int experts_per_token = 1;  // top-k
  // Whether leftover memory becomes an expert cache (else resident experts).
  bool expert_cache = true;
  // Stream experts even when the budget would hold them all (tests and
  // benchmarks of the ring on models that fit).
  bool force_streaming = false;
};

struct PlacementPlan {
  uint64_t budget_bytes = 0;
  uint64_t resident_bytes = 0;  // always-resident + resident experts
  uint64_t streamed_bytes = 0;  // experts that live in the source tier
  uint64_t always_resident_bytes = 0;
  int num_slots = 0;  // 0: no ring
  int section_experts =
      0;  // experts a slot holds (all of a layer's: 1 section)
  uint64_t slot_bytes = 0;      // section_experts x expert_bytes
  uint64_t expert_bytes = 0;    // the largest expert (cache entry size)
  int layer_experts = 0;        // the most routed experts of one layer
  uint64_t minimum_budget = 0;  // always resident + 2 slots of the
                                // smallest section allowed
  uint64_t cache_bytes = 0;
  int resident_experts = 0;
  int streamed_experts = 0;
  std::vector<std::vector<bool>> expert_resident;  // [layer][expert]

  // Whether some experts live outside the compute tier.
  bool streams() const { return streamed_experts > 0; }
  // One line for logs and GetModelInfo.
  std::string Summary() const;
};

// Fails with RESOURCE_EXHAUSTED when the budget is below what must stay
// resident plus two ring slots of one section (one expert unless
// section_experts says more), naming the smallest budget that works.
absl::StatusOr<PlacementPlan> PlanPlacement(const PlacementInput& input);

// "1073741824", "512MiB", "1.5GiB", "64KiB", "3GB" -> bytes. INVALID_ARGUMENT
// for what is not a byte count, less than one byte (0, 0.4) or 2^63 bytes
// and more.
absl::StatusOr<uint64_t> ParseByteSize(const std::string& text);

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_PLACEMENT_H_

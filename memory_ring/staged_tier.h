// StagedTier: the third tier under a device. Its sources are of two kinds:
// host buffers the upper tier (host -> device) copies from directly, and
// the files of a disk tier, which hold what host memory has no room for.
// A section with pieces on disk is read into one of the staging buffers
// (themselves among the upper tier's sources) at the pieces' slot offsets,
// then copied up with the section's host pieces in one upper copy; the
// staging buffer is reused once that copy has landed. So a model larger
// than host RAM still streams: disk -> pinned staging -> device.
#ifndef RINGMOE_MEMORY_RING_STAGED_TIER_H_
#define RINGMOE_MEMORY_RING_STAGED_TIER_H_

#include <memory>
#include <vector>

#include "memory_ring/tier.h"

namespace ringmoe::memory_ring {

// Source i < host_sources of a CopyPiece is the upper tier's source i;
// source host_sources + f is the disk tier's source f. The upper tier's
// sources host_sources .. host_sources + staging.size() - 1 are `staging`
// (each as large as the largest section), in order.
std::unique_ptr<Tier> CreateStagedTier(std::unique_ptr<Tier> upper,
                                       int host_sources,
                                       std::vector<TierBuffer*> staging,
                                       std::unique_ptr<Tier> disk);

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_STAGED_TIER_H_

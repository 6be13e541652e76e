// CopyEngineTier: a tier between two host memories with a copy engine of
// its own: one thread that copies sections from the source buffers into
// compute-tier buffers, optionally no faster than a set bandwidth. The
// stand-in device's "PCIe" (engine/backend/stand_in_device.h): the ring,
// the expert cache and their fences run over it as over a GPU's copy
// stream, in tests on machines without one.
#ifndef RINGMOE_MEMORY_RING_COPY_ENGINE_TIER_H_
#define RINGMOE_MEMORY_RING_COPY_ENGINE_TIER_H_

#include <memory>
#include <vector>

#include "memory_ring/tier.h"

namespace ringmoe::memory_ring {

// Source i of a CopyPiece is sources[i] (which must outlive the tier).
// bytes_per_second <= 0: copies run as fast as memcpy. Compute is
// synchronous (fences are null): a copy after compute that has returned
// cannot overtake it.
std::unique_ptr<Tier> CreateCopyEngineTier(std::vector<TierBuffer*> sources,
                                           double bytes_per_second);

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_COPY_ENGINE_TIER_H_

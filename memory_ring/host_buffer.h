// Plain host memory as a TierBuffer: ring sections and expert-cache slots
// on the host (disk tier), sources and compute-tier buffers of the copy
// engine. Page aligned (O_DIRECT reads land in it), huge pages requested
// when large (base/host_memory.h): the CPU kernels stream experts out of
// these buffers as they do out of resident weights.
#ifndef RINGMOE_MEMORY_RING_HOST_BUFFER_H_
#define RINGMOE_MEMORY_RING_HOST_BUFFER_H_

#include <cstddef>
#include <memory>

#include "memory_ring/tier.h"

namespace ringmoe::memory_ring {

// `bytes` of host memory (size() == bytes; at least one byte is allocated
// for zero); nullptr when the host has none to give.
std::unique_ptr<TierBuffer> NewHostBuffer(size_t bytes);

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_HOST_BUFFER_H_

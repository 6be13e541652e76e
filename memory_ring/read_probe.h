// The read bandwidth a tier's copy path reaches on large sequential copies:
// the ceiling that streaming benchmarks report their throughput against.
#ifndef RINGMOE_MEMORY_RING_READ_PROBE_H_
#define RINGMOE_MEMORY_RING_READ_PROBE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "memory_ring/tier.h"

namespace ringmoe::memory_ring {

// Copies [offset, offset + bytes) of `source` through `tier` in `chunk`-sized
// pieces, `in_flight` at a time (as the ring would keep several sections
// loading), and returns bytes per second.
absl::StatusOr<double> MeasureReadBandwidth(Tier* tier, int source,
                                            uint64_t offset, uint64_t bytes,
                                            uint64_t chunk = 64 << 20,
                                            int in_flight = 2);

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_READ_PROBE_H_

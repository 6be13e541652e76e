// The machine's own ceilings, measured in the process whose figures they
// bound: streaming-read bandwidth (decode's limit) and FMA throughput
// (prefill's limit). Both use every thread of the pool.
#ifndef RINGMOE_KERNELS_CPU_PROBES_H_
#define RINGMOE_KERNELS_CPU_PROBES_H_

#include <cstdint>

#include "base/thread_pool.h"

namespace ringmoe::kernels {

// Bytes per second at which the threads together read a `bytes`-sized
// buffer (much larger than the caches): the median over `repetitions` of
// the faster of two read loops (with and without software prefetch).
double MeasureReadBandwidth(ThreadPool* pool, int64_t bytes = int64_t{1} << 30,
                            int repetitions = 7);

// Median over `repetitions` of the float32 FLOP/s of independent 8-wide FMA
// chains on every thread (an FMA counts as two FLOPs).
double MeasurePeakFlops(ThreadPool* pool, int repetitions = 7);

// The same for 16-lane bf16 pair products (vdpbf16ps, four FLOPs per lane:
// ActivationPrecision::kBf16's ceiling) where UseAvx512Bf16(); 0 elsewhere.
double MeasurePeakBf16Flops(ThreadPool* pool, int repetitions = 7);

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_PROBES_H_

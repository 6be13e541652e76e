// The machine's own ceilings, measured in the process whose figures they
// bound: streaming-read bandwidth (decode's limit) and FMA throughput
// (prefill's limit), and the prefetch hint the decode products read memory
// fastest with. All use every thread of the pool.
#ifndef RINGMOE_KERNELS_CPU_PROBES_H_
#define RINGMOE_KERNELS_CPU_PROBES_H_

#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/cpu/cpu_features.h"

namespace ringmoe::kernels {

// Bytes per second at which the threads together read a `bytes`-sized
// buffer (much larger than the caches): the median over `repetitions` of
// the fastest of three read loops (one stream per thread with and without
// software prefetch, three streams per thread). The buffer is host memory
// as the weights get it (AllocateHostMemory: huge pages requested), so the
// ceiling is measured on the pages the products read. 0 when no such
// buffer can be allocated.
double MeasureReadBandwidth(ThreadPool* pool, int64_t bytes = int64_t{1} << 30,
                            int repetitions = 7);

// One sample of the read bandwidth: bytes per second at which the threads
// together read the n floats at `data` (memory the caller has written), each
// thread a contiguous slice as one stream left to the hardware prefetchers,
// MeasureReadBandwidth's first loop. For benchmarks that alternate it with
// their own work, since the memory's speed can change within seconds.
double ReadRate(ThreadPool* pool, const float* data, int64_t n);

// Median over `repetitions` of the float32 FLOP/s of independent 8-wide FMA
// chains on every thread (an FMA counts as two FLOPs).
double MeasurePeakFlops(ThreadPool* pool, int repetitions = 7);

// The same for 16-lane bf16 pair products (vdpbf16ps, four FLOPs per lane:
// ActivationPrecision::kBf16's ceiling) where UseAvx512Bf16(); 0 elsewhere.
double MeasurePeakBf16Flops(ThreadPool* pool, int repetitions = 7);

// Whether the decode products of `type` read memory faster with software
// prefetch or with the hardware prefetchers alone (WeightPrefetch in
// cpu_features.h): one-activation-row products over `bytes` of weights of
// that type (default: twice the last-level cache, within 64-256 MiB),
// streamed and in tiles, on every thread of the pool, each choice timed
// `repetitions` times, alternating, so both see the same memory state. The
// faster is set (SetWeightPrefetch) for the type's products after; the
// figures are the medians of the weight bytes read per second. Where the
// scalar path runs (no prefetches), repetitions < 1 or the host has no
// memory for the matrices, measures nothing: kSoftware and zero figures.
struct WeightPrefetchTuning {
  WeightType type = WeightType::kF32;
  WeightPrefetch chosen = WeightPrefetch::kSoftware;
  double software_bytes_per_s = 0;
  double hardware_only_bytes_per_s = 0;
};
WeightPrefetchTuning TuneWeightPrefetch(WeightType type, ThreadPool* pool,
                                        int64_t bytes = 0, int repetitions = 3);

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_PROBES_H_

// Run-time choice between the AVX-512, AVX2/FMA/F16C and scalar kernels.
#ifndef RINGMOE_KERNELS_CPU_CPU_FEATURES_H_
#define RINGMOE_KERNELS_CPU_CPU_FEATURES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/weight_format.h"

namespace ringmoe::kernels {

// True when the CPU supports AVX2, FMA and F16C and the scalar path is not
// forced (by SetForceScalar or RINGMOE_FORCE_SCALAR=1 in the environment).
bool UseAvx2();

// True when UseAvx2() holds, the CPU also supports AVX-512 F, BW, VL and
// VNNI, and the AVX2 path is not forced (by SetForceAvx2 or
// RINGMOE_FORCE_AVX2=1 in the environment). Selects the one-activation-row
// products of avx512.cc.
bool UseAvx512();

// True when UseAvx512() holds and the CPU also supports AVX512-BF16.
// Selects the products of bf16 weights against bf16 activations of
// avx512_bf16.cc (ActivationPrecision::kBf16 in ops.h).
bool UseAvx512Bf16();

// True when UseAvx512Bf16() holds and the CPU also supports AVX512-VBMI
// (byte permutes). Selects avx512_bf16.cc's products of fp8 weights against
// one activation row rounded to bf16, whose weights widen by byte lookups.
bool UseAvx512Bf16Vbmi();

// The L1 data cache and the L2 cache of one core in bytes, as the C
// library reports them (32 KiB and 512 KiB where it reports nothing).
int64_t L1DataCacheBytes();
int64_t L2CacheBytes();
// The last-level (L3) cache in bytes as the C library reports it (32 MiB
// where it reports nothing).
int64_t L3CacheBytes();

// Whether the one-activation-row products of a weight type (decode at
// batch 1, bound by memory bandwidth) issue software prefetches ahead of
// the weight rows they stream (WeightPrefetcher::Stream and ::TileRow in
// isa_unit-inl.h) or leave the streams to the hardware prefetchers. Which reads
// memory faster depends on the CPU and on the kernel's work per byte (on one
// Zen 3 VM software prefetch cost bf16 decode 5-10% and gained int8 and int4
// 10-15%; on a Zen 4 one it gained bf16 15-20%), so it is measured per type
// (TuneWeightPrefetch in probes.h); kSoftware until then. Outputs do not
// depend on it.
enum class WeightPrefetch { kSoftware = 0, kHardwareOnly = 1 };

namespace internal {
// A WeightPrefetch per WeightType, read relaxed (the instruction-set units
// read it in their inner loops: see isa_unit-inl.h).
extern int weight_prefetch[static_cast<int>(WeightType::kMxfp4) + 1];
}  // namespace internal

WeightPrefetch GetWeightPrefetch(WeightType type);
// Sets the choice for products of `type` started afterwards.
void SetWeightPrefetch(WeightType type, WeightPrefetch prefetch);
// "software" or "hardware", as the flag --weight_prefetch spells them.
const char* WeightPrefetchName(WeightPrefetch prefetch);

// One instruction-set extension the kernels look for, and whether this CPU
// and its operating system support it.
struct CpuFeature {
  const char* name;  // as /proc/cpuinfo spells it: "avx2", "avx512vnni", ...
  bool present;
};
// SSE4.2, AVX, AVX2, FMA, F16C, AVX-512 F/BW/VL/VNNI, AVX512-BF16 and
// AVX512-VBMI, in that order.
std::vector<CpuFeature> CpuFeatures();

// The processor's name from CPUID ("unknown" where it gives none).
std::string CpuBrand();

// The path the kernels are forced onto: "scalar" (SetForceScalar or
// RINGMOE_FORCE_SCALAR=1), "avx2" (SetForceAvx2 or RINGMOE_FORCE_AVX2=1,
// where AVX-512 would be used), or null when none is.
const char* ForcedPathName();

// Forces (or stops forcing) the scalar path, so tests cover both paths on
// one machine. Not thread-safe with respect to running kernels.
void SetForceScalar(bool force);

// Forces (or stops forcing) the AVX2 path where AVX-512 would be used, so
// tests and benchmarks compare the two on one machine. Not thread-safe with
// respect to running kernels.
void SetForceAvx2(bool force);

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_CPU_FEATURES_H_

// Run-time choice between the AVX-512, AVX2/FMA/F16C and scalar kernels.
#ifndef RINGMOE_KERNELS_CPU_CPU_FEATURES_H_
#define RINGMOE_KERNELS_CPU_CPU_FEATURES_H_

#include <cstdint>

namespace ringmoe::kernels {

// True when the CPU supports AVX2, FMA and F16C and the scalar path is not
// forced (by SetForceScalar or RINGMOE_FORCE_SCALAR=1 in the environment).
bool UseAvx2();

// True when UseAvx2() holds, the CPU also supports AVX-512 F, BW, VL and
// VNNI, and the AVX2 path is not forced (by SetForceAvx2 or
// RINGMOE_FORCE_AVX2=1 in the environment). Selects the one-activation-row
// products of avx512.cc.
bool UseAvx512();

// The L1 data cache of one core in bytes, as the C library reports it
// (32 KiB where it reports nothing).
int64_t L1DataCacheBytes();

// Forces (or stops forcing) the scalar path, so tests cover both paths on
// one machine. Not thread-safe with respect to running kernels.
void SetForceScalar(bool force);

// Forces (or stops forcing) the AVX2 path where AVX-512 would be used, so
// tests and benchmarks compare the two on one machine. Not thread-safe with
// respect to running kernels.
void SetForceAvx2(bool force);

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_CPU_FEATURES_H_

// Run-time choice between the AVX2/FMA/F16C kernels and the scalar path.
#ifndef RINGMOE_KERNELS_CPU_CPU_FEATURES_H_
#define RINGMOE_KERNELS_CPU_CPU_FEATURES_H_

namespace ringmoe::kernels {

// True when the CPU supports AVX2, FMA and F16C and the scalar path is not
// forced (by SetForceScalar or RINGMOE_FORCE_SCALAR=1 in the environment).
bool UseAvx2();

// Forces (or stops forcing) the scalar path, so tests cover both paths on
// one machine. Not thread-safe with respect to running kernels.
void SetForceScalar(bool force);

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_CPU_FEATURES_H_

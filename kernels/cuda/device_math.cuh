// Device helpers the CUDA kernel files share: warp reductions, the gated
// activations of MLPs, and the operands' ranges of a launch that serves
// several.
#ifndef RINGMOE_KERNELS_CUDA_DEVICE_MATH_CUH_
#define RINGMOE_KERNELS_CUDA_DEVICE_MATH_CUH_

#include "kernels/cuda/ops.h"

namespace ringmoe::cuda {

// The sum of v over the warp, returned to every lane.
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// act(g, u): silu(g) · u, or gpt-oss's clamped SwiGLU.
__device__ __forceinline__ float GatedActivation(
    float g, float u, const GatedActivationParams& act) {
  if (act.clamped_swiglu) {
    g = fminf(g, act.limit);
    u = fminf(fmaxf(u, -act.limit), act.limit);
    return (u + 1.f) * g / (1.f + expf(-act.alpha * g));
  }
  return g / (1.f + expf(-g)) * u;
}

// A launch serving several operands (products, tensors, row writes) as
// consecutive ranges of its blocks or work items: operand k takes [first[k],
// first[k + 1]). Passed inside a __grid_constant__ kernel parameter, so
// Find reads it in place.
template <int kMax>
struct LaunchRanges {
  int64_t first[kMax + 1] = {0};
  int count = 0;

  // The next operand's range, of `size` (negative counts as none).
  void Append(int64_t size) {
    first[count + 1] = first[count] + (size > 0 ? size : 0);
    ++count;
  }
  __host__ __device__ int64_t total() const { return first[count]; }
  // The operand whose range holds i < total().
  __device__ int Find(int64_t i) const {
    int k = 0;
    while (k + 1 < count && i >= first[k + 1]) ++k;
    return k;
  }
};

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_DEVICE_MATH_CUH_

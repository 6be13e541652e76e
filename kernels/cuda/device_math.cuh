// Device helpers the CUDA kernel files share: warp reductions and the gated
// activations of MLPs.
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

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_DEVICE_MATH_CUH_

#include <cstdint>

#include "kernels/cuda/rms_norm.h"

namespace ringmoe::cuda {
namespace {

constexpr int kThreads = 256;

__inline__ __device__ float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// One block per row; the sum of squares is reduced in float32 across the
// block, so rows of any length (ragged, not multiples of 32) are handled.
// kAddDelta: the row is x + delta, written back to x first (each thread
// reads back only what it wrote). x and y may alias (in-place
// normalisation): neither is __restrict__. vectorized: cols a multiple of
// four and every row 16-byte aligned, so each thread moves four values per
// load.
template <bool kAddDelta>
__global__ void RmsNormF32Kernel(float* x, const float* __restrict__ delta,
                                 const float* __restrict__ weight, float* y,
                                 int cols, float eps, bool vectorized) {
  float* row_in = x + static_cast<size_t>(blockIdx.x) * cols;
  // Null without kAddDelta: offset only where it is read.
  const float* row_delta =
      kAddDelta ? delta + static_cast<size_t>(blockIdx.x) * cols : nullptr;
  float* row_out = y + static_cast<size_t>(blockIdx.x) * cols;
  const int quads = vectorized ? cols / 4 : 0;
  float4* in4 = reinterpret_cast<float4*>(row_in);
  float sum = 0.f;
#pragma unroll 4
  for (int i = threadIdx.x; i < quads; i += blockDim.x) {
    float4 v = in4[i];
    if constexpr (kAddDelta) {
      const float4 d = reinterpret_cast<const float4*>(row_delta)[i];
      v = make_float4(v.x + d.x, v.y + d.y, v.z + d.z, v.w + d.w);
      in4[i] = v;
    }
    sum += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  }
  for (int i = 4 * quads + threadIdx.x; i < cols; i += blockDim.x) {
    float v = row_in[i];
    if constexpr (kAddDelta) {
      v += row_delta[i];
      row_in[i] = v;
    }
    sum += v * v;
  }
  __shared__ float warp_sums[kThreads / 32];
  sum = WarpSum(sum);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.f;
    v = WarpSum(v);
    if (threadIdx.x == 0) warp_sums[0] = v;
  }
  __syncthreads();
  const float scale = rsqrtf(warp_sums[0] / cols + eps);
  const float4* weight4 = reinterpret_cast<const float4*>(weight);
  float4* out4 = reinterpret_cast<float4*>(row_out);
  for (int i = threadIdx.x; i < quads; i += blockDim.x) {
    const float4 v = in4[i], g = weight4[i];
    out4[i] = make_float4(v.x * scale * g.x, v.y * scale * g.y,
                          v.z * scale * g.z, v.w * scale * g.w);
  }
  for (int i = 4 * quads + threadIdx.x; i < cols; i += blockDim.x) {
    row_out[i] = row_in[i] * scale * weight[i];
  }
}

template <bool kAddDelta>
cudaError_t Launch(float* x, const float* delta, const float* weight, float* y,
                   int rows, int cols, float eps, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return cudaSuccess;
  const bool vectorized =
      cols % 4 == 0 &&
      (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(delta) |
       reinterpret_cast<uintptr_t>(y) | reinterpret_cast<uintptr_t>(weight)) %
              16 ==
          0;
  RmsNormF32Kernel<kAddDelta><<<rows, kThreads, 0, stream>>>(
      x, delta, weight, y, cols, eps, vectorized);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchRmsNormF32(const float* x, const float* weight, float* y,
                             int rows, int cols, float eps,
                             cudaStream_t stream) {
  // Read only: without kAddDelta the kernel writes y alone.
  return Launch<false>(const_cast<float*>(x), nullptr, weight, y, rows, cols,
                       eps, stream);
}

cudaError_t LaunchAddRmsNormF32(float* x, const float* delta,
                                const float* weight, float* y, int rows,
                                int cols, float eps, cudaStream_t stream) {
  return Launch<true>(x, delta, weight, y, rows, cols, eps, stream);
}

}  // namespace ringmoe::cuda

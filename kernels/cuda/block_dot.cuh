// A block of threads dotting a few weight rows with a few activation rows:
// the inner product of the decode-sized products (products.cu) and of the
// routed experts' MLPs (routed_experts.cu). The block's threads split the
// columns, each thread loading every weight row's share at once, so a
// thread has kDotWeightRows loads in flight and each activation value it
// loads serves all of those rows; partial sums meet in shared memory.
#ifndef RINGMOE_KERNELS_CUDA_BLOCK_DOT_CUH_
#define RINGMOE_KERNELS_CUDA_BLOCK_DOT_CUH_

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/weight_decode.cuh"

namespace ringmoe::cuda {

// Weight rows per block.
inline constexpr int kDotWeightRows = 4;
// Activation rows per pass.
inline constexpr int kDotActivationRows = 8;
inline constexpr int kMaxDotThreads = 256;

// Threads for a block over rows of `cols` columns: one eight-column chunk
// each (one column when not vectorized), in whole warps, at most
// kMaxDotThreads.
inline int BlockDotThreads(int64_t cols, bool vectorized) {
  const int64_t work = vectorized ? (cols + 7) / 8 : cols;
  return static_cast<int>(
      std::clamp<int64_t>((work + 31) / 32 * 32, 32, kMaxDotThreads));
}

// Where a block's dot products meet: result[i][t] = weight row i ·
// activation row t once BlockDot returns.
struct BlockDotShared {
  float partial[kMaxDotThreads / 32][kDotWeightRows * kDotActivationRows];
  float result[kDotWeightRows][kDotActivationRows];
};

// shared.result[i][t] = row[i] of *w[i] · x[t][0, cols) for i < rows, t <
// m <= kActs, where cols = w[0]->cols (every weight the same). kActs below
// kDotActivationRows keeps fewer accumulators (more blocks per SM). Every
// thread of the block calls it with the same arguments (it synchronises the
// block); the result is visible to all of them on return. vectorized: every
// weight CanDecode8 and every x[t] is 16-byte aligned.
template <WeightType kType, int kActs>
__device__ __forceinline__ void BlockDot(
    const DeviceWeight* const (&w)[kDotWeightRows],
    const int64_t (&row)[kDotWeightRows], int rows,
    const float* const (&x)[kDotActivationRows], int m, bool vectorized,
    BlockDotShared& shared) {
  const int tid = threadIdx.x, threads = blockDim.x;
  const int64_t cols = w[0]->cols;
  static_assert(kActs >= 1 && kActs <= kDotActivationRows);
  float acc[kDotWeightRows][kActs] = {};
  if (vectorized) {
    for (int64_t c = static_cast<int64_t>(tid) * 8; c < cols;
         c += static_cast<int64_t>(threads) * 8) {
      // Every row's load issued before any arithmetic waits on one.
      float v[kDotWeightRows][8];
#pragma unroll
      for (int i = 0; i < kDotWeightRows; ++i) {
        if (i < rows) {
          Decode8<kType>(*w[i], row[i], c, v[i]);
        } else {
#pragma unroll
          for (int k = 0; k < 8; ++k) v[i][k] = 0.f;
        }
      }
#pragma unroll
      for (int t = 0; t < kActs; ++t) {
        if (t < m) {
          const float4* xp = reinterpret_cast<const float4*>(x[t] + c);
          const float4 a = xp[0], b = xp[1];
#pragma unroll
          for (int i = 0; i < kDotWeightRows; ++i) {
            acc[i][t] += v[i][0] * a.x + v[i][1] * a.y + v[i][2] * a.z +
                         v[i][3] * a.w + v[i][4] * b.x + v[i][5] * b.y +
                         v[i][6] * b.z + v[i][7] * b.w;
          }
        }
      }
    }
  } else {
    for (int64_t c = tid; c < cols; c += threads) {
      float v[kDotWeightRows];
#pragma unroll
      for (int i = 0; i < kDotWeightRows; ++i) {
        v[i] = i < rows ? WeightAt(*w[i], row[i], c) : 0.f;
      }
#pragma unroll
      for (int t = 0; t < kActs; ++t) {
        if (t < m) {
          const float xt = x[t][c];
#pragma unroll
          for (int i = 0; i < kDotWeightRows; ++i) acc[i][t] += v[i] * xt;
        }
      }
    }
  }
  const int lane = tid & 31, warp = tid >> 5, warps = (threads + 31) >> 5;
  // The previous call's result may still be read.
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kDotWeightRows; ++i) {
#pragma unroll
    for (int t = 0; t < kActs; ++t) {
      if (t < m) {
        const float sum = WarpSum(acc[i][t]);
        if (lane == 0) shared.partial[warp][i * kDotActivationRows + t] = sum;
      }
    }
  }
  __syncthreads();
  if (tid < kDotWeightRows * kDotActivationRows &&
      tid % kDotActivationRows < m) {
    float sum = 0.f;
    for (int k = 0; k < warps; ++k) sum += shared.partial[k][tid];
    shared.result[tid / kDotActivationRows][tid % kDotActivationRows] = sum;
  }
  __syncthreads();
}

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_BLOCK_DOT_CUH_

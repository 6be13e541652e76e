// A block of warps dotting 16 weight rows with up to 8 · kTiles activation
// rows on the tensor cores: the inner product of products of 9 to
// kMaxMmaProductRows rows (products.cu) and of the routed experts' MLPs for
// more than one token (routed_experts.cu), where BlockDot's float FMAs cost
// more time than reading the weights.
//
// Precision is float32's, not TF32's: each operand is split into a TF32 high
// part and a TF32 remainder, and the three products that matter (hi·hi,
// hi·lo, lo·hi) are summed on the tensor cores, so a term carries about 22
// significant bits and the sum float32 accumulation (the "3xTF32" scheme).
// Weights whose decoded values are exact in TF32 (bf16, f16, mxfp4: 11
// significant bits at most) have no remainder and take two products.
//
// The warps split the columns, 32 per warp and step. Within a step, lane
// (g, q) = (lane / 4, lane % 4) decodes eight consecutive values of weight
// rows g and g + 8 (one Decode8 each) and loads eight consecutive
// activations of row g of each tile; the eight columns feed four m16n8k8
// products as k slots q and q + 4 — the same permutation of the columns for
// both operands, so each lane's loads are whole 16- and 32-byte loads
// rather than the fragment layout's scattered ones.
#ifndef RINGMOE_KERNELS_CUDA_MMA_DOT_CUH_
#define RINGMOE_KERNELS_CUDA_MMA_DOT_CUH_

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/weight_decode.cuh"

namespace ringmoe::cuda {

// Weight rows per block: one m16 tile.
inline constexpr int kMmaWeightRows = 16;
// Activation rows per tile: one n8 tile.
inline constexpr int kMmaTileRows = 8;
// Warps per block, splitting the columns.
inline constexpr int kMmaWarps = 8;
inline constexpr int kMmaThreads = 32 * kMmaWarps;
// Tiles per pass: activation rows beyond 8 · kMaxMmaTiles take passes.
inline constexpr int kMaxMmaTiles = 4;

// launch(std::integral_constant<int, tiles>{}): a kernel launcher templated
// on the tiles per pass, called with those for n activation rows (1, 2 or
// kMaxMmaTiles) as a constant.
template <typename Launch>
void WithMmaTiles(int64_t n, Launch&& launch) {
  if (n <= kMmaTileRows) {
    launch(std::integral_constant<int, 1>{});
  } else if (n <= 2 * kMmaTileRows) {
    launch(std::integral_constant<int, 2>{});
  } else {
    launch(std::integral_constant<int, kMaxMmaTiles>{});
  }
}

// The block's 16 weight rows as two halves of eight: row i of half h is row
// first[h] + step[h] · i of *w[h], present for i < count[h] (absent rows
// count as zero). Every weight has the same columns.
struct MmaRows {
  const DeviceWeight* w[2];
  int64_t first[2];
  int64_t step[2];
  int count[2];
};

template <int kTiles>
struct MmaDotShared {
  // Each warp's sums; after MmaDot, partial[0][i][t] = weight row i ·
  // activation row t.
  float partial[kMmaWarps][kMmaWeightRows][kMmaTileRows * kTiles];
};

// x rounded to TF32 (nearest, ties away), as the bits mma reads.
__device__ __forceinline__ uint32_t Tf32(float x) {
  uint32_t bits;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(bits) : "f"(x));
  return bits;
}

// c += a · b for one m16n8k8 TF32 tile: a0 = (row g, k q), a1 = (g + 8, q),
// a2 = (g, q + 4), a3 = (g + 8, q + 4); b0 = (k q, col g), b1 = (q + 4, g);
// c0, c1 = (row g, cols 2q, 2q + 1), c2, c3 = (g + 8, 2q, 2q + 1).
__device__ __forceinline__ void MmaTf32(float (&c)[4], uint32_t a0, uint32_t a1,
                                        uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Whether every decoded value of kType is exact in TF32.
template <WeightType kType>
inline constexpr bool kExactInTf32 =
    kType == WeightType::kBF16 || kType == WeightType::kF16 ||
    kType == WeightType::kMxfp4;

// shared.partial[0][i][t] = weight row i of `rows` · x row t over [0, cols),
// for t < m <= 8 · kTiles; rows of t >= m are not written. x[k] points at
// activation row 8k + g of this lane (any valid row where that is >= m: its
// column of the product is not kept). Every weight CanDecode8 and every
// activation row is 16-byte aligned. Every thread of a block of kMmaThreads
// calls it with the same rows, cols and m (it synchronises the block); the
// result is visible to all of them on return.
template <WeightType kType, int kTiles>
__device__ __forceinline__ void MmaDot(const MmaRows& rows, int64_t cols,
                                       const float* const (&x)[kTiles], int m,
                                       MmaDotShared<kTiles>& shared) {
  static_assert(kTiles >= 1 && kTiles <= kMaxMmaTiles);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  bool present[2];
  int64_t row[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    present[h] = g < rows.count[h];
    row[h] = rows.first[h] + rows.step[h] * g;
  }
  float acc[kTiles][4] = {};
  // Two steps' loads in flight before either's products.
#pragma unroll 2
  for (int64_t c0 = int64_t{warp} * 32; c0 < cols;
       c0 += int64_t{kMmaWarps} * 32) {
    const int64_t c = c0 + 8 * q;
    const bool inside = c < cols;
    float a[2][8];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (inside && present[h]) {
        Decode8<kType>(*rows.w[h], row[h], c, a[h]);
      } else {
#pragma unroll
        for (int k = 0; k < 8; ++k) a[h][k] = 0.f;
      }
    }
    uint32_t a_hi[2][8], a_lo[2][8];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        a_hi[h][k] = Tf32(a[h][k]);
        a_lo[h][k] = kExactInTf32<kType>
                         ? 0u
                         : Tf32(a[h][k] - __uint_as_float(a_hi[h][k]));
      }
    }
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      // Uniform over the block: every lane takes part in each mma.
      if (kMmaTileRows * t >= m) break;
      float b[8] = {};
      if (inside) {
        const float4* p = reinterpret_cast<const float4*>(x[t] + c);
        const float4 lo = p[0], hi = p[1];
        b[0] = lo.x, b[1] = lo.y, b[2] = lo.z, b[3] = lo.w;
        b[4] = hi.x, b[5] = hi.y, b[6] = hi.z, b[7] = hi.w;
      }
      uint32_t b_hi[8], b_lo[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        b_hi[k] = Tf32(b[k]);
        b_lo[k] = Tf32(b[k] - __uint_as_float(b_hi[k]));
      }
      // Product j takes columns c + 2j (k slot q) and c + 2j + 1 (slot q +
      // 4); the small terms first.
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int k0 = 2 * j, k1 = 2 * j + 1;
        if constexpr (!kExactInTf32<kType>) {
          MmaTf32(acc[t], a_lo[0][k0], a_lo[1][k0], a_lo[0][k1], a_lo[1][k1],
                  b_hi[k0], b_hi[k1]);
        }
        MmaTf32(acc[t], a_hi[0][k0], a_hi[1][k0], a_hi[0][k1], a_hi[1][k1],
                b_lo[k0], b_lo[k1]);
        MmaTf32(acc[t], a_hi[0][k0], a_hi[1][k0], a_hi[0][k1], a_hi[1][k1],
                b_hi[k0], b_hi[k1]);
      }
    }
  }
  // The previous call's result may still be read.
  __syncthreads();
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    if (kMmaTileRows * t >= m) break;
    const int col = kMmaTileRows * t + 2 * q;
    shared.partial[warp][g][col] = acc[t][0];
    shared.partial[warp][g][col + 1] = acc[t][1];
    shared.partial[warp][g + 8][col] = acc[t][2];
    shared.partial[warp][g + 8][col + 1] = acc[t][3];
  }
  __syncthreads();
  constexpr int kCols = kMmaTileRows * kTiles;
  for (int e = threadIdx.x; e < kMmaWeightRows * kCols; e += kMmaThreads) {
    const int i = e / kCols, t = e % kCols;
    if (t >= m) continue;
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < kMmaWarps; ++k) sum += shared.partial[k][i][t];
    shared.partial[0][i][t] = sum;
  }
  __syncthreads();
}

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_MMA_DOT_CUH_

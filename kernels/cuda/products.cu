// Products against stored weights: a fused pass over the stored bytes for
// few rows (a block per kDotWeightRows weight rows, each thread decoding
// eight values per load), the same pass on the tensor cores for up to
// kMaxMmaProductRows rows (a block per kMmaWeightRows weight rows), tiles
// dequantised to float32 and multiplied by cuBLAS for more.
#include <algorithm>

#include "kernels/cuda/block_dot.cuh"
#include "kernels/cuda/cublas_loader.h"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/mma_dot.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/weight_decode.cuh"

namespace ringmoe::cuda {
namespace {

static_assert(kMaxFusedProductRows == kDotActivationRows,
              "a fused product is one BlockDot pass");
// Floats of dequantised weight per cuBLAS tile: whole rows, at most this.
constexpr int64_t kTileFloats = int64_t{1} << 24;

// The operands of one LaunchFusedProducts, each a range of blocks.
struct FusedProductsParams {
  ProductOperands products[kMaxProductsPerLaunch];
  LaunchRanges<kMaxProductsPerLaunch> blocks;
};

// y[t, r] = w[r] · x[t] of the block's product, for its kDotWeightRows rows
// r and t < n <= kActs. The parameters are read in place (grid constant),
// so that picking a product by the block's index copies nothing to local
// memory.
template <WeightType kType, int kActs>
__global__ void __launch_bounds__(kMaxDotThreads)
    FusedProductKernel(const __grid_constant__ FusedProductsParams params,
                       int n, bool vectorized) {
  __shared__ BlockDotShared shared;
  const int p = params.blocks.Find(blockIdx.x);
  const DeviceWeight w = params.products[p].w;
  const float* const x = params.products[p].d_x;
  float* const y = params.products[p].d_y;
  const int64_t first =
      (blockIdx.x - params.blocks.first[p]) * int64_t{kDotWeightRows};
  const int rows = static_cast<int>(
      min(static_cast<int64_t>(kDotWeightRows), w.rows - first));
  const DeviceWeight* const weights[kDotWeightRows] = {&w, &w, &w, &w};
  const int64_t row[kDotWeightRows] = {first, first + 1, first + 2, first + 3};
  const float* const xs[kDotActivationRows] = {x,
                                               x + w.cols,
                                               x + 2 * w.cols,
                                               x + 3 * w.cols,
                                               x + 4 * w.cols,
                                               x + 5 * w.cols,
                                               x + 6 * w.cols,
                                               x + 7 * w.cols};
  BlockDot<kType, kActs>(weights, row, rows, xs, n, vectorized, shared);
  const int i = threadIdx.x / kDotActivationRows;
  const int t = threadIdx.x % kDotActivationRows;
  if (i < rows && t < n) y[t * w.rows + first + i] = shared.result[i][t];
}

// y[t, r] = w[r] · x[t] for the block's kMmaWeightRows rows r and every t <
// n, 8 · kTiles rows of x a pass.
template <WeightType kType, int kTiles>
__global__ void __launch_bounds__(kMmaThreads)
    MmaProductKernel(const __grid_constant__ DeviceWeight w,
                     const float* __restrict__ x, int n,
                     float* __restrict__ y) {
  __shared__ MmaDotShared<kTiles> shared;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kMmaWeightRows;
  const int64_t left = w.rows - first;
  const MmaRows rows{{&w, &w},
                     {first, first + kMmaTileRows},
                     {1, 1},
                     {static_cast<int>(min(left, int64_t{kMmaTileRows})),
                      static_cast<int>(min(max(left - kMmaTileRows, int64_t{0}),
                                           int64_t{kMmaTileRows}))}};
  constexpr int kPassRows = kMmaTileRows * kTiles;
  const int g = (threadIdx.x & 31) >> 2;
  for (int done = 0; done < n; done += kPassRows) {
    const int m = min(kPassRows, n - done);
    const float* xs[kTiles];
#pragma unroll
    for (int t = 0; t < kTiles; ++t) {
      xs[t] =
          x + static_cast<int64_t>(done + min(kMmaTileRows * t + g, m - 1)) *
                  w.cols;
    }
    MmaDot<kType, kTiles>(rows, w.cols, xs, m, shared);
    // Consecutive threads write consecutive weight rows of one x row.
    for (int e = threadIdx.x; e < kMmaWeightRows * kPassRows;
         e += kMmaThreads) {
      const int i = e % kMmaWeightRows, t = e / kMmaWeightRows;
      if (t < m && i < left) {
        y[static_cast<int64_t>(done + t) * w.rows + first + i] =
            shared.partial[0][i][t];
      }
    }
  }
}

// out[(r - first_row) * cols + c] = w[r, c] for r in [first_row, first_row +
// rows).
__global__ void DequantizeRowsKernel(DeviceWeight w, int64_t first_row,
                                     int64_t rows, float* __restrict__ out) {
  const int64_t total = rows * w.cols;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < total; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = WeightAt(w, first_row + i / w.cols, i % w.cols);
  }
}

template <WeightType kType>
cudaError_t LaunchFused(const FusedProductsParams& params, int64_t n,
                        int64_t blocks, int threads, bool vectorized,
                        cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(blocks));
  if (n == 1) {
    FusedProductKernel<kType, 1>
        <<<grid, threads, 0, stream>>>(params, 1, vectorized);
  } else {
    FusedProductKernel<kType, kDotActivationRows>
        <<<grid, threads, 0, stream>>>(params, static_cast<int>(n), vectorized);
  }
  return cudaGetLastError();
}

template <WeightType kType>
cudaError_t LaunchMma(const DeviceWeight& w, const float* d_x, int64_t n,
                      float* d_y, cudaStream_t stream) {
  const dim3 grid(
      static_cast<unsigned>((w.rows + kMmaWeightRows - 1) / kMmaWeightRows));
  WithMmaTiles(n, [&](auto tiles) {
    MmaProductKernel<kType, decltype(tiles)::value>
        <<<grid, kMmaThreads, 0, stream>>>(w, d_x, static_cast<int>(n), d_y);
  });
  return cudaGetLastError();
}

// Whether a product of n rows at d_x runs on the tensor cores.
bool OnTensorCores(const DeviceWeight& w, const float* d_x, int64_t n) {
  return n > kMaxFusedProductRows && n <= kMaxMmaProductRows && w.cols > 0 &&
         CanDecode8(w) && reinterpret_cast<uintptr_t>(d_x) % 16 == 0;
}

int64_t TileRows(const DeviceWeight& w) {
  return std::clamp<int64_t>(kTileFloats / std::max<int64_t>(w.cols, 1), 1,
                             w.rows);
}

// y[n, rows] (row stride ldy) = x[n, cols] · a[rows, cols]ᵀ, all float32:
// in cuBLAS's column-major terms yᵀ = a · xᵀ.
cudaError_t Sgemm(cublasHandle_t cublas, const float* a, int64_t rows,
                  int64_t cols, const float* x, int64_t n, float* y,
                  int64_t ldy) {
  const float one = 1.f, zero = 0.f;
  const Cublas* api = LoadCublas();
  if (api == nullptr) return cudaErrorSharedObjectInitFailed;
  const cublasStatus_t status =
      api->sgemm(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                 static_cast<int>(n), static_cast<int>(cols), &one, a,
                 static_cast<int>(cols), x, static_cast<int>(cols), &zero, y,
                 static_cast<int>(ldy));
  return status == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
}

}  // namespace

bool CanDecodeVectorized(const DeviceWeight& w) { return CanDecode8(w); }

bool CanLaunchTogether(const DeviceWeight& a, const DeviceWeight& b) {
  return a.type == b.type && a.cols == b.cols;
}

bool ProductUsesCublas(const DeviceWeight& w, const float* d_x, int64_t n) {
  return n > kMaxFusedProductRows && w.rows > 0 && w.cols > 0 &&
         !OnTensorCores(w, d_x, n);
}

int64_t ProductScratchFloats(const DeviceWeight& w, const float* d_x,
                             int64_t n) {
  return ProductUsesCublas(w, d_x, n) && w.type != WeightType::kF32
             ? TileRows(w) * w.cols
             : 0;
}

cudaError_t LaunchFusedProducts(const ProductOperands* products, int count,
                                int64_t n, cudaStream_t stream) {
  if (count < 1 || count > kMaxProductsPerLaunch || n > kMaxFusedProductRows) {
    return cudaErrorInvalidValue;
  }
  if (n <= 0) return cudaSuccess;
  const DeviceWeight& first = products[0].w;
  FusedProductsParams params;
  bool vectorized = true;
  for (int p = 0; p < count; ++p) {
    const ProductOperands& operands = products[p];
    if (!CanLaunchTogether(first, operands.w)) return cudaErrorInvalidValue;
    if (first.cols == 0 && operands.w.rows > 0) {
      if (cudaError_t e = cudaMemsetAsync(
              operands.d_y, 0, n * operands.w.rows * sizeof(float), stream);
          e != cudaSuccess) {
        return e;
      }
    }
    params.products[p] = operands;
    params.blocks.Append(first.cols == 0
                             ? 0
                             : (operands.w.rows + kDotWeightRows - 1) /
                                   kDotWeightRows);
    vectorized = vectorized && CanDecode8(operands.w) &&
                 reinterpret_cast<uintptr_t>(operands.d_x) % 16 == 0;
  }
  const int64_t blocks = params.blocks.total();
  if (blocks == 0) return cudaSuccess;
  const int threads = BlockDotThreads(first.cols, vectorized);
  return WithWeightType(first.type, [&](auto type) {
    return LaunchFused<decltype(type)::value>(params, n, blocks, threads,
                                              vectorized, stream);
  });
}

cudaError_t LaunchProduct(const DeviceWeight& w, const float* d_x, int64_t n,
                          float* d_y, float* d_scratch, cublasHandle_t cublas,
                          cudaStream_t stream) {
  if (n <= 0 || w.rows <= 0) return cudaSuccess;
  if (n <= kMaxFusedProductRows) {
    const ProductOperands operands{w, d_x, d_y};
    return LaunchFusedProducts(&operands, 1, n, stream);
  }
  if (w.cols == 0) return cudaMemsetAsync(d_y, 0, n * w.rows * 4, stream);
  if (OnTensorCores(w, d_x, n)) {
    return WithWeightType(w.type, [&](auto type) {
      return LaunchMma<decltype(type)::value>(w, d_x, n, d_y, stream);
    });
  }
  if (w.type == WeightType::kF32) {
    return Sgemm(cublas, static_cast<const float*>(w.data), w.rows, w.cols, d_x,
                 n, d_y, w.rows);
  }
  const int64_t tile = TileRows(w);
  for (int64_t first = 0; first < w.rows; first += tile) {
    const int64_t rows = std::min(tile, w.rows - first);
    const int64_t blocks = std::min<int64_t>((rows * w.cols + 255) / 256, 4096);
    DequantizeRowsKernel<<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
        w, first, rows, d_scratch);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (cudaError_t e =
            Sgemm(cublas, d_scratch, rows, w.cols, d_x, n, d_y + first, w.rows);
        e != cudaSuccess) {
      return e;
    }
  }
  return cudaSuccess;
}

}  // namespace ringmoe::cuda

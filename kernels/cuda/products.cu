// Products against stored weights: a fused pass over the stored bytes for
// few rows (a block per kDotWeightRows weight rows, each thread decoding
// eight values per load), tiles dequantised to float32 and multiplied by
// cuBLAS for more.
#include <algorithm>

#include "kernels/cuda/block_dot.cuh"
#include "kernels/cuda/cublas_loader.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/weight_decode.cuh"

namespace ringmoe::cuda {
namespace {

static_assert(kMaxFusedProductRows == kDotActivationRows,
              "a fused product is one BlockDot pass");
// Floats of dequantised weight per cuBLAS tile: whole rows, at most this.
constexpr int64_t kTileFloats = int64_t{1} << 24;

// y[t, r] = w[r] · x[t] for the block's kDotWeightRows rows r and t < n
// <= kActs.
template <WeightType kType, int kActs>
__global__ void __launch_bounds__(kMaxDotThreads)
    FusedProductKernel(DeviceWeight w, const float* __restrict__ x, int n,
                       bool vectorized, float* __restrict__ y) {
  __shared__ BlockDotShared shared;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kDotWeightRows;
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
cudaError_t LaunchFused(const DeviceWeight& w, const float* x, int64_t n,
                        float* y, cudaStream_t stream) {
  const bool vectorized =
      CanDecode8(w) && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t blocks = (w.rows + kDotWeightRows - 1) / kDotWeightRows;
  const dim3 grid(static_cast<unsigned>(blocks));
  const int threads = BlockDotThreads(w.cols, vectorized);
  if (n == 1) {
    FusedProductKernel<kType, 1>
        <<<grid, threads, 0, stream>>>(w, x, 1, vectorized, y);
  } else {
    FusedProductKernel<kType, kDotActivationRows><<<grid, threads, 0, stream>>>(
        w, x, static_cast<int>(n), vectorized, y);
  }
  return cudaGetLastError();
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

int64_t ProductScratchFloats(const DeviceWeight& w) {
  return w.type == WeightType::kF32 ? 0 : TileRows(w) * w.cols;
}

cudaError_t LaunchProduct(const DeviceWeight& w, const float* d_x, int64_t n,
                          float* d_y, float* d_scratch, cublasHandle_t cublas,
                          cudaStream_t stream) {
  if (n <= 0 || w.rows <= 0) return cudaSuccess;
  if (w.cols == 0) return cudaMemsetAsync(d_y, 0, n * w.rows * 4, stream);
  if (n <= kMaxFusedProductRows) {
    return WithWeightType(w.type, [&](auto type) {
      return LaunchFused<decltype(type)::value>(w, d_x, n, d_y, stream);
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

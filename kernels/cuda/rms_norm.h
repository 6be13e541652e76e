// RMSNorm on a CUDA device: y = x / sqrt(mean(x^2) + eps) * weight, per row.
#ifndef RINGMOE_KERNELS_CUDA_RMS_NORM_H_
#define RINGMOE_KERNELS_CUDA_RMS_NORM_H_

#include <cuda_runtime.h>

namespace ringmoe::cuda {

// x and y are [rows, cols] row-major float32 device arrays (may alias);
// weight is [cols]. Enqueued on `stream`; returns the launch's error.
cudaError_t LaunchRmsNormF32(const float* x, const float* weight, float* y,
                             int rows, int cols, float eps,
                             cudaStream_t stream);
// x += delta, then y = RMSNorm(x), in one pass: the same float32 sums and
// the same reduction as LaunchAdd followed by LaunchRmsNormF32. x, delta
// and y are [rows, cols]; y aliases neither.
cudaError_t LaunchAddRmsNormF32(float* x, const float* delta,
                                const float* weight, float* y, int rows,
                                int cols, float eps, cudaStream_t stream);

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_RMS_NORM_H_

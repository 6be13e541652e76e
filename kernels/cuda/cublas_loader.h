// cuBLAS, loaded at run time (dlopen) rather than linked. Its libraries
// carry about 110 KB of initial thread-local storage, which glibc would then
// reserve in every thread's stack of every process linking them, GPU in use
// or not: libraries that start threads with small stacks (civetweb, behind
// the metrics endpoint, uses 100 KB) then fail to start them. Loaded, the
// storage is allocated per thread on first use, only in processes that use
// a GPU.
#ifndef RINGMOE_KERNELS_CUDA_CUBLAS_LOADER_H_
#define RINGMOE_KERNELS_CUDA_CUBLAS_LOADER_H_

#include <cublas_v2.h>

#include <string>

namespace ringmoe::cuda {

// The cuBLAS functions the project calls.
struct Cublas {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
  cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t,
                          int, int, int, const float*, const float*, int,
                          const float*, int, const float*, float*, int);
};

// Loads libcublas once (by its soname, then from $CUDA_PATH/lib64 and
// /usr/local/cuda/lib64); null when it cannot, with `error` (if given)
// saying why. Thread-safe.
const Cublas* LoadCublas(std::string* error = nullptr);

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_CUBLAS_LOADER_H_

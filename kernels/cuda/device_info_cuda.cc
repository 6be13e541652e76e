#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <vector>

#include "kernels/cuda/cublas_loader.h"
#include "kernels/cuda/device_info.h"

namespace ringmoe::cuda {
namespace {

// The median seconds of `repeats` runs of `work` on `stream`, timed by
// events after one warm-up run; negative on any failure.
template <typename Work>
double MedianSeconds(cudaStream_t stream, int repeats, Work work) {
  cudaEvent_t start, stop;
  if (cudaEventCreate(&start) != cudaSuccess) return -1;
  if (cudaEventCreate(&stop) != cudaSuccess) return -1;
  std::vector<double> times;
  bool ok = work();
  for (int i = 0; ok && i < repeats; ++i) {
    cudaEventRecord(start, stream);
    ok = work();
    cudaEventRecord(stop, stream);
    float ms = 0;
    ok = ok && cudaEventSynchronize(stop) == cudaSuccess &&
         cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
    times.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!ok || times.empty()) return -1;
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

DeviceCeilings MeasureCeilings(int index) {
  DeviceCeilings c;
  if (cudaSetDevice(index) != cudaSuccess) return c;
  cudaStream_t stream;
  if (cudaStreamCreate(&stream) != cudaSuccess) return c;
  constexpr size_t kCopyBytes = size_t{1} << 30;
  constexpr int kDim = 8192;
  void *a = nullptr, *b = nullptr, *host = nullptr;
  if (cudaMalloc(&a, kCopyBytes) == cudaSuccess &&
      cudaMalloc(&b, kCopyBytes) == cudaSuccess &&
      cudaHostAlloc(&host, kCopyBytes, cudaHostAllocDefault) == cudaSuccess) {
    // Random-looking contents: some memory systems move zeros faster.
    cudaMemset(a, 0x5a, kCopyBytes);
    std::fill_n(static_cast<unsigned char*>(host), kCopyBytes, 0xa5);
    const double copy = MedianSeconds(stream, 5, [&] {
      return cudaMemcpyAsync(b, a, kCopyBytes, cudaMemcpyDeviceToDevice,
                             stream) == cudaSuccess;
    });
    if (copy > 0) c.device_copy_bytes_per_s = 2.0 * kCopyBytes / copy;
    const double upload = MedianSeconds(stream, 5, [&] {
      return cudaMemcpyAsync(a, host, kCopyBytes, cudaMemcpyHostToDevice,
                             stream) == cudaSuccess;
    });
    if (upload > 0) c.host_to_device_bytes_per_s = kCopyBytes / upload;
    cublasHandle_t cublas;
    const Cublas* api = LoadCublas();
    if (api != nullptr && api->create(&cublas) == CUBLAS_STATUS_SUCCESS) {
      api->set_stream(cublas, stream);
      // Three 8192² float32 matrices (768 MiB) in the two buffers.
      float* x = static_cast<float*>(a);
      float* y = static_cast<float*>(b);
      float* z = y + size_t{kDim} * kDim;
      const float one = 1.f, zero = 0.f;
      const double product = MedianSeconds(stream, 5, [&] {
        return api->sgemm(cublas, CUBLAS_OP_T, CUBLAS_OP_N, kDim, kDim, kDim,
                          &one, x, kDim, y, kDim, &zero, z,
                          kDim) == CUBLAS_STATUS_SUCCESS;
      });
      if (product > 0) c.sgemm_flops_per_s = 2.0 * kDim * kDim * kDim / product;
      api->destroy(cublas);
    }
  }
  cudaFree(a);
  cudaFree(b);
  cudaFreeHost(host);
  cudaStreamDestroy(stream);
  return c;
}

bool BuiltWithCuda() { return true; }

std::vector<DeviceInfo> ListDevices(std::string* why_none) {
  std::vector<DeviceInfo> devices;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why_none) *why_none = cudaGetErrorString(err);
    return devices;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    devices.push_back({i, prop.name, prop.major, prop.minor,
                       static_cast<int64_t>(prop.totalGlobalMem),
                       prop.multiProcessorCount});
  }
  if (devices.empty() && why_none) *why_none = "no CUDA device found";
  return devices;
}

}  // namespace ringmoe::cuda

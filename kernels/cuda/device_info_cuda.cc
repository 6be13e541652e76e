#include <cuda_runtime.h>

#include "kernels/cuda/device_info.h"

namespace ringmoe::cuda {

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

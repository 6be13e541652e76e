// The CUDA devices this process can use.
#ifndef RINGMOE_KERNELS_CUDA_DEVICE_INFO_H_
#define RINGMOE_KERNELS_CUDA_DEVICE_INFO_H_

#include <cstdint>
#include <string>
#include <vector>

namespace ringmoe::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int64_t total_memory_bytes = 0;
  int multiprocessors = 0;
};

// True when this binary was built with the CUDA backend.
bool BuiltWithCuda();

// The visible devices; empty when there is no driver, no device, or the
// binary was built without CUDA. `why_none` (if given) says why it is empty.
std::vector<DeviceInfo> ListDevices(std::string* why_none = nullptr);

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_DEVICE_INFO_H_

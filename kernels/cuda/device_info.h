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

// What device `index` reaches, measured now (about a second): device memory
// bandwidth (a device-to-device copy, bytes read plus bytes written per
// second), pinned host-to-device bandwidth (PCIe or its successor), and the
// float32 matrix-product rate through cuBLAS (2 · 8192³ FLOPs per
// product): the ceilings benchmarks report their figures against. All 0
// without CUDA or on any failure.
struct DeviceCeilings {
  double device_copy_bytes_per_s = 0;
  double host_to_device_bytes_per_s = 0;
  double sgemm_flops_per_s = 0;
};
DeviceCeilings MeasureCeilings(int index);

// The visible devices; empty when there is no driver, no device, or the
// binary was built without CUDA. `why_none` (if given) says why it is empty.
std::vector<DeviceInfo> ListDevices(std::string* why_none = nullptr);

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_DEVICE_INFO_H_

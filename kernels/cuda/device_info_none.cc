#include "kernels/cuda/device_info.h"

namespace ringmoe::cuda {

bool BuiltWithCuda() { return false; }

std::vector<DeviceInfo> ListDevices(std::string* why_none) {
  if (why_none)
    *why_none =
        "this binary was built without CUDA (--config=cpu or no toolkit)";
  return {};
}

DeviceCeilings MeasureCeilings(int) { return {}; }

}  // namespace ringmoe::cuda

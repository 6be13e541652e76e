#include <cstdio>
#include <string>

#include "clients/cli/commands.h"
#include "kernels/cuda/device_info.h"

namespace ringmoe::cli {

int RunDevices() {
  std::string why;
  auto devices = cuda::ListDevices(&why);
  if (devices.empty()) {
    std::printf("no CUDA devices: %s\n", why.c_str());
    return 0;
  }
  for (const auto& d : devices) {
    std::printf("cuda:%d  %s  sm_%d%d  %.1f GiB  %d SMs\n", d.index,
                d.name.c_str(), d.compute_major, d.compute_minor,
                d.total_memory_bytes / double(1 << 30), d.multiprocessors);
  }
  return 0;
}

}  // namespace ringmoe::cli

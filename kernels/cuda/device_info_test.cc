#include "kernels/cuda/device_info.h"

#include "gtest/gtest.h"

namespace ringmoe::cuda {
namespace {

TEST(DeviceInfoTest, EmptyListExplainsWhy) {
  std::string why;
  auto devices = ListDevices(&why);
  if (devices.empty()) {
    EXPECT_FALSE(why.empty());
  } else {
    for (const auto& d : devices) {
      EXPECT_FALSE(d.name.empty());
      EXPECT_GT(d.total_memory_bytes, 0);
      EXPECT_GE(d.compute_major, 1);
    }
  }
  if (!BuiltWithCuda()) {
    EXPECT_TRUE(devices.empty());
  }
}

}  // namespace
}  // namespace ringmoe::cuda

#include "memory_ring/read_probe.h"

#include "gtest/gtest.h"
#include "memory_ring/fake_tier.h"

namespace ringmoe::memory_ring {
namespace {

TEST(ReadProbeTest, BandwidthReflectsTheCopyPath) {
  // 10 copies of 1 MiB, two at a time, 20 ms each: about 100 ms in all.
  FakeTier tier(absl::Milliseconds(20), /*threads=*/2);
  auto bw = MeasureReadBandwidth(&tier, 0, 0, 10 << 20, 1 << 20, 2);
  ASSERT_TRUE(bw.ok()) << bw.status();
  EXPECT_GT(*bw, 0);
  EXPECT_LT(*bw, (10 << 20) / 0.09);  // cannot beat the injected delays
  EXPECT_EQ(tier.copies_started(), 10);
}

TEST(ReadProbeTest, ErrorsAreReturned) {
  FakeTier tier(absl::ZeroDuration(), 1);
  tier.FailSource(0);
  EXPECT_FALSE(MeasureReadBandwidth(&tier, 0, 0, 4 << 20, 1 << 20).ok());
}

}  // namespace
}  // namespace ringmoe::memory_ring

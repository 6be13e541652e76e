#include "engine/runtime/placement_policy.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe::runtime {
namespace {

// A GPU machine: an expert of 22.5 MB takes 8 ms on the CPU for one token
// plus 0.5 ms per extra token, 0.9 ms to copy at 25 GB/s, and 0.05 ms +
// 0.001 ms per token on the device.
PathCosts Machine() {
  PathCosts c;
  c.cpu_seconds_fixed = 7.5e-3;
  c.cpu_seconds_per_token = 0.5e-3;
  c.copy_bytes_per_second = 25e9;
  c.device_seconds_fixed = 50e-6;
  c.device_seconds_per_token = 1e-6;
  return c;
}
constexpr uint64_t kExpertBytes = 22'500'000;  // 0.9 ms at 25 GB/s

TEST(PlacementPolicyTest, ParsesEveryMode) {
  for (const char* name : {"auto", "cpu", "stream", "gpu"}) {
    auto mode = ParsePlacementMode(name);
    ASSERT_TRUE(mode.ok()) << name;
    EXPECT_EQ(PlacementModeName(*mode), name);
  }
  const auto bad = ParsePlacementMode("GPU");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("auto, cpu, stream or gpu"),
            absl::string_view::npos);
}

TEST(PlacementPolicyTest, CostsFollowTheModel) {
  const PlacementPolicy p(Machine(), kExpertBytes);
  EXPECT_DOUBLE_EQ(p.CpuSeconds(1), 8e-3);
  EXPECT_DOUBLE_EQ(p.CpuSeconds(11), 13e-3);
  EXPECT_NEAR(p.StreamSeconds(1), 0.9e-3 + 51e-6, 1e-12);
}

// One expert: the cheaper path whenever the two differ by more than the
// model's error (here exact), on either side of the break-even point.
TEST(PlacementPolicyTest, OneExpertGoesToTheCheaperPath) {
  PathCosts slow_copy = Machine();
  slow_copy.copy_bytes_per_second = 1e9;  // 22.5 ms to copy
  const PlacementPolicy p(slow_copy, kExpertBytes);
  for (int64_t n : {1, 4, 16, 29, 31, 64, 512}) {
    const ExpertPlace want = p.StreamSeconds(n) < p.CpuSeconds(n)
                                 ? ExpertPlace::kStream
                                 : ExpertPlace::kCpu;
    EXPECT_EQ(p.Plan({n})[0], want) << n;
  }
  EXPECT_EQ(p.Plan({1})[0], ExpertPlace::kCpu);
  EXPECT_EQ(p.Plan({512})[0], ExpertPlace::kStream);
}

// Two paths in parallel: a decode step's eight one-token experts are split
// so that neither path idles while the other has a long queue.
TEST(PlacementPolicyTest, SplitsAStepToFinishTogether) {
  const PlacementPolicy p(Machine(), kExpertBytes);
  const std::vector<int64_t> tokens(8, 1);
  const std::vector<ExpertPlace> places = p.Plan(tokens);
  double cpu = 0, stream = 0;
  for (size_t i = 0; i < places.size(); ++i) {
    (places[i] == ExpertPlace::kCpu ? cpu : stream) +=
        places[i] == ExpertPlace::kCpu ? p.CpuSeconds(tokens[i])
                                       : p.StreamSeconds(tokens[i]);
  }
  // Streaming is ~8x cheaper per expert: about one expert in nine on the
  // CPU, and the makespan no worse than all streamed.
  EXPECT_LE(std::max(cpu, stream), 8 * p.StreamSeconds(1) + 1e-12);
  EXPECT_GE(std::count(places.begin(), places.end(), ExpertPlace::kStream), 7);

  // A prefill: the expert with many tokens streams, the stragglers with
  // a token or two stay on the CPU when the copy engine is busy.
  PathCosts slow_copy = Machine();
  slow_copy.copy_bytes_per_second = 2.5e9;  // 9 ms per expert
  const PlacementPolicy q(slow_copy, kExpertBytes);
  const std::vector<ExpertPlace> prefill = q.Plan({500, 1, 1, 300});
  EXPECT_EQ(prefill[0], ExpertPlace::kStream);
  EXPECT_EQ(prefill[3], ExpertPlace::kStream);
  EXPECT_EQ(prefill[1], ExpertPlace::kCpu);
  EXPECT_EQ(prefill[2], ExpertPlace::kCpu);
}

// The CPU path's setup is paid once per layer that uses it: with a setup
// as long as a streamed expert, a one-token expert that alone would go to
// the CPU streams, while a second one still joins it there.
TEST(PlacementPolicyTest, TheCpuSetupIsPaidOncePerLayer) {
  PathCosts c = Machine();
  c.copy_bytes_per_second = 2.5e9;  // 9 ms to stream, 8 ms on the CPU
  EXPECT_EQ(PlacementPolicy(c, kExpertBytes).Plan({1})[0], ExpertPlace::kCpu);
  EXPECT_FALSE(PlacementPolicy(c, kExpertBytes).StreamsAny({1}));
  c.cpu_seconds_setup = 2e-3;
  const PlacementPolicy p(c, kExpertBytes);
  EXPECT_EQ(p.Plan({1})[0], ExpertPlace::kStream);
  EXPECT_TRUE(p.StreamsAny({1}));
  // Two: one streams (9 ms), the other on the CPU (2 + 8 ms).
  const std::vector<ExpertPlace> two = p.Plan({1, 1});
  EXPECT_EQ(std::count(two.begin(), two.end(), ExpertPlace::kCpu), 1);
  EXPECT_NE(p.Describe().find("a layer"), std::string::npos);
}

// Measured steps move the model: a CPU that turns out four times slower
// than calibrated sends experts it would have taken to the stream path.
TEST(PlacementPolicyTest, MeasuredStepsRefineTheCosts) {
  PathCosts c = Machine();
  c.copy_bytes_per_second = 2.5e9;  // 9 ms to stream, 8 ms on the CPU
  PlacementPolicy p(c, kExpertBytes);
  EXPECT_EQ(p.Plan({1})[0], ExpertPlace::kCpu);
  for (int i = 0; i < 10; ++i) {
    p.Observe(ExpertPlace::kCpu, p.CpuSeconds(1), 4 * p.CpuSeconds(1));
  }
  EXPECT_EQ(p.Plan({1})[0], ExpertPlace::kStream);
  // Meaningless observations change nothing.
  const double before = p.CpuSeconds(1);
  p.Observe(ExpertPlace::kCpu, 0, 1);
  p.Observe(ExpertPlace::kCpu, 1, 0);
  EXPECT_DOUBLE_EQ(p.CpuSeconds(1), before);
  EXPECT_NE(p.Describe().find("break-even"), std::string::npos);
}

}  // namespace
}  // namespace ringmoe::runtime

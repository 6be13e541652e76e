#include "engine/runtime/placement_policy.h"

#include <algorithm>
#include <random>
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

// Measured layers move the model: a CPU that turns out four times slower
// than calibrated sends experts it would have taken to the stream path.
TEST(PlacementPolicyTest, MeasuredLayersRefineTheCosts) {
  PathCosts c = Machine();
  c.copy_bytes_per_second = 2.5e9;  // 9 ms to stream, 8 ms on the CPU
  PlacementPolicy p(c, kExpertBytes);
  EXPECT_EQ(p.Plan({1})[0], ExpertPlace::kCpu);
  for (size_t i = 0; i < PlacementPolicy::kMinObserved; ++i) {
    p.Observe(ExpertPlace::kCpu, {1}, 4 * 8e-3);
  }
  EXPECT_DOUBLE_EQ(p.CpuSeconds(1), 4 * 8e-3);
  EXPECT_EQ(p.Plan({1})[0], ExpertPlace::kStream);
  // Meaningless observations change nothing.
  const double before = p.CpuSeconds(1);
  p.Observe(ExpertPlace::kCpu, {1}, 0);
  p.Observe(ExpertPlace::kCpu, {}, 1);
  p.Observe(ExpertPlace::kDevice, {1}, 1);
  EXPECT_DOUBLE_EQ(p.CpuSeconds(1), before);
  EXPECT_NE(p.Describe().find("break-even"), std::string::npos);
  EXPECT_NE(p.Describe().find("CPU x4 from 1 tokens"), std::string::npos);
}

// A measured ratio counts once however far off it is, and the correction
// is a median: one stalled layer among normal ones moves nothing, and a
// first stalled layer alone is not yet believed.
TEST(PlacementPolicyTest, AnOutlierLayerDoesNotMoveTheModel) {
  PlacementPolicy p(Machine(), kExpertBytes);
  p.Observe(ExpertPlace::kCpu, {1}, 1.0);  // 125 times the 8 ms modelled
  EXPECT_DOUBLE_EQ(p.CpuSeconds(1), 8e-3);
  for (int i = 0; i < 6; ++i) p.Observe(ExpertPlace::kCpu, {1}, 8e-3);
  p.Observe(ExpertPlace::kCpu, {1}, 1.0);
  EXPECT_DOUBLE_EQ(p.CpuSeconds(1), 8e-3);
}

// Layers are compared with layers of their size: prefill layers four times
// slower than modelled leave a decode expert's cost alone. The stream
// path's measured time holds its per-layer setup, which is not the
// experts'.
TEST(PlacementPolicyTest, OnlyComparableLayersRefineACost) {
  PathCosts c = Machine();
  c.stream_seconds_setup = 1e-3;
  PlacementPolicy p(c, kExpertBytes);
  const double decode = p.StreamSeconds(1);
  const double prefill = p.StreamSeconds(300) + p.StreamSeconds(200);
  for (int i = 0; i < 5; ++i) {
    p.Observe(ExpertPlace::kStream, {300, 200}, 1e-3 + 4 * prefill);
  }
  EXPECT_DOUBLE_EQ(p.StreamSeconds(1), decode);
  EXPECT_NEAR(p.StreamSeconds(200), 4 * (0.95e-3 + 200e-6), 1e-12);
  for (int i = 0; i < 5; ++i) {
    p.Observe(ExpertPlace::kStream, {1, 1}, 1e-3 + 2 * 2 * decode);
  }
  EXPECT_NEAR(p.StreamSeconds(1), 2 * decode, 1e-12);
}

TEST(PlacementPolicyTest, ProbesAreSummarisedByTheirMedian) {
  const Probe p = SummariseProbe({1.0, 1.1, 0.9, 50.0, 1.0, 1.05, 0.95});
  EXPECT_DOUBLE_EQ(p.median, 1.0);
  EXPECT_NEAR(p.spread, 0.15, 1e-12);  // quartiles 0.95 and 1.1
  EXPECT_DOUBLE_EQ(SummariseProbe({2.0}).median, 2.0);
}

// The H200 of docs/bench/gpu: an expert of 12.6 MB copied at 55 GB/s
// (0.23 ms), on a host whose CPU runs a one-token expert in 0.1 ms. Of
// 24 CPU probes one stalled for 3 ms: calibrated from the median, a
// decode layer's two one-token experts both stay on the CPU; the stalled
// probe taken alone would have streamed them.
TEST(PlacementPolicyTest, OneTokenStepStaysOnTheCpuDespiteAnOutlierProbe) {
  constexpr uint64_t kBytes = 12'582'912;
  std::vector<double> cpu_probes(24);
  for (size_t i = 0; i < cpu_probes.size(); ++i) {
    cpu_probes[i] = 0.1e-3 * (1 + 0.02 * (static_cast<int>(i % 5) - 2));
  }
  cpu_probes[3] = 3e-3;
  const Probe cpu = SummariseProbe(cpu_probes);
  PathCosts c;
  c.cpu_seconds_fixed = cpu.median - 2e-6;
  c.cpu_seconds_per_token = 2e-6;
  c.cpu_seconds_setup = 20e-6;
  c.copy_bytes_per_second = 55e9;
  c.device_seconds_fixed = 10e-6;
  c.device_seconds_per_token = 0.1e-6;
  c.stream_seconds_setup = 15e-6;
  c.relative_error = std::max(cpu.spread, 0.05);
  const PlacementPolicy p(c, kBytes);
  const std::vector<ExpertPlace> step = p.Plan({1, 1});
  EXPECT_EQ(step, std::vector<ExpertPlace>(2, ExpertPlace::kCpu));
  EXPECT_FALSE(p.StreamsAny({1, 1}));

  c.cpu_seconds_fixed = cpu_probes[3] - 2e-6;
  EXPECT_TRUE(PlacementPolicy(c, kBytes).StreamsAny({1, 1}));
}

// Synthetic machines whose calibrated paths differ by up to 3x either way:
// a lone expert goes to the cheaper path whenever the two differ by more
// than the model's error, whatever the layers measured before pushed the
// tie-breaking preference to.
TEST(PlacementPolicyTest, TheCheaperPathWinsBeyondTheModelsError) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> factor(1 / 3.0, 3.0);
  std::uniform_real_distribution<double> noise(0.9, 1.1);
  int decided = 0;
  for (int machine = 0; machine < 200; ++machine) {
    PathCosts c;
    c.cpu_seconds_fixed = 0.2e-3 * factor(rng);
    c.cpu_seconds_per_token = 5e-6 * factor(rng);
    c.cpu_seconds_setup = 20e-6 * factor(rng);
    c.copy_bytes_per_second = 55e9 * factor(rng);
    c.device_seconds_fixed = 10e-6;
    c.device_seconds_per_token = 0.1e-6;
    c.stream_seconds_setup = 15e-6 * factor(rng);
    c.relative_error = 0.1;
    PlacementPolicy p(c, 12'582'912);
    // Noisy layers of both paths, as a run would measure them.
    for (int layer = 0; layer < 20; ++layer) {
      p.Observe(ExpertPlace::kCpu, {1}, 0.2e-3 * factor(rng) * noise(rng));
      p.Observe(ExpertPlace::kStream, {1},
                15e-6 + 0.23e-3 * factor(rng) * noise(rng));
    }
    for (int64_t n : {1, 2, 8, 64}) {
      const double cpu = c.cpu_seconds_setup + p.CpuSeconds(n);
      const double stream = c.stream_seconds_setup + p.StreamSeconds(n);
      if (std::max(cpu, stream) < 1.1 * std::min(cpu, stream)) continue;
      ++decided;
      EXPECT_EQ(p.Plan({n})[0],
                stream < cpu ? ExpertPlace::kStream : ExpertPlace::kCpu)
          << "machine " << machine << ", " << n << " tokens: CPU " << cpu
          << " s, stream " << stream << " s";
    }
  }
  EXPECT_GT(decided, 400);
}

// Near a tie, measured layers that scatter around it keep the choice: a
// decode step's expert does not flip path from layer to layer.
TEST(PlacementPolicyTest, NearTiesDoNotFlip) {
  PathCosts c = Machine();
  c.copy_bytes_per_second = 2.5e9;  // 9 ms to stream, 8 ms on the CPU
  c.relative_error = 0.2;
  PlacementPolicy p(c, kExpertBytes);
  ASSERT_EQ(p.Plan({1})[0], ExpertPlace::kCpu);
  int flips = 0;
  ExpertPlace last = ExpertPlace::kCpu;
  for (int layer = 0; layer < 100; ++layer) {
    // The CPU measured between 7% cheaper and 21% dearer than streaming.
    p.Observe(ExpertPlace::kCpu, {1}, (layer % 2 ? 1.05 : 1.22) * 8e-3);
    p.Observe(ExpertPlace::kStream, {1}, (layer % 3 ? 0.98 : 1.0) * 9e-3);
    const ExpertPlace now = p.Plan({1})[0];
    flips += now != last;
    last = now;
  }
  EXPECT_EQ(flips, 0);
  // A CPU clearly dearer (50%) is left.
  for (size_t i = 0; i < PlacementPolicy::kWindow; ++i) {
    p.Observe(ExpertPlace::kCpu, {1}, 1.5 * 9e-3);
  }
  EXPECT_EQ(p.Plan({1})[0], ExpertPlace::kStream);
}

}  // namespace
}  // namespace ringmoe::runtime

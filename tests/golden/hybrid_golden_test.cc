// Hybrid expert execution against the all-CPU engine, for every tiny model:
// a device whose budget holds what every token needs plus a few experts,
// each --placement (gpu: a budget for every expert), prefill, greedy decode
// and a batched step. On the
// CPU-backed stand-in device (the default here) the logits must be bitwise
// the CPU's, whichever path each expert took; on the device
// RINGMOE_TEST_DEVICE names (cuda:0 under tools/gpu_check.sh) they must
// agree to the golden tolerance and give the same greedy tokens.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/backend/backend_factory.h"
#include "engine/backend/stand_in_device.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/architecture.h"
#include "engine/model/config.h"
#include "engine/model/model_weights.h"
#include "engine/model/packed_mlp.h"
#include "engine/runtime/engine.h"
#include "gtest/gtest.h"

namespace ringmoe {
namespace {

using runtime::PlacementMode;

constexpr int kGreedySteps = 8;

std::string Device() {
  const char* device = std::getenv("RINGMOE_TEST_DEVICE");
  return device != nullptr ? device : "standin";
}

// What every token needs and the packed size of one expert.
struct Sizes {
  uint64_t non_expert = 0;
  uint64_t expert = 0;
  int experts = 0;  // routed experts of all layers
};

Sizes MeasureSizes(const std::string& dir) {
  Sizes sizes;
  auto spec = model::LoadModelConfig(dir);
  auto checkpoint = checkpoint::Checkpoint::Open(dir);
  auto arch = model::FindArchitecture(spec->architecture);
  auto weights = model::BindModelWeights(*spec, **arch, **checkpoint);
  EXPECT_TRUE(weights.ok()) << weights.status();
  sizes.non_expert = model::NonExpertBytes(*weights);
  for (const model::LayerWeights& layer : weights->layers) {
    for (const model::MlpWeights& e : layer.experts) {
      sizes.expert = std::max(sizes.expert, model::PackedMlpBytes(e));
      ++sizes.experts;
    }
  }
  return sizes;
}

// Logits of one run: each case's prefill (every position), then greedy
// decode steps, then every case prefilled again together in one step.
struct RunLogits {
  std::vector<std::vector<float>> prefill;
  std::vector<std::vector<int32_t>> greedy;
  std::vector<std::vector<float>> decode_logits;
  std::vector<float> batched;
  // Then one decode step of every case, the even ones asking for their
  // greedy token only: the odd cases' logits, the even cases' tokens.
  std::vector<float> batched_decode;
  std::vector<int32_t> batched_greedy;
};

RunLogits RunCases(runtime::Engine& engine,
                   const std::vector<std::vector<int32_t>>& cases) {
  RunLogits run;
  const int64_t vocab = engine.spec().vocab_size;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<float> logits;
    const runtime::SequenceId seq = static_cast<runtime::SequenceId>(i);
    absl::Status s = engine.Step({{seq, cases[i], true}}, &logits);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return run;
    run.prefill.push_back(logits);
    std::vector<int32_t> generated;
    std::vector<float> last(logits.end() - vocab, logits.end());
    for (int step = 0; step < kGreedySteps; ++step) {
      generated.push_back(static_cast<int32_t>(
          std::max_element(last.begin(), last.end()) - last.begin()));
      const std::vector<int32_t> next = {generated.back()};
      s = engine.Step({{seq, next, false}}, &last);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) return run;
      run.decode_logits.push_back(last);
    }
    run.greedy.push_back(generated);
    engine.kv_cache().Release(seq);
  }
  std::vector<runtime::SequenceChunk> chunks;
  for (size_t i = 0; i < cases.size(); ++i) {
    chunks.push_back({static_cast<runtime::SequenceId>(i), cases[i], true});
  }
  absl::Status s = engine.Step(chunks, &run.batched);
  EXPECT_TRUE(s.ok()) << s;
  if (s.ok()) {
    std::vector<std::vector<int32_t>> next(cases.size());
    auto last = run.batched.begin();
    for (size_t i = 0; i < cases.size(); ++i) {
      last += cases[i].size() * vocab;
      next[i] = {static_cast<int32_t>(std::max_element(last - vocab, last) -
                                      (last - vocab))};
      chunks[i] = {static_cast<runtime::SequenceId>(i), next[i]};
      chunks[i].greedy_token = i % 2 == 0;
    }
    s = engine.Step(chunks, &run.batched_decode, /*work=*/nullptr,
                    &run.batched_greedy);
    EXPECT_TRUE(s.ok()) << s;
  }
  for (size_t i = 0; i < cases.size(); ++i) engine.kv_cache().Release(i);
  return run;
}

// Bitwise on the stand-in; within the golden tolerance elsewhere.
void ExpectSame(const std::vector<float>& got, const std::vector<float>& want,
                int64_t vocab, bool bitwise, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (bitwise) {
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << what << " logit " << i;
    }
    return;
  }
  for (size_t row = 0; row * vocab < got.size(); ++row) {
    double err = 0, norm = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double d = double{got[row * vocab + v]} - want[row * vocab + v];
      err += d * d;
      norm += double{want[row * vocab + v]} * want[row * vocab + v];
    }
    EXPECT_LE(std::sqrt(err / norm), 1e-4) << what << " row " << row;
  }
}

// Every logit of `got` as `want`'s (bitwise on the stand-in), and the same
// greedy tokens.
void ExpectSameRun(const RunLogits& got, const RunLogits& want, int64_t vocab,
                   bool bitwise) {
  ASSERT_EQ(got.prefill.size(), want.prefill.size());
  for (size_t i = 0; i < want.prefill.size(); ++i) {
    ExpectSame(got.prefill[i], want.prefill[i], vocab, bitwise,
               absl::StrCat("case ", i, " prefill"));
  }
  EXPECT_EQ(got.greedy, want.greedy);
  ASSERT_EQ(got.decode_logits.size(), want.decode_logits.size());
  for (size_t i = 0; i < want.decode_logits.size(); ++i) {
    ExpectSame(got.decode_logits[i], want.decode_logits[i], vocab, bitwise,
               absl::StrCat("decode step ", i));
  }
  ExpectSame(got.batched, want.batched, vocab, bitwise, "batched step");
  ExpectSame(got.batched_decode, want.batched_decode, vocab, bitwise,
             "batched decode step");
  EXPECT_EQ(got.batched_greedy, want.batched_greedy);
  EXPECT_EQ(want.batched_greedy.size(), (want.prefill.size() + 1) / 2);
}

// The CPU cheaper for one token, streaming from two on: auto sends a decode
// step's experts to the CPU and a prefill's busiest ones down.
runtime::PathCosts TestCosts(const Sizes& sizes) {
  runtime::PathCosts costs;
  costs.cpu_seconds_fixed = 1e-3;
  costs.cpu_seconds_per_token = 1e-3;
  costs.copy_bytes_per_second = sizes.expert / 2.5e-3;
  return costs;
}

runtime::EngineOptions Options(const std::string& dir) {
  runtime::EngineOptions options;
  options.model_dir = dir;
  options.threads = 2;
  options.kv_cache_tokens = 1024;
  return options;
}

class HybridGoldenTest
    : public ::testing::TestWithParam<std::tuple<std::string, PlacementMode>> {
};

TEST_P(HybridGoldenTest, MatchesTheCpuUnderATightDeviceBudget) {
  const auto& [model, mode] = GetParam();
  const std::string dir = "tests/testdata/moe-tiny/" + model;
  const std::string device = Device();
  auto probe = backend::CreateBackend(device, nullptr);
  if (!probe.ok()) GTEST_SKIP() << probe.status();
  probe->reset();

  auto reference = runtime::Engine::Load(Options(dir));
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<std::vector<int32_t>> cases = {
      {1, 5, 9, 200, 17, 3, 88, 45},
      {7, 7, 7, 300, 2},
      {400, 12, 31, 6, 6, 90, 11, 2, 500, 33, 70},
  };
  const RunLogits want = RunCases(**reference, cases);

  const Sizes sizes = MeasureSizes(dir);
  // Three experts resident beside no ring (cpu); room for a ring and a few
  // cached experts (auto, stream); every expert (gpu: all resident).
  const int room = mode == PlacementMode::kCpu   ? 3
                   : mode == PlacementMode::kGpu ? sizes.experts
                                                 : 6;
  runtime::EngineOptions options = Options(dir);
  options.device = device;
  options.device_memory_budget =
      static_cast<int64_t>(sizes.non_expert + room * sizes.expert);
  options.placement = mode;
  options.placement_costs = TestCosts(sizes);
  auto hybrid = runtime::Engine::Load(options);
  ASSERT_TRUE(hybrid.ok()) << hybrid.status();
  ASSERT_EQ((*hybrid)->placement().streams(), mode != PlacementMode::kGpu)
      << (*hybrid)->placement().Summary();
  const RunLogits got = RunCases(**hybrid, cases);

  ExpectSameRun(got, want, (*reference)->spec().vocab_size,
                device == "standin");

  const memory_ring::RingStats& stats = (*hybrid)->ring_stats();
  switch (mode) {
    case PlacementMode::kGpu:
      EXPECT_EQ(stats.expert_runs_cpu + stats.expert_runs_streamed, 0u);
      break;
    case PlacementMode::kCpu:
      EXPECT_GT(stats.expert_runs_cpu, 0u);
      EXPECT_EQ(stats.expert_runs_streamed, 0u);
      break;
    case PlacementMode::kStream:
      EXPECT_GT(stats.expert_runs_streamed, 0u);
      EXPECT_EQ(stats.expert_runs_cpu, 0u);
      EXPECT_GT(stats.bytes_host_to_device, 0u);
      // The next layer's router predicted some experts, streamed ahead.
      EXPECT_GT(stats.prefetch_hits, 0u);
      break;
    case PlacementMode::kAuto:
      EXPECT_GT(stats.expert_runs_cpu, 0u);
      EXPECT_GT(stats.expert_runs_streamed, 0u);
      break;
  }
  if (const auto* standin =
          dynamic_cast<const backend::StandInDevice*>(&(*hybrid)->backend())) {
    EXPECT_LE(standin->memory().used(),
              static_cast<uint64_t>(options.device_memory_budget));
    EXPECT_GT(standin->memory().used(), sizes.non_expert);
    EXPECT_EQ(stats.bytes_device_weights, standin->memory().used());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, HybridGoldenTest,
    ::testing::Combine(
        ::testing::Values("mixtral", "mixtral_sharded", "qwen2_moe",
                          "qwen3_moe", "olmoe", "deepseek_v3",
                          "deepseek_v3_fp8", "deepseek_v2_lite", "gpt_oss",
                          "gpt_oss_bf16"),
        ::testing::Values(PlacementMode::kAuto, PlacementMode::kCpu,
                          PlacementMode::kStream, PlacementMode::kGpu)),
    [](const auto& info) {
      return absl::StrCat(std::get<0>(info.param), "_",
                          runtime::PlacementModeName(std::get<1>(info.param)));
    });

// Three tiers: a host budget that holds two of the experts outside device
// memory beside the staging buffers; the rest stream from the checkpoint.
TEST(HybridThreeTiersTest, ExpertsBeyondTheHostBudgetStreamFromDisk) {
  const std::string device = Device();
  auto probe = backend::CreateBackend(device, nullptr);
  if (!probe.ok()) GTEST_SKIP() << probe.status();
  probe->reset();
  const std::vector<std::vector<int32_t>> cases = {
      {1, 5, 9, 200, 17, 3, 88, 45}, {400, 12, 31, 6, 6, 90, 11, 2, 500}};
  for (const char* model : {"mixtral_sharded", "deepseek_v3_fp8", "gpt_oss"}) {
    SCOPED_TRACE(model);
    const std::string dir = std::string("tests/testdata/moe-tiny/") + model;
    auto reference = runtime::Engine::Load(Options(dir));
    ASSERT_TRUE(reference.ok()) << reference.status();
    const RunLogits want = RunCases(**reference, cases);
    const Sizes sizes = MeasureSizes(dir);
    for (PlacementMode mode : {PlacementMode::kAuto, PlacementMode::kStream}) {
      runtime::EngineOptions options = Options(dir);
      options.device = device;
      options.device_memory_budget =
          static_cast<int64_t>(sizes.non_expert + 6 * sizes.expert);
      options.placement = mode;
      options.placement_costs = TestCosts(sizes);
      uint64_t slot_bytes = 0;
      {
        auto plan_only = runtime::Engine::Load(options);
        ASSERT_TRUE(plan_only.ok()) << plan_only.status();
        slot_bytes = (*plan_only)->placement().slot_bytes;
      }
      options.streaming.memory_budget = 2 * slot_bytes + 2 * sizes.expert;
      auto hybrid = runtime::Engine::Load(options);
      ASSERT_TRUE(hybrid.ok()) << hybrid.status();
      const RunLogits got = RunCases(**hybrid, cases);
      ExpectSameRun(got, want, (*reference)->spec().vocab_size,
                    device == "standin");
      EXPECT_GT((*hybrid)->ring_stats().expert_runs_streamed, 0u);

      // Too small for the staging buffers: refused, naming the smallest.
      options.streaming.memory_budget = slot_bytes;
      auto too_small = runtime::Engine::Load(options);
      EXPECT_EQ(too_small.status().code(),
                absl::StatusCode::kResourceExhausted);
      EXPECT_NE(too_small.status().message().find("staging"),
                absl::string_view::npos)
          << too_small.status();
    }
    // --placement cpu cannot reach experts on disk.
    runtime::EngineOptions options = Options(dir);
    options.device = device;
    options.device_memory_budget =
        static_cast<int64_t>(sizes.non_expert + 3 * sizes.expert);
    options.placement = PlacementMode::kCpu;
    options.streaming.memory_budget = 4 * sizes.expert;
    auto cpu = runtime::Engine::Load(options);
    EXPECT_EQ(cpu.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(cpu.status().message().find("--placement cpu"),
              absl::string_view::npos)
        << cpu.status();
  }
}

TEST(HybridPlacementTest, BadPlacementSettingsAreRefused) {
  const std::string dir = "tests/testdata/moe-tiny/mixtral";
  runtime::EngineOptions options = Options(dir);
  options.placement = PlacementMode::kCpu;
  auto on_cpu = runtime::Engine::Load(options);
  EXPECT_EQ(on_cpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(on_cpu.status().message().find("--device"), absl::string_view::npos)
      << on_cpu.status();

  options.device = "standin";
  auto no_budget = runtime::Engine::Load(options);
  EXPECT_EQ(no_budget.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_budget.status().message().find("--device_memory_budget"),
            absl::string_view::npos)
      << no_budget.status();

  const Sizes sizes = MeasureSizes(dir);
  options.placement = PlacementMode::kGpu;
  options.device_memory_budget =
      static_cast<int64_t>(sizes.non_expert + 4 * sizes.expert);
  auto gpu = runtime::Engine::Load(options);
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(gpu.status().message().find("--placement gpu"),
            absl::string_view::npos)
      << gpu.status();

  options.placement = PlacementMode::kAuto;
  options.device_memory_budget = static_cast<int64_t>(sizes.non_expert);
  auto too_small = runtime::Engine::Load(options);
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_small.status().message().find("smallest budget"),
            absl::string_view::npos)
      << too_small.status();
}

}  // namespace
}  // namespace ringmoe

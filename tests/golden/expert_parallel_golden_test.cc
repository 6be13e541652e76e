// Expert parallelism must not change results: on every golden tiny model,
// an engine whose experts are spread over the ranks of this test's job
// (alone: one rank; the expert_parallel_golden_np*_test targets run it as
// every rank of an mpirun job) gives logits and greedy tokens bitwise
// identical to a one-process engine — every case's prompt and decode steps,
// and all cases batched in one step — with experts resident, streamed
// through each rank's memory ring, and on the stand-in device.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/parallel/mpi_communicator.h"
#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/golden/engine_trace.h"

namespace ringmoe {
namespace {

using golden::Bitwise;
using golden::GoldenInputs;
using golden::RunTrace;
using golden::Trace;

parallel::Communicator* job = nullptr;

constexpr int kCases = 3;
constexpr int kGreedy = 6;

std::unique_ptr<runtime::Engine> Load(runtime::EngineOptions options) {
  options.threads = 1;
  auto engine = runtime::Engine::Load(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

void ExpectSame(const Trace& got, const Trace& want,
                const std::string& config) {
  ASSERT_EQ(got.logits.size(), want.logits.size()) << config;
  for (size_t i = 0; i < want.logits.size(); ++i) {
    EXPECT_TRUE(Bitwise(got.logits[i], want.logits[i]))
        << config << " case " << i;
    EXPECT_EQ(got.greedy[i], want.greedy[i]) << config << " case " << i;
  }
  EXPECT_TRUE(Bitwise(got.batched, want.batched)) << config << " batched";
}

class ExpertParallelGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return "tests/testdata/moe-tiny/" + GetParam(); }
};

TEST_P(ExpertParallelGoldenTest, ResidentExpertsAreBitwiseOneProcess) {
  const std::vector<std::vector<int32_t>> inputs = GoldenInputs(dir(), kCases);
  ASSERT_EQ(inputs.size(), kCases);
  runtime::EngineOptions options;
  options.model_dir = dir();
  auto alone = Load(options);
  options.expert_parallel = job;
  auto spread = Load(options);
  ASSERT_NE(alone, nullptr);
  ASSERT_NE(spread, nullptr);
  ExpectSame(RunTrace(*spread, inputs, kGreedy),
             RunTrace(*alone, inputs, kGreedy),
             GetParam() + " on " + std::to_string(job->size()) + " ranks");
}

INSTANTIATE_TEST_SUITE_P(EveryGoldenModel, ExpertParallelGoldenTest,
                         ::testing::Values("mixtral", "mixtral_sharded",
                                           "qwen2_moe", "qwen3_moe", "olmoe",
                                           "deepseek_v3", "deepseek_v3_fp8",
                                           "deepseek_v2_lite", "gpt_oss",
                                           "gpt_oss_bf16"));

// Every rank streams its own experts through a ring of two one-expert
// slots, in layer and in expert mode (predictions for its own experts).
TEST(ExpertParallelStreamingTest, StreamedExpertsAreBitwiseOneProcess) {
  for (const std::string model : {"qwen2_moe", "deepseek_v3_fp8"}) {
    const std::string dir = "tests/testdata/moe-tiny/" + model;
    const std::vector<std::vector<int32_t>> inputs = GoldenInputs(dir, kCases);
    ASSERT_EQ(inputs.size(), kCases);
    runtime::EngineOptions options;
    options.model_dir = dir;
    auto alone = Load(options);
    ASSERT_NE(alone, nullptr);
    const Trace want = RunTrace(*alone, inputs, kGreedy);
    const memory_ring::PlacementPlan& sizes = alone->placement();
    for (auto mode : {runtime::RingMode::kLayer, runtime::RingMode::kExpert}) {
      runtime::StreamingOptions& ring = options.streaming;
      ring.mode = mode;
      ring.num_slots = 2;
      ring.prefetch_depth = 1;
      ring.section_experts = 1;
      ring.expert_cache = false;
      ring.force_streaming = true;
      ring.memory_budget = sizes.always_resident_bytes + 2 * sizes.expert_bytes;
      options.expert_parallel = job;
      const std::string config =
          model + (mode == runtime::RingMode::kLayer ? " layer" : " expert") +
          " mode on " + std::to_string(job->size()) + " ranks";
      auto spread = Load(options);
      ASSERT_NE(spread, nullptr) << config;
      const memory_ring::PlacementPlan& plan = spread->placement();
      ASSERT_TRUE(plan.streams()) << config;
      // A rank plans (and streams) only the experts it owns.
      const int64_t moe_layers =
          std::count(spread->spec().layer_is_moe.begin(),
                     spread->spec().layer_is_moe.end(), true);
      const int64_t experts = spread->spec().num_experts;
      EXPECT_LE(plan.streamed_experts,
                moe_layers * ((experts + job->size() - 1) / job->size()))
          << config;
      ExpectSame(RunTrace(*spread, inputs, kGreedy), want, config);
      EXPECT_GT(spread->ring_stats().bytes_moved, 0u) << config;
      EXPECT_EQ(spread->ring_stats().load_errors, 0u) << config;
    }
  }
}

// Outputs cross the host between ranks whatever memory the backend
// computes in.
TEST(ExpertParallelDeviceTest, StandInDeviceIsBitwiseOneProcess) {
  const std::string dir = "tests/testdata/moe-tiny/mixtral";
  const std::vector<std::vector<int32_t>> inputs = GoldenInputs(dir, kCases);
  ASSERT_EQ(inputs.size(), kCases);
  runtime::EngineOptions options;
  options.model_dir = dir;
  options.device = "standin";
  auto alone = Load(options);
  options.expert_parallel = job;
  auto spread = Load(options);
  ASSERT_NE(alone, nullptr);
  ASSERT_NE(spread, nullptr);
  ExpectSame(RunTrace(*spread, inputs, kGreedy),
             RunTrace(*alone, inputs, kGreedy),
             "standin on " + std::to_string(job->size()) + " ranks");
}

// On ranks other than 0 only failures are printed, each with its rank.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_,
                 result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  const int rank_;
};

}  // namespace
}  // namespace ringmoe

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  auto job = ringmoe::parallel::CreateJobCommunicator(absl::Seconds(30));
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
    return 1;
  }
  ringmoe::job = job->get();
  const int rank = (*job)->rank();
  if (rank != 0) {
    testing::TestEventListeners& listeners =
        testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new ringmoe::RankFailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}

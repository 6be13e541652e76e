// Expert parallelism must not change results: on every golden tiny model,
// an engine whose experts are spread over the ranks of this test's job
// (alone: one rank; the expert_parallel_golden_np*_test targets run it as
// every rank of an mpirun job) gives logits and greedy tokens bitwise
// identical to a one-process engine — every case's prompt and decode steps,
// and all cases batched in one step — with experts resident, streamed
// through each rank's memory ring, and on the stand-in device; attention
// replicated and data-parallel; and with replicas of the hottest experts,
// each running whole on one of its copies.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/parallel/mpi_communicator.h"
#include "engine/parallel/rank_test_output.h"
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

std::unique_ptr<runtime::Engine> Load(runtime::EngineOptions options,
                                      int threads = 1) {
  options.threads = threads;
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
  EXPECT_TRUE(Bitwise(got.batched_decode, want.batched_decode))
      << config << " batched decode";
  EXPECT_EQ(got.batched_greedy, want.batched_greedy)
      << config << " batched greedy tokens";
  EXPECT_EQ(want.batched_greedy.size(), (want.logits.size() + 1) / 2);
}

class ExpertParallelGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::string dir() const { return "tests/testdata/moe-tiny/" + GetParam(); }
};

// Attention replicated, and data-parallel (each sequence on one rank, its
// tokens sent to their experts' ranks): the batched step spreads the
// cases over the ranks, the one-sequence steps leave ranks without tokens.
// A rank's share of the batched step runs its products and attention as
// the whole step does (StepShare), on one thread and on two.
TEST_P(ExpertParallelGoldenTest, ResidentExpertsAreBitwiseOneProcess) {
  const std::vector<std::vector<int32_t>> inputs = GoldenInputs(dir(), kCases);
  ASSERT_EQ(inputs.size(), kCases);
  for (const int threads : {1, 2}) {
    runtime::EngineOptions options;
    options.model_dir = dir();
    auto alone = Load(options, threads);
    ASSERT_NE(alone, nullptr);
    const Trace want = RunTrace(*alone, inputs, kGreedy);
    options.expert_parallel = job;
    for (const bool data_parallel : {false, true}) {
      options.data_parallel_attention = data_parallel;
      auto spread = Load(options, threads);
      ASSERT_NE(spread, nullptr);
      ExpectSame(RunTrace(*spread, inputs, kGreedy), want,
                 absl::StrCat(GetParam(), " on ", job->size(), " ranks, ",
                              threads, " threads, attention ",
                              data_parallel ? "data-parallel" : "replicated"));
    }
  }
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
      for (const bool data_parallel : {false, true}) {
        runtime::StreamingOptions& ring = options.streaming;
        ring.mode = mode;
        ring.num_slots = 2;
        ring.prefetch_depth = 1;
        ring.section_experts = 1;
        ring.expert_cache = false;
        ring.force_streaming = true;
        ring.memory_budget =
            sizes.always_resident_bytes + 2 * sizes.expert_bytes;
        options.expert_parallel = job;
        options.data_parallel_attention = data_parallel;
        const std::string config =
            model + (mode == runtime::RingMode::kLayer ? " layer" : " expert") +
            " mode on " + std::to_string(job->size()) + " ranks" +
            (data_parallel ? ", attention data-parallel" : "");
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
  ASSERT_NE(alone, nullptr);
  const Trace want = RunTrace(*alone, inputs, kGreedy);
  options.expert_parallel = job;
  for (const bool data_parallel : {false, true}) {
    options.data_parallel_attention = data_parallel;
    auto spread = Load(options);
    ASSERT_NE(spread, nullptr);
    ExpectSame(RunTrace(*spread, inputs, kGreedy), want,
               "standin on " + std::to_string(job->size()) + " ranks" +
                   (data_parallel ? ", attention data-parallel" : ""));
  }
}

// A balanced placement with replicas of the hottest experts (read from a
// placement file, as a restart does), under both attention modes: each step
// runs a replicated expert's rows together on one of its copies
// (ExpertPlacement::AssignExperts), so results are bitwise one process's
// as without replicas.
TEST(ExpertParallelReplicasTest, ReplicasRunWholeExpertsBitwise) {
  if (job->size() < 2) GTEST_SKIP() << "replicas need several ranks";
  for (const std::string model : {"mixtral", "deepseek_v3"}) {
    const std::string dir = "tests/testdata/moe-tiny/" + model;
    const std::vector<std::vector<int32_t>> inputs = GoldenInputs(dir, kCases);
    ASSERT_EQ(inputs.size(), kCases);
    runtime::EngineOptions options;
    options.model_dir = dir;
    auto alone = Load(options);
    ASSERT_NE(alone, nullptr);
    const Trace want = RunTrace(*alone, inputs, kGreedy);
    // Expert e's load falls with e: the first experts get the replicas.
    std::vector<uint64_t> load(alone->spec().num_experts);
    for (size_t e = 0; e < load.size(); ++e) load[e] = 1000 / (e + 1);
    absl::StatusOr<moe::ExpertPlacement> placement =
        moe::ExpertPlacement::Balanced(load, job->size(), /*extra_replicas=*/3);
    ASSERT_TRUE(placement.ok()) << placement.status();
    ASSERT_GT(placement->replicas(0).size(), 1u) << placement->Summary();
    // One file per rank: the ranks may share a temporary directory.
    const std::string file = absl::StrCat(testing::TempDir(), "/placement_",
                                          model, "_rank", job->rank(), ".txt");
    ASSERT_TRUE(placement->WriteFile(file).ok());
    options.expert_parallel = job;
    options.expert_placement_file = file;
    for (const bool data_parallel : {false, true}) {
      options.data_parallel_attention = data_parallel;
      const std::string config =
          absl::StrCat(model, " on ", job->size(), " ranks with replicas, ",
                       data_parallel ? "data-parallel" : "replicated");
      auto spread = Load(options);
      ASSERT_NE(spread, nullptr) << config;
      ExpectSame(RunTrace(*spread, inputs, kGreedy), want, config);
      const std::optional<runtime::Engine::ExpertParallelStats> stats =
          spread->expert_parallel_stats();
      ASSERT_TRUE(stats.has_value()) << config;
      EXPECT_EQ(stats->experts_held,
                static_cast<int64_t>(placement->experts_of(job->rank()).size()))
          << config;
      EXPECT_GT(stats->traffic.collectives, 0u) << config;
      EXPECT_GT(stats->traffic.bytes_sent, 0u) << config;
      // Some rank ran rows for an expert another rank owns.
      const uint64_t replica_rows = stats->replica_rows;
      std::vector<uint64_t> all(job->size());
      ASSERT_TRUE(job->AllGather(parallel::AsBytes(
                                     absl::MakeConstSpan(&replica_rows, 1)),
                                 parallel::AsWritableBytes(all))
                      .ok());
      uint64_t total = 0;
      for (uint64_t r : all) total += r;
      EXPECT_GT(total, 0u) << config;
    }
  }
}

// Under data-parallel attention a caller that plans the ranks' caches (the
// server's scheduler) names each sequence's home: a home outside the job,
// or another rank than the one holding the sequence, is refused on every
// rank alike before anything runs, and the next step runs as if the
// refused one never came.
TEST(ExpertParallelHomesTest, HomesOutsideTheJobOrMovedAreRefused) {
  if (job->size() < 2) GTEST_SKIP() << "homes need several ranks";
  runtime::EngineOptions options;
  options.model_dir = "tests/testdata/moe-tiny/mixtral";
  options.expert_parallel = job;
  options.data_parallel_attention = true;
  auto engine = Load(options);
  ASSERT_NE(engine, nullptr);
  ASSERT_EQ(engine->num_kv_caches(), job->size());
  const std::vector<int32_t> prompt = {3, 17, 200};
  std::vector<float> logits;
  const int last = job->size() - 1;
  ASSERT_TRUE(engine->Step({{1, prompt, false, last}}, &logits).ok());
  EXPECT_EQ(engine->kv_cache_of(last).Length(1), 3);
  const std::vector<int32_t> next = {5};
  absl::Status refused =
      engine->Step({{2, prompt, false, 0}, {1, next, false, 0}}, &logits);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("sequence 1 is held by rank " +
                                   std::to_string(last) + ", not 0"),
            std::string::npos)
      << refused;
  refused = engine->Step({{3, prompt, false, job->size()}}, &logits);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("home rank"), std::string::npos) << refused;
  // A greedy-token chunk in a step given nowhere to put the tokens.
  runtime::SequenceChunk greedy{2, prompt, false, 0};
  greedy.greedy_token = true;
  refused = engine->Step({greedy}, &logits);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find("nowhere to put the tokens"),
            std::string::npos)
      << refused;
  // Nothing of the refused steps was taken: sequence 2 is new again, so
  // another rank than the refused step named may hold it.
  EXPECT_EQ(engine->kv_cache_of(0).Length(2), 0);
  const absl::Status ran =
      engine->Step({{2, prompt, false, last}, {1, next, false, last}}, &logits);
  ASSERT_TRUE(ran.ok()) << ran;
  EXPECT_EQ(engine->kv_cache_of(last).Length(2), 3);
  EXPECT_EQ(engine->kv_cache_of(last).Length(1), 4);
  engine->Release(1);
  engine->Release(2);
  for (int r = 0; r < job->size(); ++r) {
    EXPECT_EQ(engine->kv_cache_of(r).num_free_blocks(),
              engine->kv_cache_of(r).num_blocks())
        << "rank " << r;
  }
}

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
  ringmoe::parallel::PrintOnlyFailuresUnlessRankZero((*job)->rank());
  return RUN_ALL_TESTS();
}

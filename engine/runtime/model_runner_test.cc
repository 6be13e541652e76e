// ModelRunner's graph steps (Backend::BeginGraphStep), on a CPU backend that
// answers as a device backend may: each step issued first as a replay step,
// then again recording when the backend asks for it, then as usual when
// nothing ran; the logits and counted work of every step those of a runner
// without graphs, whatever the backend answers. (The CUDA backend's graphs
// themselves are held to the goldens on a GPU: tools/gpu_check.sh.)
#include "engine/runtime/model_runner.h"

#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/backend/cpu_backend.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/architecture.h"
#include "engine/model/config.h"
#include "engine/model/model_weights.h"
#include "engine/moe/expert_usage.h"
#include "engine/runtime/kv_cache.h"
#include "gtest/gtest.h"

namespace ringmoe::runtime {
namespace {

using backend::Backend;
using Phase = Backend::GraphPhase;
using Outcome = Backend::GraphOutcome;

// A CPU backend whose graph steps answer from a script; its operations
// run in every pass (so a pass the script says ran did run).
class ScriptedGraphs : public backend::CpuBackend {
 public:
  using CpuBackend::CpuBackend;

  bool BeginGraphStep(Phase phase, int64_t tokens) override {
    begun.push_back(phase);
    return tokens <= max_tokens;
  }
  Outcome EndGraphStep() override {
    ++ended;
    if (outcomes.empty()) return Outcome::kEager;
    const Outcome next = outcomes.front();
    outcomes.pop_front();
    return next;
  }

  int64_t max_tokens = 8;
  std::deque<Outcome> outcomes;
  std::vector<Phase> begun;
  int ended = 0;
};

class ModelRunnerGraphTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string dir = "tests/testdata/moe-tiny/mixtral";
    absl::StatusOr<model::ModelSpec> spec = model::LoadModelConfig(dir);
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    absl::StatusOr<std::unique_ptr<checkpoint::Checkpoint>> ckpt =
        checkpoint::Checkpoint::Open(dir);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    checkpoint_ = *std::move(ckpt);
    absl::StatusOr<const model::Architecture*> arch =
        model::FindArchitecture(spec_.architecture);
    ASSERT_TRUE(arch.ok());
    absl::StatusOr<model::ModelWeights> weights =
        model::BindModelWeights(spec_, **arch, *checkpoint_);
    ASSERT_TRUE(weights.ok()) << weights.status();
    weights_ = *std::move(weights);
  }

  struct Step {
    std::vector<float> logits;
    backend::Work work;
  };

  // A prompt of 5 tokens for two sequences, then `decode_steps` steps of
  // one token each (the last logits' argmax).
  std::vector<Step> Run(Backend* backend, moe::ExpertUsage* usage,
                        bool graph_steps, int decode_steps) {
    ModelRunner runner(spec_, weights_, backend, nullptr, usage, true,
                       graph_steps);
    KvCache cache(KvCacheLayers(spec_), 4, spec_.num_layers * 64);
    const std::vector<int32_t> prompt_a = {1, 17, 33, 5, 9};
    const std::vector<int32_t> prompt_b = {2, 8, 21};
    std::vector<Step> steps(1);
    EXPECT_TRUE(runner
                    .Forward({{0, prompt_a, false}, {1, prompt_b, false}},
                             &cache, &steps[0].logits, &steps[0].work)
                    .ok());
    for (int s = 0; s < decode_steps; ++s) {
      const std::vector<float>& last = steps.back().logits;
      std::vector<int32_t> next(2);
      for (int q = 0; q < 2; ++q) {
        const float* row = last.data() + q * spec_.vocab_size;
        next[q] = static_cast<int32_t>(
            std::max_element(row, row + spec_.vocab_size) - row);
      }
      Step step;
      const std::vector<int32_t> a = {next[0]}, b = {next[1]};
      EXPECT_TRUE(runner
                      .Forward({{0, a, false}, {1, b, false}}, &cache,
                               &step.logits, &step.work)
                      .ok());
      steps.push_back(std::move(step));
    }
    return steps;
  }

  void ExpectSameSteps(const std::vector<Step>& got,
                       const std::vector<Step>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t s = 0; s < got.size(); ++s) {
      EXPECT_EQ(got[s].logits, want[s].logits) << "step " << s;
      EXPECT_EQ(got[s].work.weight_bytes, want[s].work.weight_bytes)
          << "step " << s;
      EXPECT_EQ(got[s].work.flops, want[s].work.flops) << "step " << s;
      EXPECT_EQ(got[s].work.weight_bytes_by_kernel,
                want[s].work.weight_bytes_by_kernel)
          << "step " << s;
    }
  }

  model::ModelSpec spec_;
  std::unique_ptr<checkpoint::Checkpoint> checkpoint_;
  model::ModelWeights weights_;
};

TEST_F(ModelRunnerGraphTest, ReplaysThenRecordsThenRunsAsUsual) {
  backend::CpuBackend plain(nullptr);
  const std::vector<Step> want = Run(&plain, nullptr, false, 4);

  ScriptedGraphs scripted(nullptr);
  scripted.max_tokens = 2;  // the prompt step (8 tokens) is no graph step
  scripted.outcomes = {
      Outcome::kEager,                         // decode 1: replay, nothing
      Outcome::kRecord,   Outcome::kLaunched,  // decode 2: record
      Outcome::kLaunched,                      // decode 3: replayed
      Outcome::kRecord,   Outcome::kEager,     // decode 4: recording failed
  };
  ExpectSameSteps(Run(&scripted, nullptr, true, 4), want);
  // Prompt: begun (refused, so not ended); decode 1: replay; 2: replay,
  // record; 3: replay; 4: replay, record.
  EXPECT_EQ(scripted.begun,
            (std::vector<Phase>{Phase::kReplay, Phase::kReplay, Phase::kReplay,
                                Phase::kRecord, Phase::kReplay, Phase::kReplay,
                                Phase::kRecord}));
  EXPECT_EQ(scripted.ended, 6);
  EXPECT_TRUE(scripted.outcomes.empty());
}

TEST_F(ModelRunnerGraphTest, NoGraphStepsWhenOffOrCountingOnTheHost) {
  backend::CpuBackend plain(nullptr);
  const std::vector<Step> want = Run(&plain, nullptr, false, 2);

  ScriptedGraphs off(nullptr);
  ExpectSameSteps(Run(&off, nullptr, false, 2), want);
  EXPECT_TRUE(off.begun.empty());

  // Tokens counted per expert need the routing on the host.
  ScriptedGraphs counting(nullptr);
  moe::ExpertUsage usage(static_cast<int>(spec_.num_layers),
                         static_cast<int>(spec_.num_experts));
  ExpectSameSteps(Run(&counting, &usage, true, 2), want);
  EXPECT_TRUE(counting.begun.empty());
}

// Chunks that ask for their greedy token get the argmax of the logits a
// plain step returns for them, and give up their logits rows; the other
// chunks' rows are unchanged, in chunk order. As a launched graph step too
// (the tokens are found after the graph ran).
TEST_F(ModelRunnerGraphTest, GreedyTokenChunksGetTheArgmaxOfTheirLogits) {
  const std::vector<int32_t> a = {1, 17, 33, 5, 9}, b = {2, 8, 21}, c = {4},
                             d = {3, 3};
  auto chunks_of = [&](bool greedy) {
    std::vector<SequenceChunk> chunks = {
        {0, a}, {1, b, /*all_logits=*/true}, {2, c}, {3, d}};
    chunks[0].greedy_token = greedy;
    chunks[3].greedy_token = greedy;
    return chunks;
  };
  auto argmax = [&](const float* row) {
    return static_cast<int32_t>(std::max_element(row, row + spec_.vocab_size) -
                                row);
  };
  const int64_t vocab = spec_.vocab_size;

  backend::CpuBackend plain(nullptr);
  ModelRunner reference(spec_, weights_, &plain, nullptr, nullptr, true, false);
  KvCache reference_cache(KvCacheLayers(spec_), 4, spec_.num_layers * 64);
  std::vector<float> all;
  ASSERT_TRUE(reference.Forward(chunks_of(false), &reference_cache, &all).ok());
  // Rows: a's last, b's three, c's, d's last.
  ASSERT_EQ(all.size(), 6 * vocab);
  std::vector<float> want_logits(all.begin() + vocab, all.begin() + 5 * vocab);
  const std::vector<int32_t> want_tokens = {argmax(all.data()),
                                            argmax(all.data() + 5 * vocab)};

  ScriptedGraphs launched(nullptr);
  launched.max_tokens = 64;
  launched.outcomes = {Outcome::kLaunched};
  for (Backend* backend : std::vector<Backend*>{&plain, &launched}) {
    ModelRunner runner(spec_, weights_, backend, nullptr, nullptr, true, true);
    KvCache cache(KvCacheLayers(spec_), 4, spec_.num_layers * 64);
    std::vector<float> logits;
    std::vector<int32_t> tokens;
    ASSERT_TRUE(
        runner.Forward(chunks_of(true), &cache, &logits, nullptr, {}, &tokens)
            .ok());
    EXPECT_EQ(logits, want_logits);
    EXPECT_EQ(tokens, want_tokens);
    // Only greedy tokens: no logits at all.
    const std::vector<int32_t> next = {tokens[0]};
    SequenceChunk only{0, next};
    only.greedy_token = true;
    ASSERT_TRUE(
        runner.Forward({only}, &cache, &logits, nullptr, {}, &tokens).ok());
    EXPECT_TRUE(logits.empty());
    EXPECT_EQ(tokens.size(), 1u);
  }
  EXPECT_EQ(launched.ended, 2);  // the second step ran eagerly
}

TEST_F(ModelRunnerGraphTest, GreedyTokenChunksRefusedWithoutAPlaceOrWithAll) {
  backend::CpuBackend plain(nullptr);
  ModelRunner runner(spec_, weights_, &plain);
  KvCache cache(KvCacheLayers(spec_), 4, spec_.num_layers * 64);
  const std::vector<int32_t> a = {1, 2};
  SequenceChunk chunk{0, a};
  chunk.greedy_token = true;
  std::vector<float> logits;
  EXPECT_EQ(runner.Forward({chunk}, &cache, &logits).code(),
            absl::StatusCode::kInvalidArgument);
  chunk.all_logits = true;
  std::vector<int32_t> tokens;
  const absl::Status both =
      runner.Forward({chunk}, &cache, &logits, nullptr, {}, &tokens);
  EXPECT_EQ(both.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(both.message().find("sequence 0"), std::string::npos) << both;
  EXPECT_EQ(cache.Length(0), 0);
}

}  // namespace
}  // namespace ringmoe::runtime

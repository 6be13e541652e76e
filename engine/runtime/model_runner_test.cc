// ModelRunner's graph steps (Backend::BeginGraphStep), on a CPU backend that
// answers as a device backend may: each step issued first as a replay step,
// then again recording when the backend asks for it, then as usual when
// nothing ran; the logits and counted work of every step those of a runner
// without graphs, whatever the backend answers. (The CUDA backend's graphs
// themselves are held to the goldens on a GPU: tools/gpu_check.sh.)
#include "engine/runtime/model_runner.h"

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

}  // namespace
}  // namespace ringmoe::runtime

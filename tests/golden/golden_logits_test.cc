// The forward pass against the independent float64 reference logits and
// greedy continuations of tests/testdata/moe-tiny (see its README), on the
// CPU, or on the device RINGMOE_TEST_DEVICE names (such as cuda:0, which
// tools/gpu_check.sh sets; the tests skip when it is absent).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/backend/backend_factory.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/model/architecture.h"
#include "engine/model/config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/model_runner.h"
#include "gtest/gtest.h"

namespace ringmoe {
namespace {

constexpr int kNumCases = 5;
constexpr int kGreedyTokens = 16;

struct GoldenCase {
  std::vector<int32_t> input_ids;
  std::vector<float> logits;  // [T, vocab]
  std::vector<int32_t> greedy;
};

class GoldenModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const char* device = std::getenv("RINGMOE_TEST_DEVICE");
    auto backend = backend::CreateBackend(device != nullptr ? device : "cpu",
                                          /*pool=*/nullptr);
    if (!backend.ok()) GTEST_SKIP() << backend.status();
    backend_ = std::move(*backend);
    on_device_ = backend_->weight_memory() == backend::MemorySpace::kDevice;
    dir_ = "tests/testdata/moe-tiny/" + GetParam();
    auto spec = model::LoadModelConfig(dir_);
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
    auto ckpt = checkpoint::Checkpoint::Open(dir_);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    checkpoint_ = std::move(*ckpt);
    auto arch = model::FindArchitecture(spec_.architecture);
    ASSERT_TRUE(arch.ok()) << arch.status();
    auto weights = model::BindModelWeights(spec_, **arch, *checkpoint_);
    ASSERT_TRUE(weights.ok()) << weights.status();
    weights_ = std::move(*weights);
    if (on_device_) {
      auto uploaded = model::UploadWeights(weights_, *backend_);
      ASSERT_TRUE(uploaded.ok()) << uploaded.status();
      weights_ = std::move(*uploaded);
    }
    runner_ =
        std::make_unique<runtime::ModelRunner>(spec_, weights_, backend_.get());

    auto golden =
        checkpoint::SafetensorsFile::Open(dir_ + "/golden.safetensors");
    ASSERT_TRUE(golden.ok()) << golden.status();
    for (int i = 0; i < kNumCases; ++i) {
      const std::string prefix = "case" + std::to_string(i) + ".";
      GoldenCase c;
      auto ids =
          checkpoint::CopyAsInt64(*(*golden)->Find(prefix + "input_ids"));
      auto logits =
          checkpoint::CopyAsFloat32(*(*golden)->Find(prefix + "logits"));
      auto greedy =
          checkpoint::CopyAsInt64(*(*golden)->Find(prefix + "greedy"));
      ASSERT_TRUE(ids.ok() && logits.ok() && greedy.ok());
      c.input_ids.assign(ids->begin(), ids->end());
      c.logits = *logits;
      c.greedy.assign(greedy->begin(), greedy->end());
      cases_.push_back(std::move(c));
    }
  }

  runtime::KvCache NewCache() const { return NewCache(spec_, 8, 128); }
  // A cache for `spec` in the backend's memory.
  runtime::KvCache NewCache(const model::ModelSpec& spec, int64_t block_size,
                            int64_t blocks_per_layer) const {
    return runtime::KvCache(runtime::KvCacheLayers(spec), block_size,
                            spec.num_layers * blocks_per_layer, KvMemory());
  }
  backend::Backend* KvMemory() const {
    return on_device_ ? backend_.get() : nullptr;
  }

  // Relative error and max abs difference of one position's logits.
  void ExpectClose(const float* got, const float* want,
                   const std::string& where) {
    double err = 0, norm = 0, max_abs = 0;
    for (int64_t v = 0; v < spec_.vocab_size; ++v) {
      ASSERT_TRUE(std::isfinite(got[v])) << where;
      const double d = double(got[v]) - want[v];
      err += d * d;
      norm += double(want[v]) * want[v];
      max_abs = std::max(max_abs, std::abs(d));
    }
    EXPECT_LE(std::sqrt(err / norm), 1e-4) << where;
    EXPECT_LE(max_abs, 1e-3) << where;
  }

  static int32_t Argmax(const float* logits, int64_t n) {
    return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
  }

  std::string dir_;
  model::ModelSpec spec_;
  std::unique_ptr<checkpoint::Checkpoint> checkpoint_;
  model::ModelWeights weights_;
  std::unique_ptr<backend::Backend> backend_;
  bool on_device_ = false;
  std::unique_ptr<runtime::ModelRunner> runner_;
  std::vector<GoldenCase> cases_;
};

TEST_P(GoldenModelTest, FullPrefillLogitsMatchReference) {
  for (int i = 0; i < kNumCases; ++i) {
    runtime::KvCache cache = NewCache();
    const auto& c = cases_[i];
    std::vector<float> logits;
    runtime::SequenceChunk chunk{0, c.input_ids, /*all_logits=*/true};
    ASSERT_TRUE(runner_->Forward({chunk}, &cache, &logits).ok());
    ASSERT_EQ(logits.size(), c.logits.size());
    for (size_t t = 0; t < c.input_ids.size(); ++t) {
      ExpectClose(
          &logits[t * spec_.vocab_size], &c.logits[t * spec_.vocab_size],
          "case " + std::to_string(i) + " position " + std::to_string(t));
    }
  }
}

TEST_P(GoldenModelTest, PrefillThenDecodeMatchesReference) {
  for (int i = 0; i < kNumCases; ++i) {
    const auto& c = cases_[i];
    runtime::KvCache cache = NewCache();
    const size_t split = (c.input_ids.size() + 1) / 2;
    std::vector<float> logits;
    std::vector<int32_t> head(c.input_ids.begin(), c.input_ids.begin() + split);
    ASSERT_TRUE(runner_->Forward({{0, head, true}}, &cache, &logits).ok());
    for (size_t t = split; t < c.input_ids.size(); ++t) {
      std::vector<int32_t> one = {c.input_ids[t]};
      ASSERT_TRUE(runner_->Forward({{0, one, false}}, &cache, &logits).ok());
      ExpectClose(logits.data(), &c.logits[t * spec_.vocab_size],
                  "case " + std::to_string(i) + " decode position " +
                      std::to_string(t));
    }
  }
}

TEST_P(GoldenModelTest, GreedyContinuationOneSequenceAtATime) {
  for (int i = 0; i < kNumCases; ++i) {
    const auto& c = cases_[i];
    runtime::KvCache cache = NewCache();
    std::vector<float> logits;
    ASSERT_TRUE(
        runner_->Forward({{0, c.input_ids, false}}, &cache, &logits).ok());
    std::vector<int32_t> generated;
    for (int step = 0; step < kGreedyTokens; ++step) {
      generated.push_back(Argmax(logits.data(), spec_.vocab_size));
      if (step + 1 == kGreedyTokens) break;
      std::vector<int32_t> next = {generated.back()};
      ASSERT_TRUE(runner_->Forward({{0, next, false}}, &cache, &logits).ok());
    }
    EXPECT_EQ(generated, c.greedy) << "case " << i;
  }
}

TEST_P(GoldenModelTest, AllCasesBatchedInOneStep) {
  runtime::KvCache cache = NewCache();
  std::vector<runtime::SequenceChunk> chunks;
  for (int i = 0; i < kNumCases; ++i)
    chunks.push_back({i, cases_[i].input_ids, true});
  std::vector<float> logits;
  ASSERT_TRUE(runner_->Forward(chunks, &cache, &logits).ok());
  size_t row = 0;
  for (int i = 0; i < kNumCases; ++i) {
    for (size_t t = 0; t < cases_[i].input_ids.size(); ++t, ++row) {
      ExpectClose(&logits[row * spec_.vocab_size],
                  &cases_[i].logits[t * spec_.vocab_size],
                  "batched case " + std::to_string(i) + " position " +
                      std::to_string(t));
    }
  }
  // Greedy decoding of all cases together, one token per sequence per step.
  std::vector<std::vector<int32_t>> generated(kNumCases);
  std::vector<float> last(kNumCases * spec_.vocab_size);
  row = 0;
  for (int i = 0; i < kNumCases; ++i) {
    row += cases_[i].input_ids.size();
    std::copy_n(&logits[(row - 1) * spec_.vocab_size], spec_.vocab_size,
                &last[i * spec_.vocab_size]);
  }
  for (int step = 0; step < kGreedyTokens; ++step) {
    std::vector<std::vector<int32_t>> next(kNumCases);
    chunks.clear();
    for (int i = 0; i < kNumCases; ++i) {
      generated[i].push_back(
          Argmax(&last[i * spec_.vocab_size], spec_.vocab_size));
      next[i] = {generated[i].back()};
      chunks.push_back({i, next[i], false});
    }
    if (step + 1 == kGreedyTokens) break;
    ASSERT_TRUE(runner_->Forward(chunks, &cache, &last).ok());
  }
  for (int i = 0; i < kNumCases; ++i) {
    EXPECT_EQ(generated[i], cases_[i].greedy) << "batched case " << i;
  }
}

// Sliding windows on alternate layers: the prompt prefilled at once, on a
// cache that keeps every position, gives the same logits as the prompt fed
// in chunks of 3 and then token by token through a cache just large enough
// (MaxBlocksHeld), where the windowed layers give their blocks back and
// later positions reuse them.
TEST_P(GoldenModelTest, SlidingWindowLogitsDoNotDependOnReturnedBlocks) {
  constexpr int64_t kWindow = 5, kBlock = 4, kChunk = 3;
  model::ModelSpec spec = spec_;
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    spec.layer_sliding_window[l] = l % 2 == 0 ? kWindow : 0;
  }
  runtime::ModelRunner runner(spec, weights_, backend_.get());
  const std::vector<runtime::KvCache::Layer> layers =
      runtime::KvCacheLayers(spec);
  for (int i = 0; i < kNumCases; ++i) {
    const std::vector<int32_t>& ids = cases_[i].input_ids;
    const int64_t n = static_cast<int64_t>(ids.size());
    runtime::KvCache roomy = NewCache(spec, kBlock, 64);
    std::vector<float> want;
    ASSERT_TRUE(runner.Forward({{0, ids, true}}, &roomy, &want).ok());
    runtime::KvCache tight(
        layers, kBlock,
        runtime::KvCache(layers, kBlock, 0).MaxBlocksHeld(n, kChunk),
        KvMemory());
    std::vector<float> got;
    for (int64_t t = 0; t < n;) {
      const int64_t count = t < n / 2 ? std::min(kChunk, n / 2 - t) : 1;
      const absl::Span<const int32_t> chunk =
          absl::MakeConstSpan(ids).subspan(t, count);
      ASSERT_TRUE(runner.Forward({{0, chunk, true}}, &tight, &got).ok())
          << "case " << i << " position " << t;
      for (int64_t j = 0; j < count; ++j) {
        ExpectClose(&got[j * spec.vocab_size], &want[(t + j) * spec.vocab_size],
                    "windowed case " + std::to_string(i) + " position " +
                        std::to_string(t + j));
      }
      t += count;
    }
    if (n > 2 * kWindow + kBlock) {
      EXPECT_LT(tight.BlocksHeld(0), spec.num_layers * ((n + 3) / kBlock))
          << "case " << i << ": no block was given back";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MoeTiny, GoldenModelTest,
                         ::testing::Values("mixtral", "mixtral_sharded",
                                           "qwen2_moe", "qwen3_moe", "olmoe",
                                           "deepseek_v3", "deepseek_v3_fp8",
                                           "deepseek_v2_lite", "gpt_oss",
                                           "gpt_oss_bf16"));

}  // namespace
}  // namespace ringmoe

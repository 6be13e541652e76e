// The threaded forward pass, with weights converted on load, against the
// independent float64 reference of tests/testdata/moe-tiny: unconverted and
// float conversions must match it as closely as the single-threaded pass
// does; int8 and int4 are measured (relative error, greedy agreement) and
// int8 experts in groups of 32 must keep at least the first 8 greedy tokens
// on every model, and bf16-rounded activations (and int8 ones for mxfp4) a
// median error within 1e-2. The
// figures it prints are the accuracy table of docs/PERFORMANCE.md.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/backend/cpu_backend.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/model/architecture.h"
#include "engine/model/config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/model_runner.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"

namespace ringmoe::runtime {
namespace {

constexpr int kNumCases = 5;
constexpr int kGreedyTokens = 16;

struct Conversion {
  const char* name;
  std::optional<kernels::WeightType> type;
  bool attention;
  int32_t group;
  bool lm_head = false;
  // The CPU backend's (kBf16 rounds the activations of products of bf16
  // weights, where the CPU has AVX512-BF16, and of one row of fp8 weights
  // where it also has AVX512-VBMI, and takes two int8 levels of mxfp4's on
  // AVX2 and AVX-512).
  kernels::ActivationPrecision precision = kernels::ActivationPrecision::kF32;
};

struct Accuracy {
  double max_relative_error = 0;  // over every position of every case
  // The median over every position of every case: where one position's
  // router choice flips, the maximum is that position's (and its
  // followers'), whatever the rest do.
  double median_relative_error = 0;
  int min_greedy_agreement = kGreedyTokens;  // leading tokens equal
};

Accuracy Measure(const std::string& dir, const Conversion& conversion) {
  Accuracy acc;
  auto spec = model::LoadModelConfig(dir);
  auto ckpt = checkpoint::Checkpoint::Open(dir);
  EXPECT_TRUE(spec.ok() && ckpt.ok());
  auto arch = model::FindArchitecture(spec->architecture);
  auto weights = model::BindModelWeights(*spec, **arch, **ckpt);
  EXPECT_TRUE(weights.ok()) << weights.status();
  ThreadPool pool(3);
  EXPECT_TRUE(model::ConvertWeights({conversion.type, conversion.attention,
                                     conversion.lm_head, conversion.group},
                                    &pool, &*weights)
                  .ok());
  backend::CpuBackend cpu(&pool, conversion.precision);
  ModelRunner runner(*spec, *weights, &cpu);
  auto golden = checkpoint::SafetensorsFile::Open(dir + "/golden.safetensors");
  EXPECT_TRUE(golden.ok());
  const int64_t vocab = spec->vocab_size;
  std::vector<double> errors;
  for (int i = 0; i < kNumCases; ++i) {
    const std::string prefix = "case" + std::to_string(i) + ".";
    auto ids64 =
        checkpoint::CopyAsInt64(*(*golden)->Find(prefix + "input_ids"));
    auto want = checkpoint::CopyAsFloat32(*(*golden)->Find(prefix + "logits"));
    auto greedy = checkpoint::CopyAsInt64(*(*golden)->Find(prefix + "greedy"));
    EXPECT_TRUE(ids64.ok() && want.ok() && greedy.ok());
    const std::vector<int32_t> ids(ids64->begin(), ids64->end());
    KvCache cache(KvCacheLayers(*spec), 8, spec->num_layers * 128);
    std::vector<float> logits;
    EXPECT_TRUE(runner.Forward({{0, ids, true}}, &cache, &logits).ok());
    for (size_t t = 0; t < ids.size(); ++t) {
      double err = 0, norm = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const double d = double(logits[t * vocab + v]) - (*want)[t * vocab + v];
        err += d * d;
        norm += double((*want)[t * vocab + v]) * (*want)[t * vocab + v];
      }
      errors.push_back(std::sqrt(err / norm));
      acc.max_relative_error = std::max(acc.max_relative_error, errors.back());
    }
    // Greedy continuation, counting leading tokens equal to the reference.
    const float* last = logits.data() + (ids.size() - 1) * vocab;
    std::vector<float> step(last, last + vocab);
    int agree = 0;
    bool diverged = false;
    for (int s = 0; s < kGreedyTokens; ++s) {
      const int32_t next = static_cast<int32_t>(
          std::max_element(step.begin(), step.end()) - step.begin());
      if (!diverged && next == (*greedy)[s]) {
        ++agree;
      } else {
        diverged = true;
      }
      if (s + 1 == kGreedyTokens) break;
      const std::vector<int32_t> one = {next};
      EXPECT_TRUE(runner.Forward({{0, one, false}}, &cache, &step).ok());
    }
    acc.min_greedy_agreement = std::min(acc.min_greedy_agreement, agree);
  }
  std::nth_element(errors.begin(), errors.begin() + errors.size() / 2,
                   errors.end());
  acc.median_relative_error = errors[errors.size() / 2];
  return acc;
}

class QuantizedGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizedGoldenTest, AccuracyAgainstReference) {
  const std::string dir = "tests/testdata/moe-tiny/" + GetParam();
  const Conversion conversions[] = {
      {"auto", std::nullopt, false, 32},
      {"f32", kernels::WeightType::kF32, true, 32},
      {"int8-g32", kernels::WeightType::kInt8, false, 32},
      {"int8-g64", kernels::WeightType::kInt8, false, 64},
      {"int8-g32+attn", kernels::WeightType::kInt8, true, 32},
      {"int8-g32+attn+head", kernels::WeightType::kInt8, true, 32, true},
      {"int4-g32", kernels::WeightType::kInt4, false, 32},
      {"int4-g64", kernels::WeightType::kInt4, false, 64},
      {"int4-g32+attn", kernels::WeightType::kInt4, true, 32},
      {"int4-g32+attn+head", kernels::WeightType::kInt4, true, 32, true},
      {"bf16-activations", std::nullopt, false, 32, false,
       kernels::ActivationPrecision::kBf16},
      {"int8-activations", std::nullopt, false, 32, false,
       kernels::ActivationPrecision::kInt8},
      {"int8-g32+int8-activations", kernels::WeightType::kInt8, false, 32,
       false, kernels::ActivationPrecision::kInt8},
  };
  for (const Conversion& c : conversions) {
    const Accuracy a = Measure(dir, c);
    std::printf("| %s | %s | %.2e | %.2e | %d/%d |\n", GetParam().c_str(),
                c.name, a.max_relative_error, a.median_relative_error,
                a.min_greedy_agreement, kGreedyTokens);
    if (c.precision == kernels::ActivationPrecision::kInt8 && c.type) {
      // int8 experts whose one-row products (decode) take one int8 level
      // on AVX2 and AVX-512 (Q8_0 × Q8_0): int8 weights' error and about
      // as much again, measured (docs/PERFORMANCE.md) and held loosely.
      EXPECT_LE(a.median_relative_error, 3e-2) << c.name;
    } else if (c.precision == kernels::ActivationPrecision::kInt8) {
      // One int8 level for mxfp4 products (gpt_oss's experts) costs less
      // than int8 weights do; on these random weights it flips near-tied
      // greedy choices early, so agreement is measured
      // (docs/PERFORMANCE.md), not held. Where the CPU has AVX512-BF16 the
      // bf16 rounding below adds an error of its own, about as large.
      EXPECT_LE(a.median_relative_error, kernels::UseAvx512Bf16() ? 2e-2 : 1e-2)
          << c.name;
      if (GetParam() == "gpt_oss" && kernels::UseAvx2()) {
        EXPECT_GT(a.max_relative_error, 1e-4) << c.name;
      }
    } else if (c.precision == kernels::ActivationPrecision::kBf16) {
      // Rounding the activations (2^-9) costs about what int8 weights do;
      // it flips a near-tie router choice of mixtral's (case 4), which sets
      // its maximum, hence the median. Where no product rounds (the CPU
      // lacks AVX512-BF16) the float path is used, but for mxfp4's two
      // levels (gpt_oss).
      EXPECT_LE(a.median_relative_error, 1e-2) << c.name;
      // And where the CPU has it, the rounding is in effect.
      if (kernels::UseAvx512Bf16()) {
        EXPECT_GT(a.median_relative_error, 1e-4) << c.name;
      }
    } else if (!c.type || *c.type == kernels::WeightType::kF32) {
      EXPECT_LE(a.max_relative_error, 1e-4) << c.name;
      EXPECT_EQ(a.min_greedy_agreement, kGreedyTokens) << c.name;
    } else if (*c.type == kernels::WeightType::kInt8 && !c.attention &&
               c.group == 32) {
      EXPECT_GE(a.min_greedy_agreement, 8) << c.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(MoeTiny, QuantizedGoldenTest,
                         ::testing::Values("mixtral", "mixtral_sharded",
                                           "qwen2_moe", "qwen3_moe", "olmoe",
                                           "gpt_oss", "deepseek_v3_fp8"));

}  // namespace
}  // namespace ringmoe::runtime

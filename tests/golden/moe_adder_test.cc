// End to end from text to text on moe-adder, a trained Mixtral with the real
// Mistral tokenizer: every prompt of eval.jsonl tokenizes to the reference
// ids and greedy generation reproduces the reference output; with weights
// converted to int8 or int4 the held-out sums stay right.
//
// MOE_ADDER_PROMPT_STRIDE=N (default 1) keeps every N-th prompt: under an
// emulated CPU (tests/isa) the whole set takes a quarter of an hour, and a
// sample in one batch still sends many rows through every expert.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/runtime/generation.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ringmoe {
namespace {

constexpr char kModel[] = "tests/testdata/moe-adder";

struct EvalCase {
  std::string prompt;
  std::vector<int32_t> input_ids;
  std::vector<int32_t> reference_ids;
  std::string reference_text;
  std::string expected;  // the true sum
  bool heldout;          // never trained on
};

std::vector<EvalCase> ReadEval() {
  std::vector<EvalCase> cases;
  std::ifstream in(std::string(kModel) + "/eval.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    cases.push_back({j["prompt"], j["input_ids"].get<std::vector<int32_t>>(),
                     j["reference_greedy_ids"].get<std::vector<int32_t>>(),
                     j["reference_text"], j["expected"],
                     j["split"] == "heldout"});
  }
  return cases;
}

// Every MOE_ADDER_PROMPT_STRIDE-th case, from the first.
std::vector<EvalCase> Sampled(std::vector<EvalCase> cases) {
  const char* env = std::getenv("MOE_ADDER_PROMPT_STRIDE");
  const int stride = env == nullptr ? 1 : std::atoi(env);
  EXPECT_GE(stride, 1) << "MOE_ADDER_PROMPT_STRIDE=" << env;
  if (stride <= 1) return cases;
  std::vector<EvalCase> kept;
  for (size_t i = 0; i < cases.size(); i += stride) {
    kept.push_back(std::move(cases[i]));
  }
  return kept;
}

TEST(MoeAdderTest, TextToTextMatchesReferenceForEveryPrompt) {
  std::vector<EvalCase> all = ReadEval();
  ASSERT_EQ(all.size(), 520u);
  const std::vector<EvalCase> cases = Sampled(std::move(all));
  runtime::EngineOptions options;
  options.model_dir = kModel;
  options.kv_cache_tokens = cases.size() * 16;
  auto engine = runtime::Engine::Load(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const tokenizer::Tokenizer* tok = (*engine)->tokenizer();
  ASSERT_NE(tok, nullptr);

  std::vector<runtime::GenerationRequest> requests;
  for (const EvalCase& c : cases) {
    // The tokenizer's default adds <s>, exactly the model's prompt format.
    EXPECT_EQ(tok->Encode(c.prompt), c.input_ids) << c.prompt;
    runtime::GenerationRequest r;
    r.prompt_ids = tok->Encode(c.prompt);
    r.params.temperature = 0;
    r.params.max_new_tokens = 6;
    requests.push_back(r);
  }
  // All sequences in one batch: prefilled together, decoded together.
  auto results = runtime::Generate(**engine, requests);
  ASSERT_TRUE(results.ok()) << results.status();
  int matches = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& r = (*results)[i];
    EXPECT_EQ(r.ids, cases[i].reference_ids) << cases[i].prompt;
    EXPECT_EQ(r.text, cases[i].reference_text) << cases[i].prompt;
    matches +=
        r.ids == cases[i].reference_ids && r.text == cases[i].reference_text;
  }
  EXPECT_EQ(matches, static_cast<int>(cases.size()));
  EXPECT_EQ((*engine)->kv_cache().num_free_blocks(),
            (*engine)->kv_cache().num_blocks());
}

struct QuantizedCase {
  const char* name;
  model::WeightConversion conversion;
  // Least share of the 500 held-out sums answered right (the bf16 weights
  // answer 499) and answered with the bf16 reference's ids; measured
  // values are in docs/PERFORMANCE.md.
  double min_share;
  // kBf16: products of the bf16 weights on bf16-rounded activations (where
  // the CPU has AVX512-BF16; elsewhere the case repeats the float path).
  kernels::ActivationPrecision precision = kernels::ActivationPrecision::kF32;
};

class MoeAdderQuantizedTest : public ::testing::TestWithParam<QuantizedCase> {};

// The held-out sums, greedy, batched: the share answered right (the sum's
// digits, then </s>) and the share whose ids agree with the bf16 reference.
TEST_P(MoeAdderQuantizedTest, HeldOutSumsStayRight) {
  std::vector<EvalCase> heldout;
  for (EvalCase& c : ReadEval()) {
    if (c.heldout) heldout.push_back(std::move(c));
  }
  ASSERT_EQ(heldout.size(), 500u);
  const std::vector<EvalCase> cases = Sampled(std::move(heldout));
  const int n = static_cast<int>(cases.size());
  runtime::EngineOptions options;
  options.model_dir = kModel;
  options.kv_cache_tokens = cases.size() * 16;
  options.weight_conversion = GetParam().conversion;
  options.activation_precision = GetParam().precision;
  auto engine = runtime::Engine::Load(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<runtime::GenerationRequest> requests;
  for (const EvalCase& c : cases) {
    runtime::GenerationRequest r;
    r.prompt_ids = c.input_ids;
    r.params.temperature = 0;
    r.params.max_new_tokens = 6;
    requests.push_back(r);
  }
  auto results = runtime::Generate(**engine, requests);
  ASSERT_TRUE(results.ok()) << results.status();
  int right = 0, agree = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& r = (*results)[i];
    right += r.text == cases[i].expected &&
             r.finish_reason == runtime::FinishReason::kStop;
    agree += r.ids == cases[i].reference_ids;
  }
  std::printf("moe-adder %s: %d/%d right, %d/%d agree with bf16\n",
              GetParam().name, right, n, agree, n);
  RecordProperty("right", right);
  RecordProperty("agree_with_bf16", agree);
  EXPECT_GE(right, GetParam().min_share * n) << GetParam().name;
  EXPECT_GE(agree, GetParam().min_share * n) << GetParam().name;
}

model::WeightConversion Conversion(kernels::WeightType type, bool everything) {
  model::WeightConversion c;
  c.mlp_type = type;
  c.attention = everything;
  c.lm_head = everything;
  return c;
}

INSTANTIATE_TEST_SUITE_P(
    Formats, MoeAdderQuantizedTest,
    ::testing::Values(
        QuantizedCase{"int8", Conversion(kernels::WeightType::kInt8, false),
                      0.99},
        QuantizedCase{"int8+attn+head",
                      Conversion(kernels::WeightType::kInt8, true), 0.99},
        QuantizedCase{"int4", Conversion(kernels::WeightType::kInt4, false),
                      0.98},
        QuantizedCase{"int4+attn+head",
                      Conversion(kernels::WeightType::kInt4, true), 0.98},
        QuantizedCase{"bf16_activations", model::WeightConversion(), 0.99,
                      kernels::ActivationPrecision::kBf16}),
    [](const ::testing::TestParamInfo<QuantizedCase>& info) {
      std::string name = info.param.name;
      for (char& ch : name) {
        if (ch == '+') ch = '_';
      }
      return name;
    });

TEST(MoeAdderTest, SumsAreRight) {
  runtime::EngineOptions options;
  options.model_dir = kModel;
  auto engine = runtime::Engine::Load(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  runtime::GenerationRequest r;
  r.prompt_ids = (*engine)->tokenizer()->Encode("37+485=");
  r.params.temperature = 0;
  r.params.max_new_tokens = 5;
  auto results = runtime::Generate(**engine, {r});
  ASSERT_TRUE(results.ok()) << results.status();
  EXPECT_EQ((*results)[0].text, "522");
  EXPECT_EQ((*results)[0].finish_reason, runtime::FinishReason::kStop);
}

}  // namespace
}  // namespace ringmoe

#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::runtime {
namespace {

using ::testing::HasSubstr;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kMax = std::numeric_limits<float>::max();

Sampler MakeSampler(const SamplingParams& params, int vocab_size) {
  absl::StatusOr<Sampler> sampler = Sampler::Create(params, vocab_size);
  EXPECT_TRUE(sampler.ok()) << sampler.status();
  return std::move(sampler).value();
}

SamplingParams Seeded(uint64_t seed) {
  SamplingParams params;
  params.seed = seed;
  return params;
}

std::vector<float> RandomLogits(int n, uint64_t seed, double stddev = 2.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.5, stddev);
  std::vector<float> logits(n);
  for (float& l : logits) l = static_cast<float>(normal(rng));
  return logits;
}

std::vector<float> UniformLogits(int n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(lo, hi);
  std::vector<float> logits(n);
  for (float& l : logits) l = static_cast<float>(uniform(rng));
  return logits;
}

int Argmax(const std::vector<float>& logits) {
  int best = 0;
  for (int i = 1; i < static_cast<int>(logits.size()); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

std::vector<double> LogSoftmax(const std::vector<float>& logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(l - max);
  std::vector<double> out;
  for (float l : logits) out.push_back(l - max - std::log(sum));
  return out;
}

// The distribution the spec describes, computed from scratch in double with
// a full sort: temperature, then top-k, top-p and min-p, each on the
// renormalised result of the previous step.
std::vector<double> ExpectedProbs(const std::vector<float>& logits,
                                  const SamplingParams& params) {
  const int n = static_cast<int>(logits.size());
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(n);
  for (int i = 0; i < n; ++i) {
    p[i] = std::exp((logits[i] - max) / params.temperature);
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return logits[a] > logits[b]; });
  auto normalise = [&] {
    const double sum = std::accumulate(p.begin(), p.end(), 0.0);
    for (double& x : p) x /= sum;
  };
  normalise();
  if (params.top_k > 0) {
    for (int r = params.top_k; r < n; ++r) p[order[r]] = 0.0;
    normalise();
  }
  if (params.top_p < 1.0f) {
    double cumulative = 0.0;
    bool reached = false;
    for (int r = 0; r < n; ++r) {
      if (reached) {
        p[order[r]] = 0.0;
      } else {
        cumulative += p[order[r]];
        reached = cumulative >= params.top_p;
      }
    }
    normalise();
  }
  if (params.min_p > 0.0f) {
    const double top = *std::max_element(p.begin(), p.end());
    for (double& x : p) {
      if (x < params.min_p * top) x = 0.0;
    }
    normalise();
  }
  return p;
}

// Chi-square critical value at a false-alarm rate near 1e-6 (Wilson-Hilferty
// approximation, z = 4.75): the seeds are fixed, so this only guards against
// an implementation change that happens to shift the stream.
double ChiSquareLimit(int dof) {
  const double k = std::max(dof, 1);
  const double h = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - h + 4.75 * std::sqrt(h), 3);
}

struct ChiSquare {
  double statistic = 0.0;
  int dof = 0;
};

// Cells with an expected count below 5 are pooled, as the test requires.
ChiSquare ChiSquareTest(const std::vector<int>& observed,
                        const std::vector<double>& probs, int draws) {
  ChiSquare result;
  double pooled_expected = 0.0;
  double pooled_observed = 0.0;
  int cells = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    const double expected = probs[i] * draws;
    if (expected <= 0.0) continue;
    if (expected < 5.0) {
      pooled_expected += expected;
      pooled_observed += observed[i];
      continue;
    }
    result.statistic += std::pow(observed[i] - expected, 2) / expected;
    ++cells;
  }
  if (pooled_expected > 0.0) {
    result.statistic +=
        std::pow(pooled_observed - pooled_expected, 2) / pooled_expected;
    ++cells;
  }
  result.dof = cells - 1;
  return result;
}

// ---------------------------------------------------------------- Validate

TEST(ValidateTest, AcceptsDefaultsAndBoundaries) {
  EXPECT_TRUE(Validate(SamplingParams(), 32000).ok());
  SamplingParams params;
  params.temperature = 0.0f;
  params.top_k = 1'000'000;  // more than the vocabulary: off
  params.top_p = 1.0f;
  params.min_p = 1.0f;
  params.presence_penalty = -2.0f;
  params.frequency_penalty = 2.0f;
  params.repetition_penalty = 0.5f;
  params.max_new_tokens = 1;
  params.stop_token_ids = {0, 31999};
  params.stop_strings = {"\n\n"};
  EXPECT_TRUE(Validate(params, 32000).ok());
}

struct InvalidCase {
  std::string name;
  std::function<void(SamplingParams&)> mutate;
  std::string field;
};

TEST(ValidateTest, RejectsOutOfRangeFieldsNamingThem) {
  const std::vector<InvalidCase> cases = {
      {"negative temperature", [](auto& p) { p.temperature = -0.1f; },
       "temperature"},
      {"NaN temperature", [](auto& p) { p.temperature = kNan; }, "temperature"},
      {"inf temperature", [](auto& p) { p.temperature = kInf; }, "temperature"},
      {"negative top_k", [](auto& p) { p.top_k = -1; }, "top_k"},
      {"zero top_p", [](auto& p) { p.top_p = 0.0f; }, "top_p"},
      {"top_p above 1", [](auto& p) { p.top_p = 1.01f; }, "top_p"},
      {"NaN top_p", [](auto& p) { p.top_p = kNan; }, "top_p"},
      {"negative min_p", [](auto& p) { p.min_p = -0.01f; }, "min_p"},
      {"min_p above 1", [](auto& p) { p.min_p = 1.5f; }, "min_p"},
      {"NaN min_p", [](auto& p) { p.min_p = kNan; }, "min_p"},
      {"zero repetition", [](auto& p) { p.repetition_penalty = 0.0f; },
       "repetition_penalty"},
      {"negative repetition", [](auto& p) { p.repetition_penalty = -1.2f; },
       "repetition_penalty"},
      {"NaN repetition", [](auto& p) { p.repetition_penalty = kNan; },
       "repetition_penalty"},
      {"inf repetition", [](auto& p) { p.repetition_penalty = kInf; },
       "repetition_penalty"},
      {"presence too big", [](auto& p) { p.presence_penalty = 2.5f; },
       "presence_penalty"},
      {"NaN presence", [](auto& p) { p.presence_penalty = kNan; },
       "presence_penalty"},
      {"frequency too small", [](auto& p) { p.frequency_penalty = -2.1f; },
       "frequency_penalty"},
      {"NaN frequency", [](auto& p) { p.frequency_penalty = kNan; },
       "frequency_penalty"},
      {"zero max_new_tokens", [](auto& p) { p.max_new_tokens = 0; },
       "max_new_tokens"},
      {"stop id past vocab",
       [](auto& p) {
         p.stop_token_ids = {3, 100};
       },
       "stop_token_ids[1]"},
      {"negative stop id", [](auto& p) { p.stop_token_ids = {-1}; },
       "stop_token_ids[0]"},
      {"empty stop string",
       [](auto& p) {
         p.stop_strings = {"x", ""};
       },
       "stop_strings[1]"},
  };
  for (const InvalidCase& c : cases) {
    SamplingParams params;
    c.mutate(params);
    const absl::Status status = Validate(params, 100);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(status.message(), HasSubstr(c.field)) << c.name;
  }
}

TEST(ValidateTest, RejectsNonPositiveVocab) {
  EXPECT_THAT(Validate(SamplingParams(), 0).message(), HasSubstr("vocab_size"));
}

TEST(SamplerTest, CreateReportsValidationErrors) {
  SamplingParams params;
  params.top_p = 2.0f;
  const absl::StatusOr<Sampler> sampler = Sampler::Create(params, 10);
  EXPECT_EQ(sampler.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(sampler.status().message(), HasSubstr("top_p"));
  EXPECT_THAT(sampler.status().message(), HasSubstr("Sampler::Create"));
}

// ----------------------------------------------------------------- Greedy

TEST(SamplerTest, GreedyIsArgmaxForRaggedVocabularies) {
  SamplingParams params = Seeded(1);
  params.temperature = 0.0f;
  for (int vocab : {1, 2, 7, 1000, 32003, 151936}) {
    Sampler sampler = MakeSampler(params, vocab);
    for (uint64_t trial = 0; trial < 5; ++trial) {
      const std::vector<float> logits = RandomLogits(vocab, vocab + trial);
      EXPECT_EQ(sampler.Sample(logits, {}, {}), Argmax(logits))
          << "vocab " << vocab;
    }
  }
}

TEST(SamplerTest, GreedyTiesPickTheLowestIndex) {
  SamplingParams params;
  params.temperature = 0.0f;
  std::vector<float> logits = UniformLogits(50, 3, -4.0f, 1.0f);
  logits[17] = logits[31] = logits[44] = 2.5f;
  Sampler sampler = MakeSampler(params, 50);
  EXPECT_EQ(sampler.Sample(logits, {}, {}), 17);
}

// Where the sampler says it samples the greedy token, a caller may find
// that token elsewhere (SequenceChunk::greedy_token): only greedy decoding
// without penalties says so, and then Sample() is kernels::GreedyToken —
// NaN never chosen, +inf tying FLT_MAX (the first wins), -1 for nothing
// usable — and consumes no draw.
TEST(SamplerTest, SamplesGreedyTokenOnlyForUnpenalisedGreedy) {
  SamplingParams params = Seeded(7);
  EXPECT_FALSE(MakeSampler(params, 8).SamplesGreedyToken());
  params.temperature = 0.0f;
  EXPECT_TRUE(MakeSampler(params, 8).SamplesGreedyToken());
  params.top_k = 3;  // truncation keeps the argmax: still greedy
  params.top_p = 0.5f;
  EXPECT_TRUE(MakeSampler(params, 8).SamplesGreedyToken());
  for (auto penalise : std::vector<void (*)(SamplingParams*)>{
           [](SamplingParams* p) { p->repetition_penalty = 1.1f; },
           [](SamplingParams* p) { p->presence_penalty = 0.5f; },
           [](SamplingParams* p) { p->frequency_penalty = -0.5f; }}) {
    SamplingParams penalised = params;
    penalise(&penalised);
    EXPECT_FALSE(MakeSampler(penalised, 8).SamplesGreedyToken());
  }

  Sampler sampler = MakeSampler(params, 8);
  std::vector<float> logits = {1.f, kNan, kInf, 3.f, kMax, kNan, 2.f, kInf};
  EXPECT_EQ(sampler.Sample(logits, {}, {}), 2);
  EXPECT_EQ(kernels::GreedyToken(logits.data(), 8), 2);
  logits[2] = 5.f;
  EXPECT_EQ(sampler.Sample(logits, {}, {}), 4);  // FLT_MAX before +inf
  EXPECT_EQ(kernels::GreedyToken(logits.data(), 8), 4);
  const std::vector<float> nothing = {kNan, -kInf, kNan};
  EXPECT_EQ(sampler.Sample(nothing, {}, {}), -1);
  EXPECT_EQ(kernels::GreedyToken(nothing.data(), 3), -1);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  for (uint64_t seed = 0; seed < 100; ++seed) {
    SamplingParams params = Seeded(seed);
    params.temperature = 1.7f;
    params.top_k = 1;
    const int vocab = 997 + static_cast<int>(seed);
    const std::vector<float> logits = RandomLogits(vocab, 1000 + seed, 0.5);
    Sampler sampler = MakeSampler(params, vocab);
    EXPECT_EQ(sampler.Sample(logits, {}, {}), Argmax(logits));
  }
}

TEST(SamplerTest, TopKOneTieKeepsTheLowestIndex) {
  SamplingParams params = Seeded(9);
  params.top_k = 1;
  std::vector<float> logits = UniformLogits(64, 4, -3.0f, 0.0f);
  logits[40] = logits[12] = 1.0f;
  Sampler sampler = MakeSampler(params, 64);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(sampler.Sample(logits, {}, {}), 12);
}

// k = 5 takes the heap path, k = 300 the radix select; both must break a
// tie at the boundary towards the lowest id and give the same distribution.
TEST(SamplerTest, TopKBoundaryTiesKeepTheLowestIdOnBothPaths) {
  for (const int k : {5, 300}) {
    const int vocab = 1009;
    std::vector<float> logits = UniformLogits(vocab, 60 + k, -6.0f, -2.0f);
    std::vector<int> leaders(vocab);
    std::iota(leaders.begin(), leaders.end(), 0);
    std::shuffle(leaders.begin(), leaders.end(), std::mt19937_64(k));
    for (int r = 0; r < k - 1; ++r) {
      logits[leaders[r]] = 1.0f + 0.001f * static_cast<float>(r);
    }
    // Three tokens tie for the last slot.
    const int tied[] = {leaders[k - 1], leaders[k], leaders[k + 1]};
    for (const int id : tied) logits[id] = 0.5f;
    SamplingParams params = Seeded(61);
    params.top_k = k;
    const std::vector<double> probs = ExpectedProbs(logits, params);
    const int lowest_tied = std::min({tied[0], tied[1], tied[2]});
    for (const int id : tied) {
      EXPECT_EQ(probs[id] > 0.0, id == lowest_tied) << "reference, k " << k;
    }
    Sampler sampler = MakeSampler(params, vocab);
    std::vector<int> counts(vocab, 0);
    for (int i = 0; i < 20000; ++i) {
      const int32_t token = sampler.Sample(logits, {}, {});
      ASSERT_GT(probs[token], 0.0) << "token " << token << ", k " << k;
      ++counts[token];
    }
    const ChiSquare chi = ChiSquareTest(counts, probs, 20000);
    EXPECT_LE(chi.statistic, ChiSquareLimit(chi.dof)) << "k " << k;
  }
}

// ------------------------------------------------------------ Seeded RNG

std::vector<int32_t> Draw(Sampler& sampler, const std::vector<float>& logits,
                          int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(sampler.Sample(logits, {}, {}));
  return out;
}

TEST(SamplerTest, SeedMakesTheSequenceReproducible) {
  const std::vector<float> logits = RandomLogits(5000, 11, 1.0);
  SamplingParams params = Seeded(1234);
  params.top_p = 0.95f;
  Sampler a = MakeSampler(params, 5000);
  Sampler b = MakeSampler(params, 5000);
  EXPECT_EQ(a.seed(), 1234u);
  const std::vector<int32_t> from_a = Draw(a, logits, 200);
  EXPECT_EQ(from_a, Draw(b, logits, 200));

  params.seed = 1235;
  Sampler c = MakeSampler(params, 5000);
  Sampler d = MakeSampler(Seeded(1234), 5000);
  d = MakeSampler(params, 5000);  // move-assignment keeps the new stream
  const std::vector<int32_t> from_c = Draw(c, logits, 200);
  EXPECT_NE(from_c, from_a);
  EXPECT_EQ(from_c, Draw(d, logits, 200));
}

TEST(SamplerTest, SeededSequenceDoesNotDependOnOtherSequences) {
  const std::vector<float> logits = RandomLogits(3000, 12, 1.0);
  Sampler alone = MakeSampler(Seeded(77), 3000);
  const std::vector<int32_t> expected = Draw(alone, logits, 100);

  // Interleaved with another sequence and a different, greedy one, as a
  // batch would run them.
  Sampler mine = MakeSampler(Seeded(77), 3000);
  Sampler other = MakeSampler(Seeded(77), 3000);
  SamplingParams greedy_params;
  greedy_params.temperature = 0.0f;
  Sampler greedy = MakeSampler(greedy_params, 3000);
  std::vector<int32_t> got;
  for (int i = 0; i < 100; ++i) {
    other.Sample(logits, {}, {});
    greedy.Sample(logits, {}, {});
    got.push_back(mine.Sample(logits, {}, {}));
  }
  EXPECT_EQ(got, expected);
}

TEST(SamplerTest, UnseededSamplersDrawDifferentSeeds) {
  const std::vector<float> logits = RandomLogits(5000, 13, 0.5);
  Sampler a = MakeSampler(SamplingParams(), 5000);
  Sampler b = MakeSampler(SamplingParams(), 5000);
  EXPECT_NE(a.seed(), b.seed());
  EXPECT_NE(Draw(a, logits, 50), Draw(b, logits, 50));
}

// ---------------------------------------------------------- Distributions

struct DistributionCase {
  std::string name;
  int vocab;
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
};

class DistributionTest : public ::testing::TestWithParam<DistributionCase> {};

TEST_P(DistributionTest, FrequenciesMatchTheTruncatedSoftmax) {
  const DistributionCase& c = GetParam();
  SamplingParams params = Seeded(0xC0FFEE + c.vocab);
  params.temperature = c.temperature;
  params.top_k = c.top_k;
  params.top_p = c.top_p;
  params.min_p = c.min_p;
  const std::vector<float> logits = RandomLogits(c.vocab, 100 + c.vocab, 1.5);
  const std::vector<double> probs = ExpectedProbs(logits, params);
  const std::vector<double> raw = LogSoftmax(logits);

  constexpr int kDraws = 20000;
  Sampler sampler = MakeSampler(params, c.vocab);
  std::vector<int> counts(c.vocab, 0);
  for (int i = 0; i < kDraws; ++i) {
    SampledLogprobs logprobs;
    const int32_t token = sampler.Sample(logits, {}, {}, &logprobs);
    ASSERT_GE(token, 0);
    ASSERT_LT(token, c.vocab);
    ASSERT_GT(probs[token], 0.0) << "token " << token << " was truncated";
    ++counts[token];
    if (i < 200) {
      EXPECT_NEAR(logprobs.processed, std::log(probs[token]), 1e-4);
      EXPECT_NEAR(logprobs.raw, raw[token], 1e-4);
    }
  }
  const ChiSquare chi = ChiSquareTest(counts, probs, kDraws);
  int support = 0;
  for (double p : probs) support += p > 0.0;
  EXPECT_LE(chi.statistic, ChiSquareLimit(chi.dof))
      << "dof " << chi.dof << ", support " << support;
}

INSTANTIATE_TEST_SUITE_P(
    Settings, DistributionTest,
    ::testing::Values(DistributionCase{"plain", 37},
                      DistributionCase{"cold", 41, 0.6f},
                      DistributionCase{"hot", 29, 1.9f},
                      DistributionCase{"top_k", 53, 1.0f, 7},
                      DistributionCase{"top_k_hot", 61, 1.5f, 20},
                      DistributionCase{"top_p", 43, 1.0f, 0, 0.8f},
                      DistributionCase{"top_p_cold", 300, 0.8f, 0, 0.6f},
                      DistributionCase{"min_p", 47, 1.0f, 0, 1.0f, 0.1f},
                      DistributionCase{"min_p_hot", 59, 2.0f, 0, 1.0f, 0.3f},
                      DistributionCase{"all", 71, 0.9f, 25, 0.9f, 0.05f},
                      DistributionCase{"top_k_top_p", 1001, 1.2f, 30, 0.7f},
                      DistributionCase{"large_top_k", 700, 1.0f, 300},
                      DistributionCase{"large_top_k_top_p", 2003, 1.0f, 900,
                                       0.5f}),
    [](const ::testing::TestParamInfo<DistributionCase>& info) {
      return info.param.name;
    });

// The distribution test must be able to fail: draws at one temperature do
// not pass for another.
TEST(DistributionTest, ChiSquareRejectsAWrongDistribution) {
  const std::vector<float> logits = RandomLogits(37, 5, 1.5);
  SamplingParams params = Seeded(6);
  Sampler sampler = MakeSampler(params, 37);
  std::vector<int> counts(37, 0);
  for (int i = 0; i < 20000; ++i) ++counts[sampler.Sample(logits, {}, {})];
  SamplingParams wrong = params;
  wrong.temperature = 1.15f;
  const ChiSquare chi =
      ChiSquareTest(counts, ExpectedProbs(logits, wrong), 20000);
  EXPECT_GT(chi.statistic, ChiSquareLimit(chi.dof));
}

// Probabilities 0.5, 0.3, 0.2 among a vocabulary of otherwise impossible
// tokens; the cut points below sit well away from rounding.
std::vector<float> ThreeTokenLogits() {
  std::vector<float> logits(10, -kInf);
  logits[3] = std::log(0.5f) + 7.0f;
  logits[6] = std::log(0.3f) + 7.0f;
  logits[8] = std::log(0.2f) + 7.0f;
  return logits;
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingTheMass) {
  const std::vector<float> logits = ThreeTokenLogits();
  SamplingParams params = Seeded(21);
  params.top_p = 0.45f;  // token 3 alone reaches it
  Sampler only_first = MakeSampler(params, 10);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(only_first.Sample(logits, {}, {}), 3);
  }
  params.top_p = 0.75f;  // needs 3 and 6 (0.8)
  Sampler two = MakeSampler(params, 10);
  for (int i = 0; i < 500; ++i) {
    SampledLogprobs logprobs;
    const int32_t token = two.Sample(logits, {}, {}, &logprobs);
    ASSERT_TRUE(token == 3 || token == 6) << token;
    EXPECT_NEAR(logprobs.processed,
                std::log(token == 3 ? 0.5 / 0.8 : 0.3 / 0.8), 1e-5);
    EXPECT_NEAR(logprobs.raw, std::log(token == 3 ? 0.5 : 0.3), 1e-5);
  }
}

TEST(SamplerTest, MinPDropsTokensBelowTheScaledMaximum) {
  const std::vector<float> logits = ThreeTokenLogits();
  SamplingParams params = Seeded(22);
  params.min_p = 0.5f;  // threshold 0.25: drops 0.2, keeps 0.3
  Sampler sampler = MakeSampler(params, 10);
  int saw_six = 0;
  for (int i = 0; i < 500; ++i) {
    const int32_t token = sampler.Sample(logits, {}, {});
    ASSERT_TRUE(token == 3 || token == 6) << token;
    saw_six += token == 6;
  }
  EXPECT_GT(saw_six, 100);
}

// A 152k vocabulary with a flat distribution puts tens of thousands of
// tokens in the nucleus, so top-p has to grow its partial sort repeatedly.
TEST(SamplerTest, WideNucleusOnALargeVocabulary) {
  constexpr int kVocab = 151936;
  const std::vector<float> logits = RandomLogits(kVocab, 31, 1.0);
  for (const auto& [top_k, top_p, min_p] :
       std::vector<std::tuple<int, float, float>>{{0, 0.5f, 0.0f},
                                                  {0, 0.97f, 0.02f},
                                                  {40, 0.9f, 0.0f},
                                                  {2000, 0.3f, 0.0f}}) {
    SamplingParams params = Seeded(32);
    params.top_k = top_k;
    params.top_p = top_p;
    params.min_p = min_p;
    const std::vector<double> probs = ExpectedProbs(logits, params);
    Sampler sampler = MakeSampler(params, kVocab);
    for (int i = 0; i < 40; ++i) {
      SampledLogprobs logprobs;
      const int32_t token = sampler.Sample(logits, {}, {}, &logprobs);
      ASSERT_GE(token, 0);
      ASSERT_GT(probs[token], 0.0) << "top_k " << top_k << " top_p " << top_p;
      EXPECT_NEAR(logprobs.processed, std::log(probs[token]), 1e-4);
    }
  }
}

// ---------------------------------------------------------------- Penalties

// Token 0 leads with 2.0, token 1 follows with 1.5; the rest sit lower.
std::vector<float> TwoLeaders(int vocab, uint64_t seed) {
  std::vector<float> logits = UniformLogits(vocab, seed, -3.0f, 1.0f);
  logits[0] = 2.0f;
  logits[1] = 1.5f;
  return logits;
}

int Greedy(SamplingParams params, const std::vector<float>& logits,
           std::vector<int32_t> prompt, std::vector<int32_t> generated) {
  params.temperature = 0.0f;
  Sampler sampler = MakeSampler(params, static_cast<int>(logits.size()));
  return sampler.Sample(logits, prompt, generated);
}

TEST(PenaltyTest, RepetitionDividesPositiveLogits) {
  const std::vector<float> logits = TwoLeaders(101, 41);
  SamplingParams params;
  params.repetition_penalty = 1.5f;               // 2.0 / 1.5 = 1.33 < 1.5
  EXPECT_EQ(Greedy(params, logits, {0}, {}), 1);  // prompt counts
  EXPECT_EQ(Greedy(params, logits, {}, {0}), 1);  // so does the output
  EXPECT_EQ(Greedy(params, logits, {5}, {7}), 0);
  params.repetition_penalty = 1.3f;  // 2.0 / 1.3 = 1.54 > 1.5
  EXPECT_EQ(Greedy(params, logits, {0}, {}), 0);
}

TEST(PenaltyTest, RepetitionMultipliesNegativeLogits) {
  std::vector<float> logits = UniformLogits(77, 42, -5.0f, -2.0f);
  logits[0] = -1.0f;
  logits[1] = -1.5f;
  SamplingParams params;
  params.repetition_penalty = 2.0f;  // -1.0 * 2 = -2.0 < -1.5
  EXPECT_EQ(Greedy(params, logits, {0}, {}), 1);
  params.repetition_penalty = 1.4f;  // -1.4 > -1.5
  EXPECT_EQ(Greedy(params, logits, {0}, {}), 0);
}

TEST(PenaltyTest, RepetitionAppliesOncePerDistinctToken) {
  std::vector<float> logits = TwoLeaders(90, 43);
  logits[1] = 1.2f;
  SamplingParams params;
  params.repetition_penalty = 1.5f;  // once: 1.33 > 1.2; five times: 0.26
  EXPECT_EQ(Greedy(params, logits, {0, 0, 0}, {0, 0}), 0);
}

TEST(PenaltyTest, PresenceCountsGeneratedTokensOnly) {
  const std::vector<float> logits = TwoLeaders(64, 44);
  SamplingParams params;
  params.presence_penalty = 0.6f;                          // 2.0 - 0.6 = 1.4
  EXPECT_EQ(Greedy(params, logits, {}, {0}), 1);           // flips
  EXPECT_EQ(Greedy(params, logits, {0, 0, 0}, {3}), 0);    // prompt: no
  params.presence_penalty = 0.4f;                          // 1.6
  EXPECT_EQ(Greedy(params, logits, {}, {0, 0, 0, 0}), 0);  // count-blind
  params.presence_penalty = -0.6f;                         // 1.5 + 0.6 = 2.1
  EXPECT_EQ(Greedy(params, logits, {}, {1}), 1);
}

TEST(PenaltyTest, FrequencyScalesWithTheCount) {
  const std::vector<float> logits = TwoLeaders(65, 45);
  SamplingParams params;
  params.frequency_penalty = 0.2f;
  EXPECT_EQ(Greedy(params, logits, {}, {0, 4, 0, 0}), 1);  // 2.0 - 0.6
  EXPECT_EQ(Greedy(params, logits, {}, {0, 4, 0}), 0);     // 2.0 - 0.4
  EXPECT_EQ(Greedy(params, logits, {0, 0, 0, 0}, {}), 0);  // prompt: no
}

TEST(PenaltyTest, RepetitionComesBeforePresence) {
  std::vector<float> logits = UniformLogits(50, 46, -3.0f, 0.5f);
  logits[0] = 3.0f;
  logits[1] = 1.1f;
  SamplingParams params;
  params.repetition_penalty = 2.0f;
  params.presence_penalty = 0.5f;
  // 3.0 / 2 - 0.5 = 1.0 < 1.1; the other order would give 1.25.
  EXPECT_EQ(Greedy(params, logits, {}, {0}), 1);
}

TEST(PenaltyTest, LogprobsSeeExactlyThePenalisedLogits) {
  const int vocab = 211;
  const std::vector<float> logits = RandomLogits(vocab, 47, 2.0);
  const std::vector<int32_t> prompt = {5, 9, 9, 200, 17};
  const std::vector<int32_t> generated = {9, 33, 33, 33, 5, 120};
  SamplingParams params;
  params.temperature = 0.0f;
  params.repetition_penalty = 1.3f;
  params.presence_penalty = 0.7f;
  params.frequency_penalty = 0.25f;

  std::vector<float> expected = logits;
  for (int id : {5, 9, 200, 17, 33, 120}) {
    expected[id] = expected[id] > 0 ? expected[id] / 1.3f : expected[id] * 1.3f;
  }
  for (const auto& [id, count] :
       std::vector<std::pair<int, int>>{{9, 1}, {33, 3}, {5, 1}, {120, 1}}) {
    expected[id] -= 0.7f + 0.25f * count;
  }
  const std::vector<double> processed = LogSoftmax(expected);
  const std::vector<double> raw = LogSoftmax(logits);

  Sampler sampler = MakeSampler(params, vocab);
  SampledLogprobs logprobs;
  const int32_t token = sampler.Sample(logits, prompt, generated, &logprobs);
  EXPECT_EQ(token, Argmax(expected));
  EXPECT_NEAR(logprobs.processed, processed[token], 1e-5);
  EXPECT_NEAR(logprobs.raw, raw[token], 1e-5);
}

TEST(PenaltyTest, PenalisedDistributionIsSampledCorrectly) {
  const int vocab = 31;
  const std::vector<float> logits = RandomLogits(vocab, 48, 1.0);
  const std::vector<int32_t> prompt = {1, 2, 3};
  const std::vector<int32_t> generated = {3, 4, 4, 7};
  SamplingParams params = Seeded(49);
  params.temperature = 0.8f;
  params.repetition_penalty = 1.6f;
  params.frequency_penalty = 0.5f;
  std::vector<float> expected = logits;
  for (int id : {1, 2, 3, 4, 7}) {
    expected[id] = expected[id] > 0 ? expected[id] / 1.6f : expected[id] * 1.6f;
  }
  expected[3] -= 0.5f;
  expected[4] -= 1.0f;
  expected[7] -= 0.5f;
  const std::vector<double> probs = ExpectedProbs(expected, params);

  Sampler sampler = MakeSampler(params, vocab);
  std::vector<int> counts(vocab, 0);
  for (int i = 0; i < 20000; ++i) {
    ++counts[sampler.Sample(logits, prompt, generated)];
  }
  const ChiSquare chi = ChiSquareTest(counts, probs, 20000);
  EXPECT_LE(chi.statistic, ChiSquareLimit(chi.dof));
}

TEST(PenaltyTest, IdsOutsideTheLogitsAreIgnored) {
  const std::vector<float> logits = TwoLeaders(40, 50);
  SamplingParams params;
  params.repetition_penalty = 1.5f;
  params.presence_penalty = 1.0f;
  params.frequency_penalty = 1.0f;
  EXPECT_EQ(Greedy(params, logits, {-1, 40, 1 << 30}, {-5, 40, 99}), 0);
}

// ------------------------------------------------------------- Edge cases

TEST(SamplerTest, NanLogitsAreNeverChosen) {
  std::vector<float> logits = RandomLogits(20, 51, 1.0);
  for (int i = 0; i < 20; i += 2) logits[i] = kNan;
  Sampler sampler = MakeSampler(Seeded(52), 20);
  for (int i = 0; i < 500; ++i) {
    EXPECT_EQ(sampler.Sample(logits, {}, {}) % 2, 1);
  }
}

TEST(SamplerTest, InfiniteLogitTakesAllTheMass) {
  std::vector<float> logits = RandomLogits(20, 53, 1.0);
  logits[13] = kInf;
  SamplingParams params = Seeded(54);
  params.repetition_penalty = 0.5f;  // would overflow a huge logit
  Sampler sampler = MakeSampler(params, 20);
  for (int i = 0; i < 100; ++i) {
    SampledLogprobs logprobs;
    EXPECT_EQ(sampler.Sample(logits, {13}, {}, &logprobs), 13);
    EXPECT_FLOAT_EQ(logprobs.processed, 0.0f);
  }
}

TEST(SamplerTest, UnusableLogitsReturnMinusOne) {
  Sampler sampler = MakeSampler(Seeded(55), 8);
  EXPECT_EQ(sampler.Sample({}, {}, {}), -1);
  const std::vector<float> nans(8, kNan);
  EXPECT_EQ(sampler.Sample(nans, {}, {}), -1);
  const std::vector<float> minus_inf(8, -kInf);
  EXPECT_EQ(sampler.Sample(minus_inf, {}, {}), -1);
}

TEST(SamplerTest, OneSamplerHandlesChangingVocabularySizes) {
  SamplingParams params = Seeded(56);
  params.top_k = 5;
  params.top_p = 0.9f;
  params.repetition_penalty = 1.1f;
  params.frequency_penalty = 0.3f;
  Sampler sampler = MakeSampler(params, 1000);
  for (int vocab : {1000, 3, 5000, 1, 64}) {
    const std::vector<float> logits = RandomLogits(vocab, vocab, 1.0);
    const int32_t token = sampler.Sample(logits, {0, 2, 999}, {1, 1, 4999});
    EXPECT_GE(token, 0);
    EXPECT_LT(token, vocab);
  }
}

}  // namespace
}  // namespace ringmoe::runtime

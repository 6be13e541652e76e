// Router against a double-precision reference written from the model
// papers' and Hugging Face's descriptions, for every scoring, group and
// bias combination, with ties and -inf logits.
#include "engine/moe/routing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace ringmoe::moe {
namespace {

using model::GroupScoring;
using model::RouterOrder;
using model::RouterScoring;
using model::RoutingSpec;

// Indices of `values` ordered best first, ties to the lower index.
std::vector<int> Ranked(const std::vector<double>& values,
                        const std::vector<int>& candidates) {
  std::vector<int> order = candidates;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return values[a] > values[b]; });
  return order;
}

struct Expected {
  std::vector<int> experts;
  std::vector<double> weights;
};

Expected Reference(const float* logits, int experts, int k,
                   const RoutingSpec& spec, const float* bias) {
  std::vector<double> scores(experts), select(experts);
  double max_logit = -std::numeric_limits<double>::infinity();
  for (int e = 0; e < experts; ++e)
    max_logit = std::max<double>(max_logit, logits[e]);
  double z = 0;
  for (int e = 0; e < experts; ++e)
    z += std::exp(double(logits[e]) - max_logit);
  const bool top_k_first = spec.order == RouterOrder::kTopKThenSoftmax;
  for (int e = 0; e < experts; ++e) {
    scores[e] = top_k_first ? double(logits[e])
                : spec.scoring == RouterScoring::kSoftmax
                    ? std::exp(double(logits[e]) - max_logit) / z
                    : 1.0 / (1.0 + std::exp(-double(logits[e])));
    select[e] = scores[e] + (bias ? bias[e] : 0.0);
  }
  const int groups = static_cast<int>(spec.num_groups);
  const int per = experts / groups;
  std::vector<double> group_score(groups);
  for (int g = 0; g < groups; ++g) {
    std::vector<double> s(select.begin() + g * per,
                          select.begin() + (g + 1) * per);
    std::sort(s.rbegin(), s.rend());
    group_score[g] = spec.group_scoring == GroupScoring::kMax || per < 2
                         ? s[0]
                         : s[0] + s[1];
  }
  std::vector<int> all_groups(groups);
  std::iota(all_groups.begin(), all_groups.end(), 0);
  std::vector<int> kept = Ranked(group_score, all_groups);
  kept.resize(spec.topk_groups);
  std::vector<int> candidates;
  for (int e = 0; e < experts; ++e) {
    if (std::find(kept.begin(), kept.end(), e / per) != kept.end())
      candidates.push_back(e);
  }
  Expected out;
  out.experts = Ranked(select, candidates);
  out.experts.resize(k);
  if (top_k_first) {
    // A softmax over the chosen logits alone.
    double top = -std::numeric_limits<double>::infinity(), chosen_z = 0;
    for (int e : out.experts) top = std::max(top, scores[e]);
    for (int e : out.experts) chosen_z += std::exp(scores[e] - top);
    std::vector<double> chosen(experts);
    for (int e : out.experts) chosen[e] = std::exp(scores[e] - top) / chosen_z;
    scores = chosen;
  }
  double sum = 0;
  for (int e : out.experts) sum += scores[e];
  for (int e : out.experts) {
    double w = scores[e];
    if (spec.renormalize) w /= sum + 1e-20;
    out.weights.push_back(w * spec.scaling_factor);
  }
  return out;
}

struct Case {
  std::string name;
  int experts, k;
  RoutingSpec spec;
};

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (RouterScoring scoring :
       {RouterScoring::kSoftmax, RouterScoring::kSigmoid}) {
    for (bool renorm : {false, true}) {
      for (bool bias : {false, true}) {
        for (int grouping = 0; grouping < 3; ++grouping) {
          RoutingSpec s;
          s.scoring = scoring;
          s.renormalize = renorm;
          s.selection_bias = bias;
          s.scaling_factor = renorm ? 2.5 : 1.0;
          if (grouping > 0) {
            s.num_groups = 4;
            s.topk_groups = 2;
            s.group_scoring =
                grouping == 1 ? GroupScoring::kMax : GroupScoring::kTopTwoSum;
          }
          cases.push_back(
              {std::string(scoring == RouterScoring::kSoftmax ? "softmax"
                                                              : "sigmoid") +
                   (renorm ? "_renorm" : "") + (bias ? "_bias" : "") +
                   (grouping == 0   ? ""
                    : grouping == 1 ? "_groupmax"
                                    : "_grouptop2"),
               16, 4, s});
        }
      }
    }
  }
  // gpt-oss: the top k logits, then a softmax over them; with and without
  // the extras the spec allows beside it.
  for (bool renorm : {false, true}) {
    for (bool bias : {false, true}) {
      for (int grouping = 0; grouping < 2; ++grouping) {
        RoutingSpec s;
        s.order = RouterOrder::kTopKThenSoftmax;
        s.renormalize = renorm;
        s.selection_bias = bias;
        s.scaling_factor = renorm ? 1.5 : 1.0;
        if (grouping > 0) {
          s.num_groups = 4;
          s.topk_groups = 2;
        }
        cases.push_back({std::string("topk_softmax") +
                             (renorm ? "_renorm" : "") + (bias ? "_bias" : "") +
                             (grouping > 0 ? "_groupmax" : ""),
                         16, 4, s});
      }
    }
  }
  return cases;
}

class RouterTest : public ::testing::TestWithParam<Case> {};

void ExpectMatchesReference(const Case& c, const std::vector<float>& logits,
                            const std::vector<float>& bias, int64_t tokens,
                            const std::string& what) {
  const Router router(c.experts, c.k, c.spec);
  const Routing r = router.Route(logits.data(), tokens,
                                 c.spec.selection_bias ? bias.data() : nullptr);
  ASSERT_EQ(r.experts.size(), static_cast<size_t>(tokens * c.k));
  for (int64_t t = 0; t < tokens; ++t) {
    const Expected want =
        Reference(&logits[t * c.experts], c.experts, c.k, c.spec,
                  c.spec.selection_bias ? bias.data() : nullptr);
    for (int j = 0; j < c.k; ++j) {
      EXPECT_EQ(r.experts[t * c.k + j], want.experts[j])
          << what << " token " << t << " choice " << j;
      EXPECT_NEAR(r.weights[t * c.k + j], want.weights[j],
                  1e-6 * std::max(1.0, std::abs(want.weights[j])))
          << what << " token " << t << " choice " << j;
    }
  }
}

TEST_P(RouterTest, RandomLogitsMatchReference) {
  const Case& c = GetParam();
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 2.f);
  const int64_t tokens = 50;
  std::vector<float> logits(tokens * c.experts), bias(c.experts);
  for (float& v : logits) v = normal(rng);
  for (float& v : bias) v = normal(rng) * 0.1f;
  ExpectMatchesReference(c, logits, bias, tokens, "random");
}

// Logits on a coarse grid tie often, inside and across groups; some are
// -inf (a softmax probability or sigmoid score of exactly 0). The grid has
// no negatives: sigmoid(x) + sigmoid(-x) = 1 would make pair sums tie in
// exact arithmetic but not in any rounding of it.
TEST_P(RouterTest, TiesAndMinusInfinityMatchReference) {
  const Case& c = GetParam();
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> level(0, 6), rare(0, 9);
  const int64_t tokens = 60;
  std::vector<float> logits(tokens * c.experts), bias(c.experts);
  for (float& v : logits) {
    v = rare(rng) == 0 ? -std::numeric_limits<float>::infinity()
                       : static_cast<float>(level(rng));
  }
  for (float& v : bias) v = static_cast<float>(level(rng)) * 0.25f;
  ExpectMatchesReference(c, logits, bias, tokens, "ties");
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, RouterTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

// Mixtral / Qwen: softmax over all experts, top-k, optional renormalisation
// (the scheme every earlier architecture uses) by hand.
TEST(RouterTest, SoftmaxTopTwoByHand) {
  const float logits[] = {0.f, 2.f, 1.f, -1.f};
  RoutingSpec spec;
  spec.renormalize = false;
  const Routing raw = Router(4, 2, spec).Route(logits, 1, nullptr);
  const double z = 1 + std::exp(2.0) + std::exp(1.0) + std::exp(-1.0);
  EXPECT_EQ(raw.experts, std::vector<int32_t>({1, 2}));
  EXPECT_NEAR(raw.weights[0], std::exp(2.0) / z, 1e-7);
  EXPECT_NEAR(raw.weights[1], std::exp(1.0) / z, 1e-7);
  spec.renormalize = true;
  const Routing norm = Router(4, 2, spec).Route(logits, 1, nullptr);
  EXPECT_NEAR(norm.weights[0], std::exp(2.0) / (std::exp(2.0) + std::exp(1.0)),
              1e-7);
}

// DeepSeek-V3: the bias picks, the unbiased sigmoid weighs; a group whose
// best expert is strong but whose second is weak loses to a group of two
// good ones under the top-two sum, not under the max.
TEST(RouterTest, GroupScoresDecideEligibility) {
  // Two groups of two experts; one group kept; top-1.
  const float logits[] = {3.f, -3.f, 2.f, 1.9f};
  RoutingSpec spec;
  spec.scoring = RouterScoring::kSigmoid;
  spec.num_groups = 2;
  spec.topk_groups = 1;
  spec.renormalize = false;
  spec.group_scoring = GroupScoring::kMax;
  EXPECT_EQ(Router(4, 1, spec).Route(logits, 1, nullptr).experts[0], 0);
  spec.group_scoring = GroupScoring::kTopTwoSum;
  EXPECT_EQ(Router(4, 1, spec).Route(logits, 1, nullptr).experts[0], 2);
  // The bias moves the choice to expert 3 but its weight stays sigmoid(1.9).
  const float bias[] = {0.f, 0.f, 0.f, 0.5f};
  spec.selection_bias = true;
  const Routing r = Router(4, 1, spec).Route(logits, 1, bias);
  EXPECT_EQ(r.experts[0], 3);
  EXPECT_NEAR(r.weights[0], 1 / (1 + std::exp(-1.9)), 1e-7);
}

TEST(RoutingTest, GroupByExpertListsEachTokenOncePerChoice) {
  Routing r;
  r.num_tokens = 3;
  r.top_k = 2;
  r.experts = {4, 1, 1, 0, 4, 0};
  r.weights = {.6f, .4f, .7f, .3f, .9f, .1f};
  auto groups = GroupByExpert(r, 5);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].expert, 0);
  EXPECT_EQ(groups[0].tokens, std::vector<int32_t>({1, 2}));
  EXPECT_EQ(groups[0].weights, std::vector<float>({.3f, .1f}));
  EXPECT_EQ(groups[1].expert, 1);
  EXPECT_EQ(groups[1].tokens, std::vector<int32_t>({0, 1}));
  EXPECT_EQ(groups[2].expert, 4);
  EXPECT_EQ(groups[2].tokens, std::vector<int32_t>({0, 2}));
  EXPECT_EQ(groups[2].weights, std::vector<float>({.6f, .9f}));
}

}  // namespace
}  // namespace ringmoe::moe

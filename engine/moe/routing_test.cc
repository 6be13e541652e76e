#include "engine/moe/routing.h"

#include <cmath>
#include <random>

#include "gtest/gtest.h"

namespace ringmoe::moe {
namespace {

TEST(RoutingTest, SoftmaxOverAllExpertsThenTopK) {
  std::mt19937 rng(21);
  std::normal_distribution<float> normal(0.f, 2.f);
  const int64_t tokens = 7, experts = 9, k = 3;
  std::vector<float> logits(tokens * experts);
  for (auto& v : logits) v = normal(rng);
  for (bool renorm : {false, true}) {
    Routing r = RouteTokens(logits.data(), tokens, experts, k, renorm);
    for (int64_t t = 0; t < tokens; ++t) {
      const float* row = &logits[t * experts];
      double z = 0;
      for (int64_t e = 0; e < experts; ++e) z += std::exp(double(row[e]));
      std::vector<int> order(experts);
      for (int e = 0; e < experts; ++e) order[e] = e;
      std::sort(order.begin(), order.end(),
                [&](int a, int b) { return row[a] > row[b]; });
      double chosen_sum = 0;
      for (int j = 0; j < k; ++j)
        chosen_sum += std::exp(double(row[order[j]])) / z;
      for (int j = 0; j < k; ++j) {
        EXPECT_EQ(r.experts[t * k + j], order[j]);
        double p = std::exp(double(row[order[j]])) / z;
        if (renorm) p /= chosen_sum;
        EXPECT_NEAR(r.weights[t * k + j], p, 1e-6);
      }
    }
  }
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

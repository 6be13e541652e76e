// The MoE block against a double-precision reference on random weights:
// router product with and without the router's bias, both routing orders,
// the experts' weighted sum and the (gated or plain) shared expert.
#include "engine/moe/moe_block.h"

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "engine/backend/cpu_backend.h"
#include "gtest/gtest.h"

namespace ringmoe::moe {
namespace {

std::vector<float> Random(int64_t n, std::mt19937* rng, float sd) {
  std::normal_distribution<float> normal(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = normal(*rng);
  return v;
}

backend::Weight F32(const std::vector<float>& data, int64_t rows,
                    int64_t cols) {
  backend::Weight w;
  w.data = data.data();
  w.rows = rows;
  w.cols = cols;
  return w;
}

struct Mlp {
  std::vector<float> gate, up, down;
  model::MlpWeights weights;
  Mlp(int64_t hidden, int64_t inter, std::mt19937* rng)
      : gate(Random(inter * hidden, rng, 0.3f)),
        up(Random(inter * hidden, rng, 0.3f)),
        down(Random(hidden * inter, rng, 0.3f)) {
    weights = {F32(gate, inter, hidden), F32(up, inter, hidden),
               F32(down, hidden, inter)};
  }
  // down(silu(gate x) * up x) of one token, in double precision.
  std::vector<double> Apply(const float* x, int64_t hidden) const {
    const int64_t inter = weights.gate.rows;
    std::vector<double> act(inter), out(hidden, 0.0);
    for (int64_t i = 0; i < inter; ++i) {
      double g = 0, u = 0;
      for (int64_t d = 0; d < hidden; ++d) {
        g += double{gate[i * hidden + d]} * x[d];
        u += double{up[i * hidden + d]} * x[d];
      }
      act[i] = g / (1 + std::exp(-g)) * u;
    }
    for (int64_t d = 0; d < hidden; ++d) {
      for (int64_t i = 0; i < inter; ++i) {
        out[d] += double{down[d * inter + i]} * act[i];
      }
    }
    return out;
  }
};

struct BlockCase {
  model::RouterOrder order;
  bool router_bias;
  bool shared_gated;
};

TEST(MoeBlockTest, MatchesADoubleReference) {
  const int64_t hidden = 24, inter = 20, experts = 6, k = 2, n = 7;
  for (const BlockCase& c :
       {BlockCase{model::RouterOrder::kScoreThenTopK, false, false},
        BlockCase{model::RouterOrder::kScoreThenTopK, true, true},
        BlockCase{model::RouterOrder::kTopKThenSoftmax, true, false},
        BlockCase{model::RouterOrder::kTopKThenSoftmax, false, true}}) {
    std::mt19937 rng(17);
    model::ModelSpec spec;
    spec.hidden_size = hidden;
    spec.num_experts = experts;
    spec.experts_per_token = k;
    spec.routing.order = c.order;
    spec.routing.renormalize = c.order == model::RouterOrder::kScoreThenTopK;
    spec.routing.router_bias = c.router_bias;
    std::vector<Mlp> mlps;
    for (int e = 0; e <= experts; ++e) mlps.emplace_back(hidden, inter, &rng);
    const std::vector<float> router = Random(experts * hidden, &rng, 0.5f);
    const std::vector<float> bias = Random(experts, &rng, 1.f);
    const std::vector<float> gate = Random(hidden, &rng, 0.3f);
    model::ModelWeights weights;
    weights.layers.resize(1);
    model::LayerWeights& layer = weights.layers[0];
    layer.router = F32(router, experts, hidden);
    if (c.router_bias) layer.router_bias = {bias.data(), experts};
    for (int e = 0; e < experts; ++e) layer.experts.push_back(mlps[e].weights);
    layer.has_shared_expert = true;
    layer.shared_expert = mlps[experts].weights;
    if (c.shared_gated) layer.shared_expert_gate = {gate.data(), hidden};

    std::vector<float> x = Random(n * hidden, &rng, 1.f), out(n * hidden);
    ThreadPool pool(2);
    backend::CpuBackend cpu(&pool);
    ResidentExperts resident(weights);
    ASSERT_TRUE(RunFeedForward({x.data(), n, hidden}, spec, layer, 0,
                               {&cpu, &resident, nullptr},
                               {out.data(), n, hidden})
                    .ok());

    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x.data() + t * hidden;
      std::vector<double> logits(experts);
      for (int64_t e = 0; e < experts; ++e) {
        for (int64_t d = 0; d < hidden; ++d) {
          logits[e] += double{router[e * hidden + d]} * xt[d];
        }
        if (c.router_bias) logits[e] += bias[e];
      }
      std::vector<int> order(experts);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return logits[a] > logits[b]; });
      // Softmax then top-k then renormalise equals a softmax over the top
      // k logits: both orders give the same weights in exact arithmetic.
      double z = 0;
      for (int j = 0; j < k; ++j) z += std::exp(logits[order[j]]);
      std::vector<double> want(hidden, 0.0);
      for (int j = 0; j < k; ++j) {
        const double w = std::exp(logits[order[j]]) / z;
        const std::vector<double> y = mlps[order[j]].Apply(xt, hidden);
        for (int64_t d = 0; d < hidden; ++d) want[d] += w * y[d];
      }
      const std::vector<double> shared = mlps[experts].Apply(xt, hidden);
      double g = 1;
      if (c.shared_gated) {
        double logit = 0;
        for (int64_t d = 0; d < hidden; ++d) logit += double{gate[d]} * xt[d];
        g = 1 / (1 + std::exp(-logit));
      }
      for (int64_t d = 0; d < hidden; ++d) {
        want[d] += g * shared[d];
        EXPECT_NEAR(out[t * hidden + d], want[d],
                    1e-4 * (1 + std::abs(want[d])))
            << "token " << t << " dim " << d << " router bias " << c.router_bias
            << " order " << static_cast<int>(c.order);
      }
    }
  }
}

}  // namespace
}  // namespace ringmoe::moe

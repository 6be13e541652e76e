#include "engine/moe/moe_block.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/moe/routing.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::moe {

void RunMlp(const float* x, int64_t n, const model::MlpWeights& mlp, float* out) {
  const int64_t inter = mlp.gate.rows;
  std::vector<float> gate(n * inter), up(n * inter);
  kernels::MatMulTransposed(x, n, mlp.gate, gate.data());
  kernels::MatMulTransposed(x, n, mlp.up, up.data());
  kernels::SiluMul(gate.data(), up.data(), n * inter, gate.data());
  kernels::MatMulTransposed(gate.data(), n, mlp.down, out);
}

void RunFeedForward(const float* x, int64_t n, const model::ModelSpec& spec,
                    const model::LayerWeights& layer, float* out) {
  const int64_t hidden = spec.hidden_size;
  if (!layer.is_moe) {
    RunMlp(x, n, layer.dense_mlp, out);
    return;
  }
  std::vector<float> router_logits(n * spec.num_experts);
  kernels::MatMulTransposed(x, n, layer.router, router_logits.data());
  const Routing routing = RouteTokens(router_logits.data(), n, spec.num_experts,
                                      spec.experts_per_token, spec.norm_topk_prob);
  std::fill(out, out + n * hidden, 0.f);
  std::vector<float> gathered, expert_out;
  for (const ExpertAssignment& a : GroupByExpert(routing, spec.num_experts)) {
    const int64_t m = static_cast<int64_t>(a.tokens.size());
    gathered.resize(m * hidden);
    expert_out.resize(m * hidden);
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(x + a.tokens[i] * hidden, hidden, gathered.data() + i * hidden);
    }
    RunMlp(gathered.data(), m, layer.experts[a.expert], expert_out.data());
    for (int64_t i = 0; i < m; ++i) {
      float* dst = out + a.tokens[i] * hidden;
      const float* src = expert_out.data() + i * hidden;
      for (int64_t d = 0; d < hidden; ++d) dst[d] += a.weights[i] * src[d];
    }
  }
  if (layer.has_shared_expert) {
    std::vector<float> shared(n * hidden);
    RunMlp(x, n, layer.shared_expert, shared.data());
    for (int64_t t = 0; t < n; ++t) {
      float logit = 0.f;
      for (int64_t d = 0; d < hidden; ++d) {
        logit += x[t * hidden + d] * layer.shared_expert_gate[d];
      }
      const float gate = 1.f / (1.f + std::exp(-logit));
      for (int64_t d = 0; d < hidden; ++d) {
        out[t * hidden + d] += gate * shared[t * hidden + d];
      }
    }
  }
}

}  // namespace ringmoe::moe

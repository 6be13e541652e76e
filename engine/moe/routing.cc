#include "engine/moe/routing.h"

#include <algorithm>

#include "kernels/cpu/ops.h"

namespace ringmoe::moe {

Routing RouteTokens(const float* router_logits, int64_t num_tokens,
                    int64_t num_experts, int64_t top_k, bool renormalize) {
  Routing routing;
  routing.num_tokens = num_tokens;
  routing.top_k = top_k;
  routing.experts.resize(num_tokens * top_k);
  routing.weights.resize(num_tokens * top_k);
  std::vector<float> probs(num_experts);
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::copy_n(router_logits + t * num_experts, num_experts, probs.begin());
    kernels::Softmax(probs.data(), num_experts);
    int32_t* chosen = routing.experts.data() + t * top_k;
    float* weights = routing.weights.data() + t * top_k;
    kernels::TopK(probs.data(), num_experts, static_cast<int>(top_k), chosen);
    float sum = 0.f;
    for (int64_t j = 0; j < top_k; ++j) {
      weights[j] = probs[chosen[j]];
      sum += weights[j];
    }
    if (renormalize) {
      for (int64_t j = 0; j < top_k; ++j) weights[j] /= sum;
    }
  }
  return routing;
}

std::vector<ExpertAssignment> GroupByExpert(const Routing& routing,
                                            int64_t num_experts) {
  std::vector<ExpertAssignment> by_expert(num_experts);
  for (int64_t t = 0; t < routing.num_tokens; ++t) {
    for (int64_t j = 0; j < routing.top_k; ++j) {
      ExpertAssignment& a = by_expert[routing.experts[t * routing.top_k + j]];
      a.tokens.push_back(static_cast<int32_t>(t));
      a.weights.push_back(routing.weights[t * routing.top_k + j]);
    }
  }
  std::vector<ExpertAssignment> used;
  for (int64_t e = 0; e < num_experts; ++e) {
    if (by_expert[e].tokens.empty()) continue;
    by_expert[e].expert = static_cast<int32_t>(e);
    used.push_back(std::move(by_expert[e]));
  }
  return used;
}

}  // namespace ringmoe::moe

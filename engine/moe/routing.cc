#include "engine/moe/routing.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"

namespace ringmoe::moe {

Router::Router(int64_t num_experts, int64_t top_k,
               const model::RoutingSpec& spec)
    : num_experts_(num_experts), top_k_(top_k), spec_(spec) {}

Routing Router::Route(const float* router_logits, int64_t num_tokens,
                      const float* selection_bias) const {
  const int64_t experts = num_experts_, k = top_k_;
  const int64_t groups = spec_.num_groups;
  const int64_t per_group = experts / groups;
  Routing routing;
  routing.num_tokens = num_tokens;
  routing.top_k = k;
  routing.experts.resize(num_tokens * k);
  routing.weights.resize(num_tokens * k);
  std::vector<float> scores(experts), select(experts), group_score(groups);
  std::vector<float> eligible_scores;
  std::vector<int32_t> eligible, kept_groups(spec_.topk_groups), best(2),
      chosen(k);
  const bool top_k_first = spec_.order == model::RouterOrder::kTopKThenSoftmax;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* logits = router_logits + t * experts;
    std::copy_n(logits, experts, scores.begin());
    if (top_k_first) {
      // Chosen by logit; only the chosen ones' softmax is needed.
    } else if (spec_.scoring == model::RouterScoring::kSoftmax) {
      kernels::Softmax(scores.data(), experts);
    } else {
      for (float& s : scores) s = 1.f / (1.f + std::exp(-s));
    }
    for (int64_t e = 0; e < experts; ++e) {
      select[e] = scores[e] + (selection_bias ? selection_bias[e] : 0.f);
    }
    // The eligible experts, ascending, so that ties keep going to the lower
    // index.
    eligible.clear();
    eligible_scores.clear();
    if (groups == 1) {
      for (int64_t e = 0; e < experts; ++e) {
        eligible.push_back(static_cast<int32_t>(e));
        eligible_scores.push_back(select[e]);
      }
    } else {
      for (int64_t g = 0; g < groups; ++g) {
        const float* s = select.data() + g * per_group;
        if (spec_.group_scoring == model::GroupScoring::kMax) {
          group_score[g] = *std::max_element(s, s + per_group);
        } else {
          kernels::TopK(s, per_group, 2, best.data());
          group_score[g] = s[best[0]] + s[best[1]];
        }
      }
      kernels::TopK(group_score.data(), groups,
                    static_cast<int>(spec_.topk_groups), kept_groups.data());
      std::sort(kept_groups.begin(), kept_groups.end());
      for (int32_t g : kept_groups) {
        for (int64_t i = 0; i < per_group; ++i) {
          eligible.push_back(static_cast<int32_t>(g * per_group + i));
          eligible_scores.push_back(select[g * per_group + i]);
        }
      }
    }
    kernels::TopK(eligible_scores.data(),
                  static_cast<int64_t>(eligible_scores.size()),
                  static_cast<int>(k), chosen.data());
    int32_t* out_experts = routing.experts.data() + t * k;
    float* weights = routing.weights.data() + t * k;
    float sum = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      out_experts[j] = eligible[chosen[j]];
      weights[j] = scores[out_experts[j]];
    }
    if (top_k_first) kernels::Softmax(weights, k);
    for (int64_t j = 0; j < k; ++j) sum += weights[j];
    const auto scaling = static_cast<float>(spec_.scaling_factor);
    for (int64_t j = 0; j < k; ++j) {
      if (spec_.renormalize) weights[j] /= sum + 1e-20f;
      weights[j] *= scaling;
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

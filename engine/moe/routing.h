// Router: token -> top-k experts with weights, and the grouping of tokens by
// expert so each expert's weights are read once per step.
#ifndef RINGMOE_ENGINE_MOE_ROUTING_H_
#define RINGMOE_ENGINE_MOE_ROUTING_H_

#include <cstdint>
#include <vector>

namespace ringmoe::moe {

struct Routing {
  int64_t num_tokens = 0;
  int64_t top_k = 0;
  std::vector<int32_t> experts;  // [num_tokens, top_k], best first
  std::vector<float> weights;    // [num_tokens, top_k]
};

// Softmax over all experts' router logits ([num_tokens, num_experts]), the
// top-k by probability, their probabilities renormalised to sum 1 when
// `renormalize` (Hugging Face's norm_topk_prob), raw otherwise.
Routing RouteTokens(const float* router_logits, int64_t num_tokens,
                    int64_t num_experts, int64_t top_k, bool renormalize);

// The tokens routed to one expert and the weight of each.
struct ExpertAssignment {
  int32_t expert = 0;
  std::vector<int32_t> tokens;
  std::vector<float> weights;
};

// One entry per expert with at least one token, in expert order; tokens in
// ascending order within each.
std::vector<ExpertAssignment> GroupByExpert(const Routing& routing,
                                            int64_t num_experts);

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_ROUTING_H_

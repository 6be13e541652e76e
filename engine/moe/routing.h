// Router: token -> top-k experts with weights, for every routing scheme the
// supported architectures use (model::RoutingSpec), and the grouping of
// tokens by expert so each expert's weights are read once per step. The MoE
// block and the memory ring's next-layer prediction both route with it.
#ifndef RINGMOE_ENGINE_MOE_ROUTING_H_
#define RINGMOE_ENGINE_MOE_ROUTING_H_

#include <cstdint>
#include <vector>

#include "engine/model/model_spec.h"

namespace ringmoe::moe {

struct Routing {
  int64_t num_tokens = 0;
  int64_t top_k = 0;
  std::vector<int32_t> experts;  // [num_tokens, top_k], best first
  std::vector<float> weights;    // [num_tokens, top_k]
};

class Router {
 public:
  // `spec` must be valid for the counts (model config parsing checks it:
  // groups divide the experts, the kept groups hold top_k experts).
  Router(int64_t num_experts, int64_t top_k, const model::RoutingSpec& spec);

  // Per token of router_logits ([num_tokens, num_experts], the router
  // bias already added):
  // 1. scores: softmax over all experts, or the sigmoid of each logit; the
  //    logits themselves when the order is kTopKThenSoftmax;
  // 2. selection scores: scores + selection_bias[e] (when the spec has a
  //    selection bias; null otherwise), used for choosing only;
  // 3. with groups, each of the num_groups contiguous groups is scored by
  //    the max (or the sum of the two largest) of its selection scores and
  //    only the topk_groups best groups stay eligible;
  // 4. the top_k eligible experts by selection score, best first (ties to
  //    the lower index; a group's ties too);
  // 5. weights: their scores (kTopKThenSoftmax: the softmax of the k
  //    chosen logits), divided by their sum (+1e-20) when renormalising,
  //    times scaling_factor.
  Routing Route(const float* router_logits, int64_t num_tokens,
                const float* selection_bias) const;

 private:
  int64_t num_experts_;
  int64_t top_k_;
  model::RoutingSpec spec_;
};

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

// The feed-forward half of a decoder layer: a sparse MoE block (router,
// experts, optional gated shared expert) or a dense SiLU-gated MLP.
//
// Tokens are grouped by expert, so each expert's weights are read once per
// step for all of its tokens, and the products of all the experts a step
// uses run in one parallel loop (split over experts and output rows).
#ifndef RINGMOE_ENGINE_MOE_MOE_BLOCK_H_
#define RINGMOE_ENGINE_MOE_MOE_BLOCK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "base/thread_pool.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "engine/moe/expert_source.h"
#include "engine/moe/expert_usage.h"
#include "engine/moe/routing.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::moe {

// The experts and weights `layer`'s router picks for n tokens from their
// router logits ([n, num_experts]).
Routing RouteLayer(const model::ModelSpec& spec,
                   const model::LayerWeights& layer, const float* router_logits,
                   int64_t n);

// out[n, hidden] = down(silu(gate(x)) * up(x)) for x[n, hidden].
void RunMlp(const float* x, int64_t n, const model::MlpWeights& mlp, float* out,
            ThreadPool* pool = nullptr, kernels::ProductWork* work = nullptr);

// What the feed-forward block runs with; every member may be null.
struct FeedForwardContext {
  ThreadPool* pool = nullptr;            // null: single-threaded
  kernels::ProductWork* work = nullptr;  // accumulates weight bytes and FLOPs
  ExpertSource* experts = nullptr;       // null: every expert resident
  ExpertUsage* usage = nullptr;          // counts tokens per expert
};

// out[n, hidden] = the feed-forward output of layer `layer_index` for the
// normalised hidden states x[n, hidden] (not including the residual). A
// failure to load streamed expert weights is returned.
absl::Status RunFeedForward(const float* x, int64_t n,
                            const model::ModelSpec& spec,
                            const model::LayerWeights& layer, int layer_index,
                            const FeedForwardContext& context, float* out);

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_MOE_BLOCK_H_

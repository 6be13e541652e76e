// The feed-forward half of a decoder layer: a sparse MoE block (router,
// experts, optional gated shared expert) or a dense SiLU-gated MLP.
//
// Tokens are grouped by expert, so each expert's weights are read once per
// step for all of its tokens; the ExpertExecutor runs them wherever their
// weights are.
#ifndef RINGMOE_ENGINE_MOE_MOE_BLOCK_H_
#define RINGMOE_ENGINE_MOE_MOE_BLOCK_H_

#include <cstdint>

#include "absl/status/status.h"
#include "engine/backend/backend.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "engine/moe/expert_executor.h"
#include "engine/moe/expert_usage.h"
#include "engine/moe/routing.h"

namespace ringmoe::moe {

// The experts and weights `layer`'s router picks for the n tokens of x
// ([n, hidden], normalised hidden states): the router product (plus the
// router's bias; backend::Product::batch_rows `batch_rows`) on the backend,
// then Router on the host. The MoE block and the memory ring's next-layer
// prediction both route with it.
Routing RouteTokens(backend::Backend& backend, const backend::Tensor& x,
                    const model::ModelSpec& spec,
                    const model::LayerWeights& layer, int64_t batch_rows);

// What the feed-forward block runs with.
struct FeedForwardContext {
  backend::Backend* backend = nullptr;  // runs everything else; required
  ExpertExecutor* experts = nullptr;    // runs the routed experts; required
  ExpertUsage* usage = nullptr;         // counts tokens per expert; may be null
  // Layers whose experts all lie in the backend's weight memory are routed
  // and run there (Backend::RunRoutedExperts: no synchronisation with the
  // host) unless false or `usage` counts tokens on the host.
  bool route_on_backend = true;
  // backend::Product::batch_rows of the router, dense MLP and shared
  // expert products (x's rows are a share of a step of that many tokens).
  int64_t batch_rows = 0;
};

// out[n, hidden] = the feed-forward output of layer `layer_index` for the
// normalised hidden states x[n, hidden] (not including the residual). The
// executor's failure (to load streamed expert weights) is returned.
absl::Status RunFeedForward(const backend::Tensor& x,
                            const model::ModelSpec& spec,
                            const model::LayerWeights& layer, int layer_index,
                            const FeedForwardContext& context,
                            const backend::Tensor& out);

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_MOE_BLOCK_H_

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
#include "kernels/cpu/ops.h"

namespace ringmoe::moe {

// out[n, hidden] = down(silu(gate(x)) * up(x)) for x[n, hidden].
void RunMlp(const float* x, int64_t n, const model::MlpWeights& mlp, float* out,
            ThreadPool* pool = nullptr, kernels::ProductWork* work = nullptr);

// out[n, hidden] = the feed-forward output of layer `layer_index` for the
// normalised hidden states x[n, hidden] (not including the residual).
// `pool` may be null; `work`, when set, accumulates the weight bytes and
// FLOPs of the products. Routed experts' weights come from `experts` (null:
// all resident in `layer`); a failure to load them is returned.
absl::Status RunFeedForward(const float* x, int64_t n, const model::ModelSpec& spec,
                            const model::LayerWeights& layer, float* out,
                            ThreadPool* pool = nullptr,
                            kernels::ProductWork* work = nullptr,
                            ExpertSource* experts = nullptr, int layer_index = 0);

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_MOE_BLOCK_H_

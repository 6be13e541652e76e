// The feed-forward half of a decoder layer: a sparse MoE block (router,
// experts, optional gated shared expert) or a dense SiLU-gated MLP.
#ifndef RINGMOE_ENGINE_MOE_MOE_BLOCK_H_
#define RINGMOE_ENGINE_MOE_MOE_BLOCK_H_

#include <cstdint>

#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"

namespace ringmoe::moe {

// out[n, hidden] = down(silu(gate(x)) * up(x)) for x[n, hidden].
void RunMlp(const float* x, int64_t n, const model::MlpWeights& mlp, float* out);

// out[n, hidden] = the layer's feed-forward output for the normalised hidden
// states x[n, hidden] (not including the residual).
void RunFeedForward(const float* x, int64_t n, const model::ModelSpec& spec,
                    const model::LayerWeights& layer, float* out);

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_MOE_BLOCK_H_

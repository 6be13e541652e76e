// The attention half of a decoder layer, built from the spec's options:
// grouped-query attention (q/k/v biases, q/k norms per head or whole, clip,
// per-layer sliding window, sinks) or multi-head latent attention
// (DeepSeek-V2/V3). Each writes the step's keys and values into the KV cache,
// then attends over it, on the backend.
#ifndef RINGMOE_ENGINE_RUNTIME_ATTENTION_H_
#define RINGMOE_ENGINE_RUNTIME_ATTENTION_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "engine/backend/backend.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/kv_cache.h"

namespace ringmoe::runtime {

// The tokens of one step as attention sees them.
struct AttentionStep {
  // Per token: its sequence and position; a sequence's tokens are
  // consecutive and in position order.
  absl::Span<const SequenceId> seq_of;
  absl::Span<const int64_t> position_of;
  KvCache* cache = nullptr;
  // Per token: cos and sin of its position ([n, spec.rotary_dim() / 2]).
  backend::Tensor cos;
  backend::Tensor sin;
  // backend::Product::batch_rows of the step's products and attention:
  // under data-parallel attention, the tokens of the whole step these are
  // a share of (0: these).
  int64_t batch_rows = 0;
};

class Attention {
 public:
  virtual ~Attention() = default;
  // out[n, hidden] = layer `layer`'s attention of x[n, hidden] (normalised
  // hidden states) for the step's tokens.
  virtual void Forward(const AttentionStep& step, int64_t layer,
                       const backend::Tensor& x, const backend::Tensor& out,
                       backend::Backend& backend) const = 0;
};

// The attention of a layer of `spec` over `weights` (both must outlive it):
// multi-head latent attention when spec.mla is set, else grouped-query.
std::unique_ptr<Attention> MakeAttention(const model::ModelSpec& spec,
                                         const model::LayerWeights& weights);

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_ATTENTION_H_

// Rotary position embedding tables: inverse frequencies for each rotated
// dimension pair, adjusted by the config's rope_scaling, and the attention
// factor YaRN applies to cos and sin.
#ifndef RINGMOE_ENGINE_RUNTIME_ROPE_H_
#define RINGMOE_ENGINE_RUNTIME_ROPE_H_

#include <cstdint>
#include <vector>

#include "engine/model/model_spec.h"

namespace ringmoe::runtime {

class Rope {
 public:
  explicit Rope(const model::ModelSpec& spec);

  // cos and sin (spec.rotary_dim() / 2 values each) for one position,
  // computed in double precision and rounded once.
  void CosSin(int64_t position, float* cos, float* sin) const;

  const std::vector<double>& inv_freq() const { return inv_freq_; }
  double attention_factor() const { return attention_factor_; }

 private:
  std::vector<double> inv_freq_;
  double attention_factor_ = 1.0;
};

// The softmax scale of multi-head latent attention (spec.mla):
// qk_head_dim^-0.5, times mscale² with mscale = 0.1 · mscale_all_dim ·
// ln(factor) + 1 under YaRN with a mscale_all_dim (DeepSeek's own code,
// transformers' V3 and vLLM; see tests/testdata/moe-tiny/README.md).
double MlaSoftmaxScale(const model::ModelSpec& spec);

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_ROPE_H_

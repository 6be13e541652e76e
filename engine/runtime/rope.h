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

  // cos and sin (head_dim / 2 values each) for one position, computed in
  // double precision and rounded once.
  void CosSin(int64_t position, float* cos, float* sin) const;

  const std::vector<double>& inv_freq() const { return inv_freq_; }
  double attention_factor() const { return attention_factor_; }

 private:
  std::vector<double> inv_freq_;
  double attention_factor_ = 1.0;
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_ROPE_H_

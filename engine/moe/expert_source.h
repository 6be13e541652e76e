// ExpertSource: where the MoE block gets the weights of the experts a step
// routes to. Without one, every expert is resident (LayerWeights::experts);
// the memory ring's implementation streams the others in (StreamedExperts).
#ifndef RINGMOE_ENGINE_MOE_EXPERT_SOURCE_H_
#define RINGMOE_ENGINE_MOE_EXPERT_SOURCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/model/model_weights.h"
#include "engine/moe/routing.h"

namespace ringmoe::moe {

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;

  // A step of `num_tokens` tokens begins.
  virtual void BeginStep(int64_t num_tokens) = 0;

  // Whether this step uses Predict(): when not, callers skip computing the
  // predicted router logits.
  virtual bool WantsPredictions() const = 0;

  // `layer`'s routing computed ahead of time from an earlier layer's hidden
  // state: the experts it picks are likely to be needed, so they may be
  // fetched now.
  virtual void Predict(int layer, const Routing& predicted) = 0;

  // Weights of `experts` (ascending) of `layer`, valid until Release(layer).
  // Fails, naming what could not be read, when a weight load fails.
  virtual absl::Status Acquire(
      int layer, absl::Span<const int32_t> experts,
      std::vector<const model::MlpWeights*>* weights) = 0;

  // The step is done with `layer`'s experts.
  virtual void Release(int layer) = 0;

  // The step ends (also after a failure: drops whatever it still holds).
  virtual void EndStep() = 0;
};

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_EXPERT_SOURCE_H_

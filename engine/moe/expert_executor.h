// ExpertExecutor: runs a MoE layer's routed experts. It owns where each
// expert's weights come from — resident in memory, streamed through the
// memory ring (StreamedExperts), a GPU's cache (HybridExperts), a peer rank
// (ExpertParallelExecutor) — and where the expert runs; the MoE block hands
// it each expert's rows of activations and never learns which.
//
// A step calls BeginStep, then per MoE layer in order any number of
// Predict() for later layers and one Run(), then EndStep.
#ifndef RINGMOE_ENGINE_MOE_EXPERT_EXECUTOR_H_
#define RINGMOE_ENGINE_MOE_EXPERT_EXECUTOR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/backend/backend.h"
#include "engine/model/model_weights.h"
#include "engine/moe/routing.h"

namespace ringmoe::moe {

// Expert `expert` applied to x[n, hidden], written to out[n, hidden].
struct ExpertTask {
  int32_t expert = 0;
  backend::Tensor x;
  backend::Tensor out;
};

class ExpertExecutor {
 public:
  virtual ~ExpertExecutor() = default;

  // A step of `num_tokens` tokens begins.
  virtual void BeginStep(int64_t num_tokens) = 0;

  // Whether this step uses Predict(): when not, callers skip computing the
  // predicted router logits.
  virtual bool WantsPredictions() const = 0;

  // `layer`'s routing computed ahead of time from an earlier layer's hidden
  // state: the experts it picks are likely to be needed, so they may be
  // fetched now.
  virtual void Predict(int layer, const Routing& predicted) = 0;

  // Runs every task of `layer` (distinct experts), and `alongside` (MLPs
  // whose weights are resident, such as a shared expert) in the same loops
  // as some of them, on `backend`. Every output is exactly what
  // Backend::RunMlps computes from the expert's stored weights. Fails,
  // naming what could not be loaded, when a weight load fails; outputs are
  // then unspecified.
  virtual absl::Status Run(int layer, absl::Span<const ExpertTask> tasks,
                           absl::Span<const backend::MlpTask> alongside,
                           backend::Backend& backend) = 0;

  // The step ends (also after a failure: drops whatever it still holds).
  virtual void EndStep() = 0;

  // Every expert of `layer` when all of them lie, for good, in the weight
  // memory of the backend the layer runs on: the MoE block may then route
  // and run them there without Run (Backend::RunRoutedExperts). Empty
  // otherwise.
  virtual absl::Span<const backend::MlpWeights> ExpertsInBackendMemory(
      int layer) const {
    return {};
  }
};

// Every expert resident in the model's weights.
class ResidentExperts : public ExpertExecutor {
 public:
  // `weights` must outlive the executor.
  explicit ResidentExperts(const model::ModelWeights& weights)
      : weights_(weights) {}

  void BeginStep(int64_t) override {}
  bool WantsPredictions() const override { return false; }
  void Predict(int, const Routing&) override {}
  absl::Status Run(int layer, absl::Span<const ExpertTask> tasks,
                   absl::Span<const backend::MlpTask> alongside,
                   backend::Backend& backend) override;
  void EndStep() override {}
  absl::Span<const backend::MlpWeights> ExpertsInBackendMemory(
      int layer) const override {
    return weights_.layers[layer].experts;
  }

 private:
  const model::ModelWeights& weights_;
};

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_EXPERT_EXECUTOR_H_

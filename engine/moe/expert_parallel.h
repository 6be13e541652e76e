// ExpertParallelExecutor: the routed experts spread over the ranks of a job
// (expert parallelism) with attention replicated: every rank runs the same
// forward pass on the same tokens, so every rank's MoE block hands its
// executor the same tasks in the same order. Each rank runs the tasks of
// the experts it owns (ExpertPlacement) through an inner executor —
// resident, streamed through its own memory ring, hybrid on its device —
// together with the `alongside` MLPs (shared experts), which every rank runs
// itself; then one AllGather per MoE layer gives every rank every task's
// output rows. Each output is computed once, by its owner, from the same
// input rows and stored weights as in one process (an MLP's outputs do not
// depend on which tasks share its loop), and the MoE block combines them
// in its own fixed order, so results are bitwise those of one process
// whatever the number of ranks.
//
// Replicated attention spends every rank's time on the whole batch's
// attention; the data-parallel mode (each sequence and its KV cache on one
// rank, its tokens sent to their experts' owners and the results sent back
// with AllToAllV) is a later executor beside this one.
//
// Every rank constructs it with the same placement and runs the same steps
// (the engine's forward pass does): each Run is one collective, so a rank
// that fails or stops leaves the others waiting until the communicator's
// timeout. Any error must end the job (Communicator::Abort).
#ifndef RINGMOE_ENGINE_MOE_EXPERT_PARALLEL_H_
#define RINGMOE_ENGINE_MOE_EXPERT_PARALLEL_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/backend/backend.h"
#include "engine/moe/expert_executor.h"
#include "engine/moe/expert_placement.h"
#include "engine/moe/routing.h"
#include "engine/parallel/communicator.h"

namespace ringmoe::moe {

// The picks of `predicted` whose expert `runs_here`, one (token, expert)
// pick per row of a top-1 routing: the executors of a rank's experts
// prefetch by the tokens each expert gets, not by which token picked it.
Routing PicksOf(const Routing& predicted,
                absl::FunctionRef<bool(int32_t expert)> runs_here);

class ExpertParallelExecutor : public ExpertExecutor {
 public:
  // `communicator` (host memory: outputs travel through the host) and
  // `inner` (runs this rank's experts: given only tasks of experts
  // placement.owner() puts on communicator->rank()) must outlive the
  // executor; placement.num_ranks() == communicator->size().
  ExpertParallelExecutor(parallel::Communicator* communicator,
                         ExpertPlacement placement, ExpertExecutor* inner)
      : communicator_(*communicator),
        placement_(std::move(placement)),
        inner_(*inner) {}

  void BeginStep(int64_t num_tokens) override { inner_.BeginStep(num_tokens); }
  bool WantsPredictions() const override { return inner_.WantsPredictions(); }
  // Passes on the predicted picks of the experts this rank runs (PicksOf).
  void Predict(int layer, const Routing& predicted) override;
  // This rank's tasks and `alongside` through the inner executor, then
  // every task's `out` exchanged. Errors: the inner executor's, with the
  // rank; a failed exchange, naming the layer and the collective (the
  // communicator is then unusable).
  absl::Status Run(int layer, absl::Span<const ExpertTask> tasks,
                   absl::Span<const backend::MlpTask> alongside,
                   backend::Backend& backend) override;
  void EndStep() override { inner_.EndStep(); }

 private:
  parallel::Communicator& communicator_;
  const ExpertPlacement placement_;
  ExpertExecutor& inner_;
  // Host staging of the exchange, kept between layers: this rank's output
  // rows (one AllGather block), and every rank's block in rank order.
  std::vector<float> send_;
  std::vector<float> received_;
};

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_EXPERT_PARALLEL_H_

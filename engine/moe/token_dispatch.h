// TokenDispatchExecutor: the routed experts spread over the ranks of a job
// with attention data-parallel: each rank runs the forward pass of its own
// sequences only, so the ranks' MoE blocks hand their executors different
// tokens. At every MoE layer each rank sends each of its (token, expert)
// rows to a rank that holds that expert (ExpertPlacement; all of an
// expert's rows from every rank to the same one, for an expert with
// replicas the least loaded, ExpertPlacement::AssignExperts), runs the rows
// it received for its own experts through an inner executor — resident,
// streamed through its own memory ring, hybrid on its device — and sends
// every output row back to the rank it came from, which combines them in
// its MoE block. Three collectives per MoE layer: an AllGather of every
// rank's rows per expert (from which every rank derives the same matrix
// of row counts, so that a hierarchical communicator plans both exchanges
// without gathering counts itself, and the same choice of replicas; and
// from which a receiver knows each row's expert, as a sender orders the
// rows it sends a rank by expert: rows carry nothing but their floats), an
// AllToAllV of input rows and an AllToAllV of output rows (both
// Communicator::AllToAllVWithMatrix, the outputs along the matrix's
// transpose); a rank with no tokens of its own still joins them
// (ModelRunner::ForwardWithoutTokens), because other ranks' tokens may
// need its experts.
//
// Results are bitwise those of one process: each expert's rows are
// computed together, by one rank holding it, from the same input rows and
// stored weights (an MLP's output rows depend on how many rows it has, not
// on which), and the home rank's MoE block combines them in its own fixed
// order.
//
// `alongside` MLPs (shared experts) run on the calling rank, on its own
// tokens, in the same inner Run as the received rows.
//
// Every rank constructs it with the same placement and calls Run once per
// MoE layer of every step (the engine's step does): a rank that fails or
// stops leaves the others waiting until the communicator's timeout. Any
// error must end the job (Communicator::Abort).
#ifndef RINGMOE_ENGINE_MOE_TOKEN_DISPATCH_H_
#define RINGMOE_ENGINE_MOE_TOKEN_DISPATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/backend/backend.h"
#include "engine/moe/expert_executor.h"
#include "engine/moe/expert_parallel.h"
#include "engine/moe/expert_placement.h"
#include "engine/parallel/communicator.h"

namespace ringmoe::moe {

class TokenDispatchExecutor : public DistributedExpertExecutor {
 public:
  // As DistributedExpertExecutor's; `hidden` is the width of every row.
  TokenDispatchExecutor(parallel::Communicator* communicator,
                        parallel::Communicator* rows_communicator,
                        ExpertPlacement placement, ExpertExecutor* inner,
                        int64_t hidden)
      : DistributedExpertExecutor(communicator, rows_communicator,
                                  std::move(placement), inner),
        hidden_(hidden) {}

  // Dispatches `tasks`' rows to their experts' ranks, runs what arrived
  // and `alongside` through the inner executor, and combines the outputs
  // into `tasks`' out. Errors: the inner executor's, with the rank; a
  // failed exchange, naming the layer and the collective (the
  // communicator is then unusable).
  absl::Status Run(int layer, absl::Span<const ExpertTask> tasks,
                   absl::Span<const backend::MlpTask> alongside,
                   backend::Backend& backend) override;

 private:
  // Wraps a failed collective's status with the layer and what moved.
  absl::Status ExchangeError(int layer, const char* what,
                             const absl::Status& status) const;

  const int64_t hidden_;
  // In the backend's memory, kept between layers: the rows this rank sends
  // and gets back (`sent_`), the rows it receives and returns (`arrived_`),
  // and those in expert order, through the inner executor (`in_`, `out_`).
  backend::Backend::Buffer sent_, arrived_, in_, out_;
  RowScatter scatter_;
};

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_TOKEN_DISPATCH_H_

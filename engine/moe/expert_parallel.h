// ExpertParallelExecutor: the routed experts spread over the ranks of a job
// (expert parallelism) with attention replicated: every rank runs the same
// forward pass on the same tokens, so every rank's MoE block hands its
// executor the same tasks in the same order. Each task runs whole on one
// of its expert's replicas (ExpertPlacement::AssignExperts: the least
// loaded in rows); each rank runs its tasks through an inner executor —
// resident, streamed through its own memory ring, hybrid on its device —
// together with the `alongside` MLPs (shared experts), which every rank
// runs itself; then one AllGatherV per MoE layer gives every rank every
// task's output rows (each rank sends only its own rows, no padding). Each
// expert's rows are computed together, by one replica, from the same input
// rows and stored weights as in one process (the CPU products' summation
// order depends on how many rows a product has, so a split expert would
// not be), and the MoE block combines them in its own fixed order: results
// are bitwise those of one process whatever the number of ranks and
// replicas.
//
// Replicated attention spends every rank's time on the whole batch's
// attention; TokenDispatchExecutor (token_dispatch.h) is the data-parallel
// mode.
//
// Every rank constructs it with the same placement and runs the same steps
// (the engine's forward pass does): each Run is one collective, so a rank
// that fails or stops leaves the others waiting until the communicator's
// timeout. Any error must end the job (Communicator::Abort).
#ifndef RINGMOE_ENGINE_MOE_EXPERT_PARALLEL_H_
#define RINGMOE_ENGINE_MOE_EXPERT_PARALLEL_H_

#include <atomic>
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

// What both expert-parallel executors share: the job's communicator, the
// communicator that moves rows in the backend's memory, the placement, the
// inner executor running this rank's experts (steps and predictions pass
// through to it), and the rows this rank ran for experts whose owner (first
// replica) is another rank — the work its replicas took over, a per-rank
// metric.
//
// Rows are packed and unpacked by the backend's row operations where they
// lie. Where a rows communicator moves the backend's memory (the job's own
// for a backend computing in host memory, NCCL between GPUs) they go from
// backend to backend and only row counts cross the host; without one
// (ranks sharing a GPU) they are staged through host memory on the job's
// communicator.
class DistributedExpertExecutor : public ExpertExecutor {
 public:
  void BeginStep(int64_t num_tokens) override { inner_.BeginStep(num_tokens); }
  bool WantsPredictions() const override { return inner_.WantsPredictions(); }
  // Passes on the predicted picks of the experts this rank holds (PicksOf).
  // Under data-parallel attention they are this rank's own tokens' picks:
  // the other ranks' tokens are not known ahead.
  void Predict(int layer, const Routing& predicted) override;
  void EndStep() override { inner_.EndStep(); }

  const ExpertPlacement& placement() const { return placement_; }
  // May be read from any thread while steps run.
  uint64_t replica_rows() const {
    return replica_rows_.load(std::memory_order_relaxed);
  }

 protected:
  // `communicator` (host memory), `rows_communicator` (the same job's
  // ranks in the same order, moving the memory of every backend given to
  // Run; null: rows staged through the host on `communicator`) and `inner`
  // (given only tasks of experts with a replica on communicator->rank())
  // must outlive the executor, and so must every backend given to Run;
  // placement.num_ranks() == communicator->size().
  DistributedExpertExecutor(parallel::Communicator* communicator,
                            parallel::Communicator* rows_communicator,
                            ExpertPlacement placement, ExpertExecutor* inner)
      : communicator_(*communicator),
        rows_communicator_(rows_communicator),
        placement_(std::move(placement)),
        inner_(*inner) {}
  // Counts `rows` rows run here for `expert`, replica rows when another
  // rank owns it.
  void CountRows(int32_t expert, int rank, uint64_t rows) {
    if (placement_.owner(expert) != rank) {
      replica_rows_.fetch_add(rows, std::memory_order_relaxed);
    }
  }

  // A collective of the job's ranks from one byte span into another.
  using RowCollective = absl::FunctionRef<absl::Status(
      parallel::Communicator&, absl::Span<const uint8_t> send,
      absl::Span<uint8_t> recv)>;
  // Runs `collective` from `send` into `recv`, tensors in `backend`'s
  // memory: on the rows communicator once the backend's work so far
  // (which writes `send`) has finished, or through host copies of both on
  // the job's communicator.
  absl::Status ExchangeRows(backend::Backend& backend,
                            const backend::Tensor& send,
                            const backend::Tensor& recv,
                            RowCollective collective);

  // Rows [0, rows) of a [capacity, cols] tensor in `backend`'s memory kept
  // in `buffer` between layers: reallocated when `backend` is not the one
  // it was last given or the capacity is short (then grown by half again,
  // so that a few larger layers do not reallocate at every step).
  backend::Tensor RowsOf(backend::Backend& backend,
                         backend::Backend::Buffer& buffer, int64_t rows,
                         int64_t cols);

  // Copies src's rows into the rows `dst` points at (Backend::WriteRows),
  // one write per call of Add, issued together by Write.
  class RowScatter {
   public:
    void Clear() {
      sources_.clear();
      pointers_.clear();
    }
    // Row i of `src` to row i of `dst` (same shape).
    void Add(const backend::Tensor& src, const backend::Tensor& dst);
    // Every added write, in one call of the backend's.
    void Write(backend::Backend& backend);

   private:
    std::vector<backend::Tensor> sources_;
    std::vector<float*> pointers_;  // every source's rows' destinations
    std::vector<backend::RowWrite> writes_;
  };

  parallel::Communicator& communicator_;
  parallel::Communicator* const rows_communicator_;
  const ExpertPlacement placement_;
  ExpertExecutor& inner_;

 private:
  std::atomic<uint64_t> replica_rows_{0};
  // Host staging of ExchangeRows, kept between layers.
  std::vector<float> staged_send_, staged_recv_;
};

class ExpertParallelExecutor : public DistributedExpertExecutor {
 public:
  // As DistributedExpertExecutor's.
  ExpertParallelExecutor(parallel::Communicator* communicator,
                         parallel::Communicator* rows_communicator,
                         ExpertPlacement placement, ExpertExecutor* inner)
      : DistributedExpertExecutor(communicator, rows_communicator,
                                  std::move(placement), inner) {}

  // This rank's tasks (ExpertPlacement::AssignExperts) and `alongside`
  // through the inner executor, then every task's `out` exchanged. Errors: the
  // inner executor's, with the rank; a failed exchange, naming the layer and
  // the collective (the communicator is then unusable).
  absl::Status Run(int layer, absl::Span<const ExpertTask> tasks,
                   absl::Span<const backend::MlpTask> alongside,
                   backend::Backend& backend) override;

 private:
  // Task `task`, run by `rank`.
  struct Share {
    size_t task;
    int rank;
  };

  std::vector<Share> shares_;  // kept between layers
  // In the backend's memory, kept between layers: this rank's output rows
  // (its AllGatherV block, which its inner executor writes), and every
  // rank's block in rank order.
  backend::Backend::Buffer send_, received_;
  RowScatter unpack_;
};

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_EXPERT_PARALLEL_H_

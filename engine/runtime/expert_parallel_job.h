// The expert-parallel job a process (ringmoe_server, or an offline command
// of ringmoe: logits, generate) runs in, and the flags that shape it,
// shared by both binaries. With --expert_parallel under mpirun, every rank
// loads the model holding its share of the experts and runs every step;
// rank 0 alone serves, prints and writes, so the output is exactly one
// process's. Started alone, or without the flag, the process is a job of
// one and nothing changes.
#ifndef RINGMOE_ENGINE_RUNTIME_EXPERT_PARALLEL_JOB_H_
#define RINGMOE_ENGINE_RUNTIME_EXPERT_PARALLEL_JOB_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/parallel/communicator.h"
#include "engine/runtime/engine.h"

namespace ringmoe::runtime {

class ExpertParallelJob {
 public:
  // With --expert_parallel, joins the launcher's job (every rank calls it)
  // and points `options` at it; the job must outlive the engine loaded
  // with them. INVALID_ARGUMENT names a bad flag.
  static absl::StatusOr<ExpertParallelJob> Join(EngineOptions* options);

  // The job's communicator (the hierarchical one where the ranks span
  // nodes); null without --expert_parallel.
  parallel::Communicator* communicator() const { return communicator_; }
  bool has_peers() const {
    return communicator_ != nullptr && communicator_->size() > 1;
  }
  // Whether this process serves, prints and writes (rank 0, or alone).
  bool writes_output() const {
    return communicator_ == nullptr || communicator_->rank() == 0;
  }

  // The sampling seed of every rank: `seed`, or when unset one rank 0
  // draws and sends the others (ranks that sampled apart would route
  // different tokens). Unset in a job of one (the sampler draws its own).
  absl::StatusOr<std::optional<uint64_t>> SharedSeed(
      std::optional<uint64_t> seed);

  // After the work, on every rank: with --expert_placement_file in a job
  // of several ranks, rank 0 writes there a placement balanced by the
  // tokens the engine routed (a collective under data-parallel attention).
  absl::Status Finish(Engine& engine);

  // Reports that `who` (e.g. "ringmoe generate") failed and returns the
  // exit status. With other ranks it ends the whole job instead (they may
  // be waiting for this one in a collective).
  int Fail(absl::string_view who, const absl::Status& status);

 private:
  ExpertParallelJob(std::unique_ptr<parallel::Communicator> base,
                    std::unique_ptr<parallel::Communicator> hierarchical)
      : base_(std::move(base)),
        hierarchical_(std::move(hierarchical)),
        communicator_(hierarchical_ ? hierarchical_.get() : base_.get()) {}

  // MPI's communicator, and the hierarchical one over it when the ranks
  // span nodes (used in its place from then on).
  std::unique_ptr<parallel::Communicator> base_;
  std::unique_ptr<parallel::Communicator> hierarchical_;
  parallel::Communicator* communicator_;  // null: no flag
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_EXPERT_PARALLEL_JOB_H_

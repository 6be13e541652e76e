// The job an offline command (logits, generate) runs in. With
// --expert_parallel under mpirun, every rank loads the model holding its
// share of the experts and computes every step (attention replicated);
// rank 0 alone prints and writes, so the output is exactly one process's.
// Started alone, or without the flag, the process is a job of one and
// nothing changes.
#ifndef RINGMOE_CLIENTS_CLI_OFFLINE_JOB_H_
#define RINGMOE_CLIENTS_CLI_OFFLINE_JOB_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/parallel/communicator.h"
#include "engine/runtime/engine.h"

namespace ringmoe::cli {

class OfflineJob {
 public:
  // With --expert_parallel, joins the launcher's job (every rank calls it)
  // and points `options` at it; the job must outlive the engine loaded
  // with them.
  static absl::StatusOr<OfflineJob> Join(runtime::EngineOptions* options);

  // Whether this process prints and writes the command's output.
  bool writes_output() const {
    return communicator_ == nullptr || communicator_->rank() == 0;
  }

  // The sampling seed of every rank: `seed`, or when unset one rank 0
  // draws and sends the others (ranks that sampled apart would route
  // different tokens). Unset in a job of one (the sampler draws its own).
  absl::StatusOr<std::optional<uint64_t>> SharedSeed(
      std::optional<uint64_t> seed);

  // After the command, on every rank: with --expert_placement_file in a
  // job of several ranks, rank 0 writes there a placement balanced by the
  // tokens the command routed (a collective under data-parallel
  // attention).
  absl::Status Finish(runtime::Engine& engine);

  // Reports that `command` failed and returns the exit status. With other
  // ranks it ends the whole job instead (they may be waiting for this one
  // in a collective).
  int Fail(absl::string_view command, const absl::Status& status);

 private:
  OfflineJob(std::unique_ptr<parallel::Communicator> base,
             std::unique_ptr<parallel::Communicator> hierarchical)
      : base_(std::move(base)),
        hierarchical_(std::move(hierarchical)),
        communicator_(hierarchical_ ? hierarchical_.get() : base_.get()) {}

  bool has_peers() const {
    return communicator_ != nullptr && communicator_->size() > 1;
  }

  // MPI's communicator, and the hierarchical one over it when the ranks
  // span nodes (used in its place from then on).
  std::unique_ptr<parallel::Communicator> base_;
  std::unique_ptr<parallel::Communicator> hierarchical_;
  parallel::Communicator* communicator_;  // null: no flag
};

}  // namespace ringmoe::cli

#endif  // RINGMOE_CLIENTS_CLI_OFFLINE_JOB_H_

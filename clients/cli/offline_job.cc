#include "clients/cli/offline_job.h"

#include <random>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "clients/cli/cli_util.h"
#include "engine/parallel/mpi_communicator.h"

ABSL_FLAG(bool, expert_parallel, false,
          "logits, generate: under mpirun -np N, spread the routed experts "
          "over the N ranks (contiguous ranges; attention replicated on "
          "every rank); rank 0 prints and writes exactly what one process "
          "does. Alone, it changes nothing.");
// Ranks meet in a collective at every MoE layer of every step, the first
// after each rank has loaded its share of the model, which can take
// minutes on a large checkpoint; a rank that dies is reported by mpirun
// within about a second whatever this says.
ABSL_FLAG(absl::Duration, expert_parallel_timeout, absl::Minutes(10),
          "logits, generate: with --expert_parallel, how long a rank waits "
          "for the others in one collective before the job fails.");

ABSL_FLAG(std::string, expert_parallel_attention, "replicated",
          "logits, generate: with --expert_parallel, `replicated` (every rank "
          "runs every sequence's attention) or `data_parallel` (each "
          "sequence's attention and KV cache on one rank, its tokens sent to "
          "their experts' ranks at every MoE layer).");

namespace ringmoe::cli {

absl::StatusOr<OfflineJob> OfflineJob::Join(runtime::EngineOptions* options) {
  if (!absl::GetFlag(FLAGS_expert_parallel)) return OfflineJob(nullptr);
  const absl::Duration timeout = absl::GetFlag(FLAGS_expert_parallel_timeout);
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--expert_parallel_timeout must be positive, got ",
                     absl::FormatDuration(timeout)));
  }
  const std::string attention = absl::GetFlag(FLAGS_expert_parallel_attention);
  if (attention != "replicated" && attention != "data_parallel") {
    return absl::InvalidArgumentError(
        absl::StrCat("--expert_parallel_attention must be replicated or "
                     "data_parallel, got \"",
                     attention, "\""));
  }
  options->data_parallel_attention = attention == "data_parallel";
  ASSIGN_OR_RETURN(std::unique_ptr<parallel::Communicator> communicator,
                   parallel::CreateJobCommunicator(timeout));
  options->expert_parallel = communicator.get();
  return OfflineJob(std::move(communicator));
}

absl::StatusOr<std::optional<uint64_t>> OfflineJob::SharedSeed(
    std::optional<uint64_t> seed) {
  if (seed || !has_peers()) return seed;
  uint64_t drawn = 0;
  if (communicator_->rank() == 0) {
    std::random_device device;
    drawn = (uint64_t{device()} << 32) | device();
  }
  RETURN_IF_ERROR(communicator_->Broadcast(
      0, {reinterpret_cast<uint8_t*>(&drawn), sizeof(drawn)}));
  return drawn;
}

int OfflineJob::Fail(absl::string_view command, const absl::Status& status) {
  if (has_peers()) {
    communicator_->Abort(absl::Status(
        status.code(),
        absl::StrCat("ringmoe ", command, ": ", status.message())));
  }
  return cli::Fail(command, status);
}

}  // namespace ringmoe::cli

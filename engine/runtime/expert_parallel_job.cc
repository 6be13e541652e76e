#include "engine/runtime/expert_parallel_job.h"

#include <cstdio>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "engine/parallel/hierarchical_communicator.h"
#include "engine/parallel/mpi_communicator.h"
#include "engine/parallel/node_grouping.h"

ABSL_FLAG(bool, expert_parallel, false,
          "Under mpirun -np N: spread the routed experts over the N ranks "
          "(contiguous ranges unless --expert_placement_file says "
          "otherwise). Rank 0 serves (the server) or prints and writes "
          "exactly what one process does (logits, generate); the other ranks "
          "run the same steps. Alone, it changes nothing.");
// Ranks meet in a collective at every MoE layer of every step, the first
// after each rank has loaded its share of the model, which can take
// minutes on a large checkpoint; a rank that dies is reported by mpirun
// within about a second whatever this says.
ABSL_FLAG(absl::Duration, expert_parallel_timeout, absl::Minutes(10),
          "With --expert_parallel: how long a rank waits for the others in "
          "one collective before the job fails.");

ABSL_FLAG(std::string, expert_parallel_attention, "replicated",
          "With --expert_parallel: `replicated` (every rank runs every "
          "sequence's attention) or `data_parallel` (each sequence's "
          "attention and KV cache on one rank, its tokens sent to their "
          "experts' ranks at every MoE layer; the server's --kv_cache_tokens "
          "is then per rank).");

ABSL_FLAG(std::string, expert_placement_file, "",
          "With --expert_parallel: the experts' placement over the ranks, "
          "read from this file when it exists (else contiguous ranges); when "
          "the command ends (the server: when it stops) rank 0 writes there "
          "a placement balanced by the tokens routed, for the next run.");
ABSL_FLAG(int32_t, expert_replicas, 0,
          "With --expert_placement_file: extra copies of the hottest experts "
          "in the placement written (each on another rank; an expert's "
          "tokens are shared among its copies).");

ABSL_FLAG(int32_t, ranks_per_node, 0,
          "With --expert_parallel: group the ranks into "
          "nodes of this many consecutive ranks (pretend nodes, e.g. for "
          "tests); 0: the nodes MPI finds (ranks sharing memory). When the "
          "ranks span nodes and a node holds several, tokens cross between "
          "nodes through one rank per node (hierarchical all-to-all).");

namespace ringmoe::runtime {
namespace {

// The job's nodes, and the hierarchical communicator over `base` where it
// sends fewer messages between nodes; null where it does not.
absl::StatusOr<std::unique_ptr<parallel::Communicator>> HierarchicalOver(
    parallel::Communicator* base) {
  const int ranks_per_node = absl::GetFlag(FLAGS_ranks_per_node);
  if (ranks_per_node < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks_per_node must be >= 0, got ", ranks_per_node));
  }
  std::optional<parallel::NodeGrouping> nodes;
  if (ranks_per_node > 0) {
    ASSIGN_OR_RETURN(nodes, parallel::NodeGrouping::Consecutive(
                                base->size(), ranks_per_node));
  } else if (auto* mpi = dynamic_cast<parallel::MpiCommunicator*>(base)) {
    ASSIGN_OR_RETURN(nodes, mpi->SharedMemoryNodes());
  }
  if (!nodes || !parallel::HierarchicalAllToAllPays(*nodes)) return nullptr;
  if (base->rank() == 0) {
    std::fprintf(stderr, "ringmoe: hierarchical all-to-all over nodes %s\n",
                 nodes->ToString().c_str());
  }
  ASSIGN_OR_RETURN(
      std::unique_ptr<parallel::HierarchicalCommunicator> hierarchical,
      parallel::HierarchicalCommunicator::Create(base, *std::move(nodes)));
  return hierarchical;
}

}  // namespace

absl::StatusOr<ExpertParallelJob> ExpertParallelJob::Join(
    EngineOptions* options) {
  if (!absl::GetFlag(FLAGS_expert_parallel)) {
    return ExpertParallelJob(nullptr, nullptr);
  }
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
  if (absl::GetFlag(FLAGS_expert_replicas) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--expert_replicas must be >= 0, got ",
                     absl::GetFlag(FLAGS_expert_replicas)));
  }
  options->expert_placement_file = absl::GetFlag(FLAGS_expert_placement_file);
  ASSIGN_OR_RETURN(std::unique_ptr<parallel::Communicator> communicator,
                   parallel::CreateJobCommunicator(timeout));
  ASSIGN_OR_RETURN(std::unique_ptr<parallel::Communicator> hierarchical,
                   HierarchicalOver(communicator.get()));
  ExpertParallelJob job(std::move(communicator), std::move(hierarchical));
  options->expert_parallel = job.communicator_;
  return job;
}

absl::StatusOr<std::optional<uint64_t>> ExpertParallelJob::SharedSeed(
    std::optional<uint64_t> seed) {
  if (seed || !has_peers()) return seed;
  uint64_t drawn = 0;
  if (communicator_->rank() == 0) {
    std::random_device device;
    drawn = (uint64_t{device()} << 32) | device();
  }
  RETURN_IF_ERROR(communicator_->Broadcast(
      0, parallel::AsWritableBytes(absl::MakeSpan(&drawn, 1))));
  return drawn;
}

absl::Status ExpertParallelJob::Finish(Engine& engine) {
  const std::string file = absl::GetFlag(FLAGS_expert_placement_file);
  if (file.empty() || !has_peers()) return absl::OkStatus();
  ASSIGN_OR_RETURN(
      const moe::ExpertPlacement placement,
      engine.BalancedPlacement(absl::GetFlag(FLAGS_expert_replicas)));
  if (communicator_->rank() != 0) return absl::OkStatus();
  RETURN_IF_ERROR(placement.WriteFile(file));
  std::fprintf(stderr, "ringmoe: wrote a balanced expert placement to %s: %s\n",
               file.c_str(), placement.Summary().c_str());
  return absl::OkStatus();
}

int ExpertParallelJob::Fail(absl::string_view who,
                            const absl::Status& status) {
  if (has_peers()) {
    communicator_->Abort(absl::Status(
        status.code(),
        absl::StrCat(who, " rank ", communicator_->rank(), ": ",
                     status.message())));
  }
  std::cerr << who << ": " << status << "\n";
  return 1;
}

}  // namespace ringmoe::runtime

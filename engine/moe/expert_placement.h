// ExpertPlacement: which ranks of an expert-parallel job hold each routed
// expert. Every MoE layer is placed alike (expert e of every layer on the
// same ranks), so a rank's share of the weights is the same fraction of
// every layer.
//
// An expert has one or more replicas, each on a different rank: a hot
// expert's copies share its steps (AssignExperts). owner(e) is its first
// (lowest) replica rank; with one replica per expert (Contiguous) that is
// the only rank that runs it.
//
// Every rank of a job must build the same placement (Contiguous, Balanced
// from the same counts, or ReadFile of the same file): all of it is
// deterministic, so the ranks agree without communicating.
#ifndef RINGMOE_ENGINE_MOE_EXPERT_PLACEMENT_H_
#define RINGMOE_ENGINE_MOE_EXPERT_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ringmoe::moe {

class ExpertPlacement {
 public:
  // Contiguous ranges, one replica each: rank r holds experts
  // [r * E / N, (r + 1) * E / N) (integer division) of E experts over N
  // ranks, so the ranks' shares differ by at most one expert; with N > E
  // some ranks hold none. Requires num_experts >= 1 and num_ranks >= 1.
  static ExpertPlacement Contiguous(int num_experts, int num_ranks);

  // EPLB-style greedy balancing of E = tokens_per_expert.size() experts
  // (expert e's load: the tokens routed to it) over `num_ranks` ranks with
  // E + extra_replicas replicas in all:
  //  1. Replication: each extra replica, one at a time, goes to the expert
  //     with the highest load per replica (tokens / replicas so far; ties:
  //     lower expert id) among those with fewer than num_ranks replicas.
  //  2. Packing: rank r gets ceil(T / N) replica slots when r < T % N and
  //     floor(T / N) otherwise (T replicas, N ranks). Replicas go heaviest
  //     first (load tokens / replicas; ties: lower expert id) to the rank
  //     with the least load so far (ties: lower rank) among those with a
  //     free slot that do not hold that expert yet. When every rank with a
  //     free slot holds it already, a replica of another expert moves from
  //     a full rank to a free slot to make room (the move that leaves the
  //     larger of the two ranks' loads smallest; ties: lower ranks, lower
  //     expert), so every input within the limits below is placed.
  // With all-zero counts every expert ties and ranks fill in order (rank 0
  // gets experts 0, 1, ...: Contiguous when N divides E and there are no
  // extra replicas), still evenly. Errors (INVALID_ARGUMENT): no
  // experts, num_ranks < 1, extra_replicas < 0, or extra_replicas >
  // E * (num_ranks - 1) (some expert would need more replicas than ranks).
  static absl::StatusOr<ExpertPlacement> Balanced(
      absl::Span<const uint64_t> tokens_per_expert, int num_ranks,
      int extra_replicas);

  // Reads a placement written by WriteFile (format there) for a model with
  // `num_experts` routed experts and a job of `num_ranks` ranks. Errors:
  // the file's, naming `path` (NOT_FOUND when missing); INVALID_ARGUMENT
  // "<path>:<line>: <problem>" for a wrong header or version, counts that
  // are not this job's ("placement file <path> was written for 8 experts
  // over 4 ranks; this job has 16 experts over 2 ranks"), an expert out of
  // range, listed twice or missing, an expert without ranks, a rank out of
  // range or listed twice for one expert, and anything else on a line
  // (trailing garbage); "<path>: <problem>" for a file that ends before its
  // counts or leaves an expert out. A rank holding no replica is allowed.
  static absl::StatusOr<ExpertPlacement> ReadFile(const std::string& path,
                                                  int num_experts,
                                                  int num_ranks);

  // Writes the placement to `path` as text, through a temporary file in the
  // same directory renamed over `path`, so a crash leaves either the old
  // file or the whole new one. Format (version 1; '#' starts a comment that
  // runs to the end of its line, blank lines are skipped):
  //   ringmoe-expert-placement 1
  //   experts <E>
  //   ranks <N>
  //   <expert>: <rank> <rank> ...     (one line per expert, any order)
  // Errors: the system's, naming the file.
  absl::Status WriteFile(const std::string& path) const;

  int num_experts() const { return static_cast<int>(replicas_.size()); }
  int num_ranks() const { return num_ranks_; }
  // Replicas of all experts together (num_experts() plus the extra ones).
  int num_replicas() const { return num_replicas_; }

  // The ranks holding `expert` (in [0, num_experts())): ascending, at least
  // one, no rank twice.
  const std::vector<int>& replicas(int expert) const {
    return replicas_[expert];
  }
  // The first (lowest) rank holding `expert`.
  int owner(int expert) const { return replicas_[expert].front(); }
  // The experts with a replica on `rank`, ascending.
  std::vector<int32_t> experts_of(int rank) const;
  // Whether `rank` holds a replica of `expert`.
  bool holds(int expert, int rank) const;

  // The rank that runs all of each expert's rows in a step, given the
  // step's rows per expert (size num_experts()): a single-replica expert's
  // owner; for a replicated one the replica with the fewest rows assigned
  // so far, counting every single-replica expert's rows first, then the
  // replicated experts by rows, most first (ties: lower expert, lower
  // rank). An expert's rows are never split among its replicas: every
  // replica that runs an expert in a step reads all of its weights, and a
  // product's rows sum in an order that depends on how many rows it has
  // (kernels/cpu/ops.h), so whole experts keep results bitwise those of one
  // process. Depends on nothing else: every rank computes the same.
  std::vector<int> AssignExperts(
      absl::Span<const uint64_t> rows_per_expert) const;

  // Each rank's load under `tokens_per_expert` (size num_experts()): the sum
  // over its replicas of the expert's tokens / replicas.
  std::vector<double> RankLoads(
      absl::Span<const uint64_t> tokens_per_expert) const;

  // One line for the start-up log: replicas, the experts with more than
  // one, replica slots per rank and, for a Balanced placement, each rank's
  // share of the tokens it was balanced for.
  std::string Summary() const;

  // Same ranks holding the same experts (how a placement was made, e.g.
  // the counts Balanced used, is not compared).
  bool operator==(const ExpertPlacement& other) const {
    return num_ranks_ == other.num_ranks_ && replicas_ == other.replicas_;
  }
  bool operator!=(const ExpertPlacement& other) const {
    return !(*this == other);
  }

 private:
  ExpertPlacement(std::vector<std::vector<int>> replicas, int num_ranks,
                  std::vector<uint64_t> balanced_for);

  std::vector<std::vector<int>> replicas_;  // [expert], ranks ascending
  int num_ranks_;
  int num_replicas_;
  // The token counts Balanced placed by; empty otherwise.
  std::vector<uint64_t> balanced_for_;
};

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_EXPERT_PLACEMENT_H_

// ExpertPlacement: which rank of an expert-parallel job owns each routed
// expert. Every MoE layer is placed alike (expert e of every layer on the
// same rank), so a rank's share of the weights is the same fraction of
// every layer.
#ifndef RINGMOE_ENGINE_MOE_EXPERT_PLACEMENT_H_
#define RINGMOE_ENGINE_MOE_EXPERT_PLACEMENT_H_

#include <cstdint>
#include <utility>
#include <vector>

namespace ringmoe::moe {

class ExpertPlacement {
 public:
  // Contiguous ranges: rank r owns experts [r * E / N, (r + 1) * E / N)
  // (integer division) of E experts over N ranks, so the ranks' shares
  // differ by at most one expert; with N > E some ranks own none.
  // Requires num_experts >= 1 and num_ranks >= 1.
  static ExpertPlacement Contiguous(int num_experts, int num_ranks);

  int num_experts() const { return static_cast<int>(owner_.size()); }
  int num_ranks() const { return num_ranks_; }

  // The rank that runs `expert` (in [0, num_experts())).
  int owner(int expert) const { return owner_[expert]; }
  // The experts `rank` runs, ascending.
  std::vector<int32_t> experts_of(int rank) const;

 private:
  ExpertPlacement(std::vector<int> owner, int num_ranks)
      : owner_(std::move(owner)), num_ranks_(num_ranks) {}

  std::vector<int> owner_;  // [expert]
  int num_ranks_;
};

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_EXPERT_PLACEMENT_H_

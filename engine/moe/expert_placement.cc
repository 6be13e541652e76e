#include "engine/moe/expert_placement.h"

#include <utility>

namespace ringmoe::moe {

ExpertPlacement ExpertPlacement::Contiguous(int num_experts, int num_ranks) {
  std::vector<int> owner(num_experts);
  for (int r = 0; r < num_ranks; ++r) {
    const int64_t begin = int64_t{r} * num_experts / num_ranks;
    const int64_t end = int64_t{r + 1} * num_experts / num_ranks;
    for (int64_t e = begin; e < end; ++e) owner[e] = r;
  }
  return ExpertPlacement(std::move(owner), num_ranks);
}

std::vector<int32_t> ExpertPlacement::experts_of(int rank) const {
  std::vector<int32_t> experts;
  for (int e = 0; e < num_experts(); ++e) {
    if (owner_[e] == rank) experts.push_back(e);
  }
  return experts;
}

}  // namespace ringmoe::moe

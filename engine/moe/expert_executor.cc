#include "engine/moe/expert_executor.h"

#include <vector>

namespace ringmoe::moe {

absl::Status ResidentExperts::Run(int layer, absl::Span<const ExpertTask> tasks,
                                  absl::Span<const backend::MlpTask> alongside,
                                  backend::Backend& backend) {
  std::vector<backend::MlpTask> mlps(alongside.begin(), alongside.end());
  for (const ExpertTask& t : tasks) {
    mlps.push_back({&weights_.layers[layer].experts[t.expert], t.x, t.out});
  }
  backend.RunMlps(mlps);
  return absl::OkStatus();
}

}  // namespace ringmoe::moe

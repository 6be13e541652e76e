#include "engine/moe/mlp.h"

#include <vector>

namespace ringmoe::moe {

void RunMlps(absl::Span<const MlpTask> tasks, const ComputeContext& compute) {
  if (tasks.empty()) return;
  std::vector<std::vector<float>> gate(tasks.size()), up(tasks.size());
  std::vector<kernels::MatMulJob> jobs;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const MlpTask& t = tasks[i];
    gate[i].resize(t.n * t.weights->gate.rows);
    up[i].resize(t.n * t.weights->up.rows);
    jobs.push_back({t.x, t.n, t.weights->gate, gate[i].data()});
    jobs.push_back({t.x, t.n, t.weights->up, up[i].data()});
  }
  kernels::MatMulBatch(jobs, compute.pool);
  if (compute.work != nullptr) compute.work->Add(jobs);
  jobs.clear();
  for (size_t i = 0; i < tasks.size(); ++i) {
    kernels::SiluMul(gate[i].data(), up[i].data(), gate[i].size(),
                     gate[i].data());
    jobs.push_back(
        {gate[i].data(), tasks[i].n, tasks[i].weights->down, tasks[i].out});
  }
  kernels::MatMulBatch(jobs, compute.pool);
  if (compute.work != nullptr) compute.work->Add(jobs);
}

}  // namespace ringmoe::moe

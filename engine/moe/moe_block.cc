#include "engine/moe/moe_block.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/status_macros.h"
#include "engine/moe/routing.h"

namespace ringmoe::moe {

Routing RouteLayer(const model::ModelSpec& spec,
                   const model::LayerWeights& layer, const float* router_logits,
                   int64_t n) {
  const Router router(spec.num_experts, spec.experts_per_token, spec.routing);
  return router.Route(router_logits, n,
                      layer.expert_score_bias.empty()
                          ? nullptr
                          : layer.expert_score_bias.data());
}

absl::Status RunFeedForward(const float* x, int64_t n,
                            const model::ModelSpec& spec,
                            const model::LayerWeights& layer, int layer_index,
                            const FeedForwardContext& context, float* out) {
  const ComputeContext& compute = context.compute;
  const int64_t hidden = spec.hidden_size;
  if (!layer.is_moe) {
    const MlpTask dense{&layer.dense_mlp, x, n, out};
    RunMlps({&dense, 1}, compute);
    return absl::OkStatus();
  }
  std::vector<float> router_logits(n * spec.num_experts);
  const kernels::MatMulJob router{x, n, layer.router, router_logits.data()};
  kernels::MatMulBatch({&router, 1}, compute.pool);
  if (compute.work != nullptr) compute.work->Add({&router, 1});
  const Routing routing = RouteLayer(spec, layer, router_logits.data(), n);
  const std::vector<ExpertAssignment> assignments =
      GroupByExpert(routing, spec.num_experts);
  if (context.usage != nullptr) {
    for (const ExpertAssignment& a : assignments) {
      context.usage->Add(layer_index, a.expert, a.tokens.size());
    }
  }

  // Gather each expert's tokens into contiguous rows; the shared expert (if
  // any) runs beside them on all tokens.
  int64_t rows = 0;
  for (const ExpertAssignment& a : assignments) rows += a.tokens.size();
  std::vector<float> gathered(rows * hidden), expert_out(rows * hidden);
  std::vector<ExpertTask> tasks;
  int64_t row = 0;
  for (const ExpertAssignment& a : assignments) {
    const int64_t m = static_cast<int64_t>(a.tokens.size());
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(x + a.tokens[i] * hidden, hidden,
                  gathered.data() + (row + i) * hidden);
    }
    tasks.push_back({a.expert, gathered.data() + row * hidden, m,
                     expert_out.data() + row * hidden});
    row += m;
  }
  std::vector<float> shared;
  std::vector<MlpTask> alongside;
  if (layer.has_shared_expert) {
    shared.resize(n * hidden);
    alongside.push_back({&layer.shared_expert, x, n, shared.data()});
  }
  RETURN_IF_ERROR(context.experts->Run(layer_index, tasks, alongside, compute));

  std::fill(out, out + n * hidden, 0.f);
  row = 0;
  for (const ExpertAssignment& a : assignments) {
    for (size_t i = 0; i < a.tokens.size(); ++i, ++row) {
      float* dst = out + a.tokens[i] * hidden;
      const float* src = expert_out.data() + row * hidden;
      for (int64_t d = 0; d < hidden; ++d) dst[d] += a.weights[i] * src[d];
    }
  }
  if (layer.has_shared_expert && layer.shared_expert_gate.empty()) {
    for (int64_t i = 0; i < n * hidden; ++i) out[i] += shared[i];
  } else if (layer.has_shared_expert) {
    for (int64_t t = 0; t < n; ++t) {
      float logit = 0.f;
      for (int64_t d = 0; d < hidden; ++d) {
        logit += x[t * hidden + d] * layer.shared_expert_gate[d];
      }
      const float gate = 1.f / (1.f + std::exp(-logit));
      for (int64_t d = 0; d < hidden; ++d) {
        out[t * hidden + d] += gate * shared[t * hidden + d];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ringmoe::moe

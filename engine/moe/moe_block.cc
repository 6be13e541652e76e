#include "engine/moe/moe_block.h"

#include <algorithm>
#include <vector>

#include "base/status_macros.h"
#include "engine/moe/routing.h"

namespace ringmoe::moe {

namespace {

// The router's logits ([n, num_experts], its bias added) for x.
backend::Backend::Buffer RouterLogits(backend::Backend& backend,
                                      const backend::Tensor& x,
                                      const model::ModelSpec& spec,
                                      const model::LayerWeights& layer,
                                      int64_t batch_rows) {
  backend::Backend::Buffer logits = backend.NewTensor(x.rows, spec.num_experts);
  backend.MatMul({{x, &layer.router, logits, batch_rows}});
  if (!layer.router_bias.empty()) backend.AddBias(logits, layer.router_bias);
  return logits;
}

// out += the shared expert's output `shared` (gated where the layer has a
// gate).
void AddSharedExpert(backend::Backend& backend, const backend::Tensor& shared,
                     const backend::Tensor& x, const model::LayerWeights& layer,
                     const backend::Tensor& out) {
  if (layer.shared_expert_gate.empty()) {
    backend.Add(out, shared);
  } else {
    backend.AddSigmoidGated(shared, x, layer.shared_expert_gate, out);
  }
}

// The router's choice for each row of `logits`, made on the host.
Routing RouteOnHost(backend::Backend& backend, const backend::Tensor& logits,
                    const model::ModelSpec& spec,
                    const model::LayerWeights& layer) {
  std::vector<float> host(logits.size());
  backend.CopyToHost(logits, host.data());
  const Router router(spec.num_experts, spec.experts_per_token, spec.routing);
  return router.Route(
      host.data(), logits.rows,
      layer.expert_score_bias.empty() ? nullptr : layer.expert_score_bias.data);
}

// The routed experts routed and run by the backend itself from the
// router's `logits`; false when it cannot (the caller routes on the host).
bool RunOnBackend(const backend::Tensor& x, const backend::Tensor& logits,
                  const model::ModelSpec& spec,
                  const model::LayerWeights& layer, int layer_index,
                  const FeedForwardContext& context,
                  const backend::Tensor& out) {
  if (!context.route_on_backend || context.usage != nullptr) return false;
  const absl::Span<const backend::MlpWeights> experts =
      context.experts->ExpertsInBackendMemory(layer_index);
  if (experts.empty()) return false;
  backend::Backend& backend = *context.backend;
  backend::RoutedExpertsJob job;
  job.x = x;
  job.logits = logits;
  job.top_k = spec.experts_per_token;
  job.routing = &spec.routing;
  job.selection_bias =
      layer.expert_score_bias.empty() ? nullptr : layer.expert_score_bias.data;
  job.experts = experts;
  job.out = out;
  if (!backend.RunRoutedExperts(job)) return false;
  if (layer.has_shared_expert) {
    const backend::Backend::Buffer shared =
        backend.NewTensor(x.rows, spec.hidden_size);
    const backend::MlpTask task{&layer.shared_expert, x, shared,
                                context.batch_rows};
    backend.RunMlps({&task, 1});
    AddSharedExpert(backend, shared, x, layer, out);
  }
  return true;
}

}  // namespace

Routing RouteTokens(backend::Backend& backend, const backend::Tensor& x,
                    const model::ModelSpec& spec,
                    const model::LayerWeights& layer, int64_t batch_rows) {
  return RouteOnHost(backend, RouterLogits(backend, x, spec, layer, batch_rows),
                     spec, layer);
}

absl::Status RunFeedForward(const backend::Tensor& x,
                            const model::ModelSpec& spec,
                            const model::LayerWeights& layer, int layer_index,
                            const FeedForwardContext& context,
                            const backend::Tensor& out) {
  backend::Backend& backend = *context.backend;
  const int64_t n = x.rows, hidden = spec.hidden_size;
  if (!layer.is_moe) {
    const backend::MlpTask dense{&layer.dense_mlp, x, out, context.batch_rows};
    backend.RunMlps({&dense, 1});
    return absl::OkStatus();
  }
  const backend::Backend::Buffer logits =
      RouterLogits(backend, x, spec, layer, context.batch_rows);
  if (RunOnBackend(x, logits, spec, layer, layer_index, context, out)) {
    return absl::OkStatus();
  }
  const Routing routing = RouteOnHost(backend, logits, spec, layer);
  const std::vector<ExpertAssignment> assignments =
      GroupByExpert(routing, spec.num_experts);
  if (context.usage != nullptr) {
    for (const ExpertAssignment& a : assignments) {
      context.usage->Add(layer_index, a.expert, a.tokens.size());
    }
  }

  // Each expert's tokens gathered into contiguous rows; the shared expert
  // (if any) runs beside them on all tokens.
  std::vector<int32_t> token_of;
  std::vector<float> weight_of;
  for (const ExpertAssignment& a : assignments) {
    token_of.insert(token_of.end(), a.tokens.begin(), a.tokens.end());
    weight_of.insert(weight_of.end(), a.weights.begin(), a.weights.end());
  }
  const int64_t rows = static_cast<int64_t>(token_of.size());
  const backend::Backend::Buffer gathered = backend.NewTensor(rows, hidden);
  const backend::Backend::Buffer expert_out = backend.NewTensor(rows, hidden);
  backend.GatherRows(x, token_of, gathered);
  std::vector<ExpertTask> tasks;
  int64_t row = 0;
  for (const ExpertAssignment& a : assignments) {
    const int64_t m = static_cast<int64_t>(a.tokens.size());
    tasks.push_back({a.expert, gathered.tensor().Rows(row, m),
                     expert_out.tensor().Rows(row, m)});
    row += m;
  }
  backend::Backend::Buffer shared;
  std::vector<backend::MlpTask> alongside;
  if (layer.has_shared_expert) {
    shared = backend.NewTensor(n, hidden);
    alongside.push_back({&layer.shared_expert, x, shared, context.batch_rows});
  }
  RETURN_IF_ERROR(context.experts->Run(layer_index, tasks, alongside, backend));

  backend.SetZero(out);
  backend.AddScaledRows(expert_out, token_of, weight_of, out);
  if (layer.has_shared_expert) AddSharedExpert(backend, shared, x, layer, out);
  return absl::OkStatus();
}

}  // namespace ringmoe::moe

#include "engine/moe/moe_block.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/moe/routing.h"

namespace ringmoe::moe {
namespace {

// The MLPs of one step, each on its own rows of activations: gate and up of
// all of them in one parallel loop, then down of all of them in another.
struct MlpRun {
  const model::MlpWeights* mlp;
  const float* x;  // [n, hidden]
  int64_t n;
  float* out;  // [n, hidden]
};

void RunMlps(const std::vector<MlpRun>& runs, ThreadPool* pool,
             kernels::ProductWork* work) {
  std::vector<std::vector<float>> gate(runs.size()), up(runs.size());
  std::vector<kernels::MatMulJob> jobs;
  for (size_t i = 0; i < runs.size(); ++i) {
    const MlpRun& r = runs[i];
    gate[i].resize(r.n * r.mlp->gate.rows);
    up[i].resize(r.n * r.mlp->up.rows);
    jobs.push_back({r.x, r.n, r.mlp->gate, gate[i].data()});
    jobs.push_back({r.x, r.n, r.mlp->up, up[i].data()});
  }
  kernels::MatMulBatch(jobs, pool);
  if (work != nullptr) work->Add(jobs);
  jobs.clear();
  for (size_t i = 0; i < runs.size(); ++i) {
    kernels::SiluMul(gate[i].data(), up[i].data(), gate[i].size(),
                     gate[i].data());
    jobs.push_back({gate[i].data(), runs[i].n, runs[i].mlp->down, runs[i].out});
  }
  kernels::MatMulBatch(jobs, pool);
  if (work != nullptr) work->Add(jobs);
}

}  // namespace

Routing RouteLayer(const model::ModelSpec& spec,
                   const model::LayerWeights& layer, const float* router_logits,
                   int64_t n) {
  const Router router(spec.num_experts, spec.experts_per_token, spec.routing);
  return router.Route(router_logits, n,
                      layer.expert_score_bias.empty()
                          ? nullptr
                          : layer.expert_score_bias.data());
}

void RunMlp(const float* x, int64_t n, const model::MlpWeights& mlp, float* out,
            ThreadPool* pool, kernels::ProductWork* work) {
  RunMlps({{&mlp, x, n, out}}, pool, work);
}

absl::Status RunFeedForward(const float* x, int64_t n,
                            const model::ModelSpec& spec,
                            const model::LayerWeights& layer, int layer_index,
                            const FeedForwardContext& context, float* out) {
  ThreadPool* const pool = context.pool;
  kernels::ProductWork* const work = context.work;
  ExpertSource* const experts = context.experts;
  const int64_t hidden = spec.hidden_size;
  if (!layer.is_moe) {
    RunMlp(x, n, layer.dense_mlp, out, pool, work);
    return absl::OkStatus();
  }
  std::vector<float> router_logits(n * spec.num_experts);
  const kernels::MatMulJob router{x, n, layer.router, router_logits.data()};
  kernels::MatMulBatch({&router, 1}, pool);
  if (work != nullptr) work->Add({&router, 1});
  const Routing routing = RouteLayer(spec, layer, router_logits.data(), n);
  const std::vector<ExpertAssignment> assignments =
      GroupByExpert(routing, spec.num_experts);
  if (context.usage != nullptr) {
    for (const ExpertAssignment& a : assignments) {
      context.usage->Add(layer_index, a.expert, a.tokens.size());
    }
  }
  std::vector<const model::MlpWeights*> expert_weights;
  if (experts != nullptr) {
    std::vector<int32_t> used;
    for (const ExpertAssignment& a : assignments) used.push_back(a.expert);
    absl::Status status = experts->Acquire(layer_index, used, &expert_weights);
    if (!status.ok()) return status;
  } else {
    for (const ExpertAssignment& a : assignments) {
      expert_weights.push_back(&layer.experts[a.expert]);
    }
  }

  // Gather each expert's tokens into contiguous rows; the shared expert (if
  // any) runs in the same loops on all tokens.
  int64_t rows = 0;
  for (const ExpertAssignment& a : assignments) rows += a.tokens.size();
  std::vector<float> gathered(rows * hidden), expert_out(rows * hidden);
  std::vector<float> shared;
  std::vector<MlpRun> runs;
  int64_t row = 0;
  for (size_t e = 0; e < assignments.size(); ++e) {
    const ExpertAssignment& a = assignments[e];
    const int64_t m = static_cast<int64_t>(a.tokens.size());
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(x + a.tokens[i] * hidden, hidden,
                  gathered.data() + (row + i) * hidden);
    }
    runs.push_back({expert_weights[e], gathered.data() + row * hidden, m,
                    expert_out.data() + row * hidden});
    row += m;
  }
  if (layer.has_shared_expert) {
    shared.resize(n * hidden);
    runs.push_back({&layer.shared_expert, x, n, shared.data()});
  }
  RunMlps(runs, pool, work);
  if (experts != nullptr) experts->Release(layer_index);

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

#include "engine/runtime/attention.h"

#include <cmath>
#include <vector>

#include "engine/runtime/rope.h"

namespace ringmoe::runtime {
namespace {

using backend::Backend;
using backend::Tensor;

// The RMSNorm epsilon of MLA's q_a_layernorm and kv_a_layernorm: the
// RMSNorm default, which transformers and DeepSeek's code construct them
// with whatever rms_norm_eps says.
constexpr float kMlaNormEps = 1e-6f;

// Each sequence's cached blocks of one layer, and which one each token
// reads.
struct CachedSequences {
  std::vector<KvCache::LayerView> views;
  std::vector<backend::KvBlocks> blocks;
  std::vector<int32_t> index_of;

  CachedSequences(const AttentionStep& step, int64_t layer) {
    const size_t n = step.seq_of.size();
    index_of.resize(n);
    for (size_t i = 0; i < n; ++i) {
      if (i == 0 || step.seq_of[i] != step.seq_of[i - 1]) {
        views.emplace_back();
        step.cache->View(step.seq_of[i], layer, &views.back());
      }
      index_of[i] = static_cast<int32_t>(views.size()) - 1;
    }
    // After the loop: growing `views` may move the block-pointer arrays.
    for (const KvCache::LayerView& view : views)
      blocks.push_back(view.blocks());
  }
};

class GqaAttention : public Attention {
 public:
  GqaAttention(const model::ModelSpec& spec, const model::LayerWeights& w)
      : spec_(spec), w_(w) {}

  void Forward(const AttentionStep& step, int64_t layer, const Tensor& x,
               const Tensor& out, Backend& backend) const override {
    const int64_t n = x.rows;
    const int64_t qw = spec_.q_width(), kvw = spec_.kv_width();
    const int64_t heads = spec_.num_heads, kv_heads = spec_.num_kv_heads;
    const int64_t head_dim = spec_.head_dim;
    const Backend::Buffer q = backend.NewTensor(n, qw);
    const Backend::Buffer k = backend.NewTensor(n, kvw);
    const Backend::Buffer v = backend.NewTensor(n, kvw);
    const int64_t batch = step.batch_rows;
    backend.MatMul(
        {{x, &w_.q, q, batch}, {x, &w_.k, k, batch}, {x, &w_.v, v, batch}});
    if (!w_.q_bias.empty()) {
      backend.AddBias(q, w_.q_bias);
      backend.AddBias(k, w_.k_bias);
      backend.AddBias(v, w_.v_bias);
    }
    if (spec_.clip_qkv > 0) {
      const float c = static_cast<float>(spec_.clip_qkv);
      for (const Tensor& t : {q.tensor(), k.tensor(), v.tensor()}) {
        backend.Clamp(t, c);
      }
    }
    const float eps = static_cast<float>(spec_.rms_norm_eps);
    switch (spec_.qk_norm) {
      case model::QkNorm::kNone:
        break;
      case model::QkNorm::kPerHead: {
        const Tensor q_heads = q.tensor().Reshaped(n * heads, head_dim);
        const Tensor k_heads = k.tensor().Reshaped(n * kv_heads, head_dim);
        backend.RmsNorm(q_heads, w_.q_norm, eps, q_heads);
        backend.RmsNorm(k_heads, w_.k_norm, eps, k_heads);
        break;
      }
      case model::QkNorm::kWholeProjection:
        backend.RmsNorm(q, w_.q_norm, eps, q);
        backend.RmsNorm(k, w_.k_norm, eps, k);
        break;
    }
    backend.ApplyRotary({{q, {heads, head_dim, 0, head_dim, false}},
                         {k, {kv_heads, head_dim, 0, head_dim, false}}},
                        step.cos, step.sin);
    std::vector<float*> keys(n), values(n);
    for (int64_t i = 0; i < n; ++i) {
      keys[i] = step.cache->Key(step.seq_of[i], layer, step.position_of[i]);
      values[i] = step.cache->Value(step.seq_of[i], layer, step.position_of[i]);
    }
    backend.WriteRows({{k, keys}, {v, values}});

    const CachedSequences cached(step, layer);
    const Backend::Buffer attended = backend.NewTensor(n, qw);
    backend::AttentionJob job;
    job.q = q;
    job.heads = heads;
    job.kv_heads = kv_heads;
    job.head_dim = head_dim;
    job.scale = 1.f / std::sqrt(static_cast<float>(head_dim));
    job.window = spec_.SlidingWindow(layer);
    job.sequences = cached.blocks;
    job.sequence_of = cached.index_of;
    job.position_of = step.position_of;
    job.sinks = w_.sinks;
    job.out = attended;
    job.batch_rows = batch;
    backend.Attend(job);

    backend.MatMul({{attended, &w_.o, out, batch}});
    if (!w_.o_bias.empty()) backend.AddBias(out, w_.o_bias);
  }

 private:
  const model::ModelSpec& spec_;
  const model::LayerWeights& w_;
};

// Queries and keys rotate with interleaved pairs; the cache holds each
// token's normalised latent and its rotated shared key. The key
// up-projection is absorbed into the queries, so each head attends over the
// cached rows as one shared key-value head (values: the latent, the first
// kv_lora_rank floats of a row), and the value up-projection is applied to
// each head's attended latent.
class MlaAttention : public Attention {
 public:
  MlaAttention(const model::ModelSpec& spec, const model::LayerWeights& w)
      : spec_(spec), w_(w), scale_(static_cast<float>(MlaSoftmaxScale(spec))) {}

  void Forward(const AttentionStep& step, int64_t layer, const Tensor& x,
               const Tensor& out, Backend& backend) const override {
    const model::MlaWeights& w = w_.mla;
    const model::MlaSpec& m = *spec_.mla;
    const int64_t n = x.rows, heads = spec_.num_heads;
    const int64_t qk = m.qk_head_dim(), nope = m.qk_nope_head_dim;
    const int64_t rope = m.qk_rope_head_dim, lora = m.kv_lora_rank;
    const int64_t row = m.cache_width();
    const int64_t batch = step.batch_rows;
    // Queries [n, heads, qk] and the compressed key-value rows [n, row].
    const Backend::Buffer q = backend.NewTensor(n, heads * qk);
    const Backend::Buffer kv = backend.NewTensor(n, row);
    if (m.q_lora_rank > 0) {
      const Backend::Buffer q_latent = backend.NewTensor(n, m.q_lora_rank);
      backend.MatMul({{x, &w.q_a, q_latent, batch}, {x, &w.kv_a, kv, batch}});
      backend.RmsNorm(q_latent, w.q_a_norm, kMlaNormEps, q_latent);
      backend.MatMul({{q_latent, &w.q_b, q, batch}});
    } else {
      backend.MatMul({{x, &w.q, q, batch}, {x, &w.kv_a, kv, batch}});
    }
    // The latent is the first kv_lora_rank floats of each row.
    const Tensor latent{kv.tensor().data, n, row};
    for (int64_t i = 0; i < n; ++i) {
      const Tensor one{latent.row(i), 1, lora};
      backend.RmsNorm(one, w.kv_a_norm, kMlaNormEps, one);
    }
    backend.ApplyRotary(
        {{kv, {1, rope, lora, rope, true}}, {q, {heads, qk, nope, rope, true}}},
        step.cos, step.sin);
    std::vector<float*> rows(n);
    for (int64_t i = 0; i < n; ++i) {
      rows[i] = step.cache->Key(step.seq_of[i], layer, step.position_of[i]);
    }
    backend.WriteRows({{kv, rows}});

    const Backend::Buffer absorbed = backend.NewTensor(n, heads * row);
    backend.AbsorbMlaQueries(q, w.kv_b, m, heads, absorbed);
    const CachedSequences cached(step, layer);
    const Backend::Buffer attended = backend.NewTensor(n, heads * row);
    backend::AttentionJob job;
    job.q = absorbed;
    job.heads = heads;
    job.kv_heads = 1;
    job.head_dim = row;
    job.scale = scale_;
    job.window = spec_.SlidingWindow(layer);
    job.sequences = cached.blocks;
    job.sequence_of = cached.index_of;
    job.position_of = step.position_of;
    job.out = attended;
    job.batch_rows = batch;
    backend.Attend(job);
    const Backend::Buffer values = backend.NewTensor(n, heads * m.v_head_dim);
    backend.ExpandMlaValues(attended, w.kv_b, m, heads, values, batch);
    backend.MatMul({{values, &w_.o, out, batch}});
  }

 private:
  const model::ModelSpec& spec_;
  const model::LayerWeights& w_;
  float scale_;
};

}  // namespace

std::unique_ptr<Attention> MakeAttention(const model::ModelSpec& spec,
                                         const model::LayerWeights& weights) {
  if (spec.mla) return std::make_unique<MlaAttention>(spec, weights);
  return std::make_unique<GqaAttention>(spec, weights);
}

}  // namespace ringmoe::runtime

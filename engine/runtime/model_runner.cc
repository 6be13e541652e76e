#include "engine/runtime/model_runner.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/moe/moe_block.h"
#include "engine/moe/routing.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::runtime {

namespace {

// Keys per slice when one query's attention is split across threads: long
// enough that merging the slices costs little.
constexpr int64_t kMinPositionsPerSlice = 64;
// Consecutive query tokens of a sequence attended together in prefill
// (kernels::AttendQueryBlock): enough to read each key once for many
// queries, few enough that a prompt gives every thread several runs.
constexpr int64_t kQueryBlock = 16;
// The RMSNorm epsilon of MLA's q_a_layernorm and kv_a_layernorm: the
// RMSNorm default, which transformers and DeepSeek's code construct them
// with whatever rms_norm_eps says.
constexpr float kMlaNormEps = 1e-6f;

}  // namespace

ModelRunner::ModelRunner(const model::ModelSpec& spec,
                         const model::ModelWeights& weights, ThreadPool* pool,
                         moe::ExpertExecutor* experts, moe::ExpertUsage* usage)
    : spec_(spec),
      weights_(weights),
      pool_(pool),
      resident_experts_(weights),
      experts_(experts != nullptr ? experts : &resident_experts_),
      usage_(usage),
      rope_(spec) {}

absl::Status ModelRunner::Reserve(absl::Span<const SequenceChunk> chunks,
                                  KvCache* cache) const {
  absl::flat_hash_map<SequenceId, int64_t> new_length;
  int64_t blocks = 0;
  for (const SequenceChunk& c : chunks) {
    if (c.tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", c.sequence, ": empty chunk"));
    }
    if (new_length.contains(c.sequence)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", c.sequence, " appears twice in one step"));
    }
    for (int32_t t : c.tokens) {
      if (t < 0 || t >= spec_.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence ", c.sequence, ": token id ", t,
            " is outside the vocabulary [0, ", spec_.vocab_size, ")"));
      }
    }
    const int64_t length = cache->Length(c.sequence) + c.tokens.size();
    if (length > spec_.max_position_embeddings) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", c.sequence, ": ", length,
          " positions exceed the model's max_position_embeddings (",
          spec_.max_position_embeddings, ")"));
    }
    new_length[c.sequence] = length;
    blocks += cache->BlocksNeeded(c.sequence, length);
  }
  if (blocks > cache->num_free_blocks()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache: the step needs ", blocks, " blocks, ",
                     cache->num_free_blocks(), " are free"));
  }
  for (const auto& [seq, length] : new_length) {
    absl::Status status = cache->Grow(seq, length);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::Forward(absl::Span<const SequenceChunk> chunks,
                                  KvCache* cache, std::vector<float>* logits,
                                  kernels::ProductWork* work) const {
  std::vector<SequenceId> seq_of;
  std::vector<int64_t> position_of;
  std::vector<int64_t> output_rows;
  for (const SequenceChunk& c : chunks) {
    const int64_t start = cache->Length(c.sequence);
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      if (c.all_logits || i + 1 == c.tokens.size()) {
        output_rows.push_back(static_cast<int64_t>(seq_of.size()));
      }
      seq_of.push_back(c.sequence);
      position_of.push_back(start + static_cast<int64_t>(i));
    }
  }
  absl::Status reserved = Reserve(chunks, cache);
  if (!reserved.ok()) return reserved;

  const int64_t n = static_cast<int64_t>(seq_of.size());
  const int64_t hidden = spec_.hidden_size;
  std::vector<float> x(n * hidden), normed(n * hidden), delta(n * hidden);
  int64_t row = 0;
  for (const SequenceChunk& c : chunks) {
    for (int32_t t : c.tokens) {
      kernels::ReadRow(weights_.embed_tokens, t, x.data() + row * hidden);
      ++row;
    }
  }
  experts_->BeginStep(n);
  std::vector<float> predicted_logits;
  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    const model::LayerWeights& layer = weights_.layers[l];
    kernels::RmsNorm(x.data(), layer.input_norm.data(), n, hidden,
                     static_cast<float>(spec_.rms_norm_eps), normed.data());
    const Batch batch{seq_of, position_of, n, cache, work};
    if (spec_.mla) {
      MlaAttention(l, batch, normed.data(), delta.data());
    } else {
      GqaAttention(l, batch, normed.data(), delta.data());
    }
    for (int64_t i = 0; i < n * hidden; ++i) x[i] += delta[i];
    kernels::RmsNorm(x.data(), layer.post_attention_norm.data(), n, hidden,
                     static_cast<float>(spec_.rms_norm_eps), normed.data());
    // The next layer's router on this layer's hidden state predicts the
    // experts it will need, so they load while this layer computes.
    if (experts_->WantsPredictions() && l + 1 < spec_.num_layers &&
        spec_.layer_is_moe[l + 1]) {
      const model::LayerWeights& next = weights_.layers[l + 1];
      predicted_logits.resize(n * spec_.num_experts);
      kernels::MatMulTransposed(normed.data(), n, next.router,
                                predicted_logits.data());
      experts_->Predict(
          static_cast<int>(l + 1),
          moe::RouteLayer(spec_, next, predicted_logits.data(), n));
    }
    absl::Status status =
        moe::RunFeedForward(normed.data(), n, spec_, layer, static_cast<int>(l),
                            {{pool_, work}, experts_, usage_}, delta.data());
    if (!status.ok()) {
      // The sequences' new KV positions hold partial results: callers must
      // release the sequences of a failed step.
      experts_->EndStep();
      return status;
    }
    for (int64_t i = 0; i < n * hidden; ++i) x[i] += delta[i];
  }
  experts_->EndStep();
  const int64_t rows = static_cast<int64_t>(output_rows.size());
  std::vector<float> last(rows * hidden);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(x.data() + output_rows[r] * hidden, hidden,
                last.data() + r * hidden);
  }
  kernels::RmsNorm(last.data(), weights_.final_norm.data(), rows, hidden,
                   static_cast<float>(spec_.rms_norm_eps), last.data());
  logits->resize(rows * spec_.vocab_size);
  const kernels::MatMulJob lm_head{last.data(), rows, weights_.lm_head,
                                   logits->data()};
  kernels::MatMulBatch({&lm_head, 1}, pool_);
  if (work != nullptr) {
    work->Add({&lm_head, 1});
    work->weight_bytes +=
        n * kernels::RowBytes(weights_.embed_tokens.type, hidden,
                              weights_.embed_tokens.group_size);
  }
  return absl::OkStatus();
}

void ModelRunner::GqaAttention(int64_t l, const Batch& batch, const float* x,
                               float* out) const {
  const model::LayerWeights& layer = weights_.layers[l];
  const int64_t n = batch.n;
  kernels::ProductWork* const work = batch.work;
  const int64_t qw = spec_.q_width(), kvw = spec_.kv_width();
  const int64_t head_dim = spec_.head_dim;
  std::vector<float> q(n * qw), k(n * kvw), v(n * kvw);
  const kernels::MatMulJob qkv[] = {{x, n, layer.q, q.data()},
                                    {x, n, layer.k, k.data()},
                                    {x, n, layer.v, v.data()}};
  kernels::MatMulBatch(qkv, pool_);
  if (work != nullptr) work->Add(qkv);
  if (!layer.q_bias.empty()) {
    kernels::AddBias(q.data(), n, qw, layer.q_bias.data());
    kernels::AddBias(k.data(), n, kvw, layer.k_bias.data());
    kernels::AddBias(v.data(), n, kvw, layer.v_bias.data());
  }
  if (spec_.clip_qkv > 0) {
    const float c = static_cast<float>(spec_.clip_qkv);
    for (auto* t : {&q, &k, &v}) {
      for (float& e : *t) e = std::clamp(e, -c, c);
    }
  }
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  switch (spec_.qk_norm) {
    case model::QkNorm::kNone:
      break;
    case model::QkNorm::kPerHead:
      kernels::RmsNorm(q.data(), layer.q_norm.data(), n * spec_.num_heads,
                       head_dim, eps, q.data());
      kernels::RmsNorm(k.data(), layer.k_norm.data(), n * spec_.num_kv_heads,
                       head_dim, eps, k.data());
      break;
    case model::QkNorm::kWholeProjection:
      kernels::RmsNorm(q.data(), layer.q_norm.data(), n, qw, eps, q.data());
      kernels::RmsNorm(k.data(), layer.k_norm.data(), n, kvw, eps, k.data());
      break;
  }
  std::vector<float> cos(head_dim / 2), sin(head_dim / 2);
  for (int64_t i = 0; i < n; ++i) {
    rope_.CosSin(batch.position_of[i], cos.data(), sin.data());
    kernels::ApplyRotaryHalf(q.data() + i * qw, spec_.num_heads, head_dim,
                             cos.data(), sin.data());
    kernels::ApplyRotaryHalf(k.data() + i * kvw, spec_.num_kv_heads, head_dim,
                             cos.data(), sin.data());
    std::copy_n(k.data() + i * kvw, kvw,
                batch.cache->Key(batch.seq_of[i], l, batch.position_of[i]));
    std::copy_n(v.data() + i * kvw, kvw,
                batch.cache->Value(batch.seq_of[i], l, batch.position_of[i]));
  }
  std::vector<float> attended(n * qw);
  AttendCached(l, batch, q.data(), spec_.num_heads, spec_.num_kv_heads,
               head_dim, 1.f / std::sqrt(static_cast<float>(head_dim)),
               attended.data());

  const kernels::MatMulJob o_proj{attended.data(), n, layer.o, out};
  kernels::MatMulBatch({&o_proj, 1}, pool_);
  if (work != nullptr) work->Add({&o_proj, 1});
  if (!layer.o_bias.empty()) {
    kernels::AddBias(out, n, spec_.hidden_size, layer.o_bias.data());
  }
}

void ModelRunner::AttendCached(int64_t l, const Batch& batch, const float* q,
                               int64_t num_heads, int64_t num_kv_heads,
                               int64_t head_dim, float scale,
                               float* attended) const {
  const int64_t n = batch.n;
  const std::vector<SequenceId>& seq_of = batch.seq_of;
  const std::vector<int64_t>& position_of = batch.position_of;
  const int64_t qw = num_heads * head_dim;
  const int64_t window = spec_.SlidingWindow(l);
  // Every token's keys are in the cache before any token attends, so a
  // chunk's tokens see each other causally. With at least as many tokens as
  // threads (prefill, batched decode), work items are runs of up to
  // kQueryBlock consecutive tokens of one sequence, attended together so
  // that each key is read once per run. With fewer (decode), a token's
  // positions are split across threads and the slices merged by their
  // log-sum-exps.
  std::vector<KvCache::LayerView> views;
  std::vector<int32_t> view_of(n);
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || seq_of[i] != seq_of[i - 1]) {
      views.emplace_back();
      batch.cache->View(seq_of[i], l, &views.back());
    }
    view_of[i] = static_cast<int32_t>(views.size()) - 1;
  }
  const int threads = pool_ == nullptr ? 1 : pool_->num_threads();
  struct Item {
    // Tokens [token, token + count) over positions [first, end) (a run:
    // part < 0 and first, end unused) or a slice of one token's positions.
    int64_t token, count, first, end, part;
  };
  std::vector<Item> items;
  std::vector<int64_t> first_item(n + 1);
  int64_t parts = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t end = position_of[i] + 1;
    const int64_t first = window > 0 ? std::max<int64_t>(0, end - window) : 0;
    if (batch.work != nullptr) {
      batch.work->flops += 4.0 * num_heads * head_dim * (end - first);
    }
    first_item[i] = static_cast<int64_t>(items.size());
    if (n >= threads) {
      Item* run = items.empty() ? nullptr : &items.back();
      if (run != nullptr && run->count < kQueryBlock &&
          seq_of[run->token] == seq_of[i] &&
          position_of[run->token] + run->count == position_of[i]) {
        ++run->count;
      } else {
        items.push_back({i, 1, 0, 0, -1});
      }
      continue;
    }
    const int64_t slices =
        std::clamp<int64_t>((end - first) / kMinPositionsPerSlice, 1, threads);
    for (int64_t s = 0; s < slices; ++s) {
      items.push_back({i, 1, first + (end - first) * s / slices,
                       first + (end - first) * (s + 1) / slices,
                       slices == 1 ? -1 : parts++});
    }
  }
  first_item[n] = static_cast<int64_t>(items.size());
  std::vector<float> part_out(parts * qw), part_lse(parts * num_heads);
  const int64_t num_items = static_cast<int64_t>(items.size());
  // Later runs of a sequence attend to more positions: claimed first, they
  // leave the cheap ones to even out the end of the loop.
  ParallelFor(pool_, num_items, [&](int64_t t) {
    const Item& it = items[num_items - 1 - t];
    const float* qi = q + it.token * qw;
    const kernels::KvBlocks blocks = views[view_of[it.token]].blocks();
    if (n >= threads) {
      kernels::AttendQueryBlock(qi, it.count, num_heads, num_kv_heads, head_dim,
                                blocks, position_of[it.token], window, scale,
                                attended + it.token * qw);
    } else if (it.part < 0) {
      kernels::AttendOneQuery(qi, num_heads, num_kv_heads, head_dim, blocks,
                              it.first, it.end, scale,
                              attended + it.token * qw);
    } else {
      kernels::AttendOneQueryPartial(qi, num_heads, num_kv_heads, head_dim,
                                     blocks, it.first, it.end, scale,
                                     part_out.data() + it.part * qw,
                                     part_lse.data() + it.part * num_heads);
    }
  });
  // Merges the slices of split tokens (decode only).
  for (int64_t i = 0; i < n && n < threads; ++i) {
    const Item& it = items[first_item[i]];
    if (it.part < 0) continue;
    kernels::MergeAttention(first_item[i + 1] - first_item[i], num_heads,
                            head_dim, part_out.data() + it.part * qw,
                            part_lse.data() + it.part * num_heads,
                            attended + i * qw);
  }
}

void ModelRunner::MlaAttention(int64_t l, const Batch& batch, const float* x,
                               float* out) const {
  const model::LayerWeights& layer = weights_.layers[l];
  const model::MlaWeights& w = layer.mla;
  const model::MlaSpec& m = *spec_.mla;
  const int64_t n = batch.n, heads = spec_.num_heads;
  const int64_t qk = m.qk_head_dim(), nope = m.qk_nope_head_dim;
  const int64_t rope = m.qk_rope_head_dim, lora = m.kv_lora_rank;
  const int64_t v_dim = m.v_head_dim, row = m.cache_width();
  kernels::ProductWork* const work = batch.work;
  auto run = [&](absl::Span<const kernels::MatMulJob> jobs) {
    kernels::MatMulBatch(jobs, pool_);
    if (work != nullptr) work->Add(jobs);
  };
  // Queries [n, heads, qk] and the compressed key-value rows [n, row].
  std::vector<float> q(n * heads * qk), kv(n * row);
  if (m.q_lora_rank > 0) {
    std::vector<float> q_latent(n * m.q_lora_rank);
    const kernels::MatMulJob down[] = {{x, n, w.q_a, q_latent.data()},
                                       {x, n, w.kv_a, kv.data()}};
    run(down);
    kernels::RmsNorm(q_latent.data(), w.q_a_norm.data(), n, m.q_lora_rank,
                     kMlaNormEps, q_latent.data());
    run({{q_latent.data(), n, w.q_b, q.data()}});
  } else {
    const kernels::MatMulJob jobs[] = {{x, n, w.q, q.data()},
                                       {x, n, w.kv_a, kv.data()}};
    run(jobs);
  }
  // The cache holds the normalised latent and the rotated shared key.
  std::vector<float> cos(rope / 2), sin(rope / 2);
  for (int64_t i = 0; i < n; ++i) {
    float* c = kv.data() + i * row;
    kernels::RmsNorm(c, w.kv_a_norm.data(), 1, lora, kMlaNormEps, c);
    rope_.CosSin(batch.position_of[i], cos.data(), sin.data());
    kernels::ApplyRotaryInterleaved(c + lora, 1, rope, rope, cos.data(),
                                    sin.data());
    kernels::ApplyRotaryInterleaved(q.data() + i * heads * qk + nope, heads, qk,
                                    rope, cos.data(), sin.data());
    std::copy_n(c, row,
                batch.cache->Key(batch.seq_of[i], l, batch.position_of[i]));
  }
  // The key up-projection absorbed into the queries: head h's query in
  // latent space is [W_UK_hᵀ q_nope_h, q_pe_h], so each head attends over
  // the cached rows as one shared key-value head (values: the latent, the
  // first kv_lora_rank floats of a row).
  std::vector<float> absorbed(n * heads * row, 0.f);
  ParallelFor(pool_, heads, [&](int64_t h) {
    const int64_t first_row = h * (nope + v_dim);
    kernels::AccumulateRowProducts(q.data() + h * qk, heads * qk, n, w.kv_b,
                                   first_row, first_row + nope,
                                   absorbed.data() + h * row, heads * row);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(q.data() + (i * heads + h) * qk + nope, rope,
                  absorbed.data() + (i * heads + h) * row + lora);
    }
  });
  std::vector<float> attended(n * heads * row);
  AttendCached(l, batch, absorbed.data(), heads, /*num_kv_heads=*/1, row,
               static_cast<float>(MlaSoftmaxScale(spec_)), attended.data());
  // And the value up-projection applied to each head's attended latent.
  std::vector<float> up(n * w.kv_b.rows), values(n * heads * v_dim);
  ParallelFor(pool_, heads, [&](int64_t h) {
    std::vector<float> latent(n * lora);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(attended.data() + (i * heads + h) * row, lora,
                  latent.data() + i * lora);
    }
    const int64_t first_row = h * (nope + v_dim) + nope;
    kernels::MatMulTransposedRows(latent.data(), n, w.kv_b, first_row,
                                  first_row + v_dim, up.data());
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(up.data() + i * w.kv_b.rows + first_row, v_dim,
                  values.data() + (i * heads + h) * v_dim);
    }
  });
  if (work != nullptr) {
    work->weight_bytes += kernels::MatrixBytes(w.kv_b);
    work->flops += 2.0 * n * heads * (nope + v_dim) * lora;
  }
  run({{values.data(), n, layer.o, out}});
}

}  // namespace ringmoe::runtime

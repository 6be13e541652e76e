#include "engine/runtime/model_runner.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/moe/moe_block.h"
#include "engine/moe/routing.h"

namespace ringmoe::runtime {

using backend::Backend;
using backend::Tensor;

ModelRunner::ModelRunner(const model::ModelSpec& spec,
                         const model::ModelWeights& weights,
                         backend::Backend* backend,
                         moe::ExpertExecutor* experts, moe::ExpertUsage* usage,
                         bool route_on_backend, bool graph_steps)
    : spec_(spec),
      weights_(weights),
      backend_(backend),
      resident_experts_(weights),
      experts_(experts != nullptr ? experts : &resident_experts_),
      usage_(usage),
      route_on_backend_(route_on_backend),
      graph_steps_(graph_steps),
      rope_(spec) {
  for (const model::LayerWeights& layer : weights_.layers) {
    attention_.push_back(MakeAttention(spec_, layer));
  }
}

absl::Status CheckGreedyOutput(absl::Span<const SequenceChunk> chunks,
                               const std::vector<int32_t>* greedy_tokens) {
  if (greedy_tokens != nullptr) return absl::OkStatus();
  for (const SequenceChunk& c : chunks) {
    if (c.greedy_token) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence ", c.sequence,
          ": a chunk asks for its greedy token and the step has nowhere to "
          "put the tokens"));
    }
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::Reserve(absl::Span<const SequenceChunk> chunks,
                                  KvCache* cache) const {
  absl::flat_hash_map<SequenceId, int64_t> new_length;
  int64_t blocks = 0;
  for (const SequenceChunk& c : chunks) {
    if (c.tokens.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", c.sequence, ": empty chunk"));
    }
    if (c.greedy_token && c.all_logits) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", c.sequence,
                       ": a chunk asks for all its logits and for its greedy "
                       "token only"));
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
    RETURN_IF_ERROR(cache->Grow(seq, length));
  }
  return absl::OkStatus();
}

absl::Status ModelRunner::Forward(absl::Span<const SequenceChunk> chunks,
                                  KvCache* cache, std::vector<float>* logits,
                                  backend::Work* work, StepShare share,
                                  std::vector<int32_t>* greedy_tokens) const {
  std::vector<SequenceId> seq_of;
  std::vector<int64_t> position_of;
  std::vector<int32_t> tokens;
  std::vector<int32_t> output_rows;
  // Indices into output_rows.
  std::vector<int32_t> logits_rows, greedy_rows;
  for (const SequenceChunk& c : chunks) {
    const int64_t start = cache->Length(c.sequence);
    for (size_t i = 0; i < c.tokens.size(); ++i) {
      if (c.all_logits || i + 1 == c.tokens.size()) {
        (c.greedy_token ? greedy_rows : logits_rows)
            .push_back(static_cast<int32_t>(output_rows.size()));
        output_rows.push_back(static_cast<int32_t>(seq_of.size()));
      }
      seq_of.push_back(c.sequence);
      position_of.push_back(start + static_cast<int64_t>(i));
      tokens.push_back(c.tokens[i]);
    }
  }
  RETURN_IF_ERROR(CheckGreedyOutput(chunks, greedy_tokens));
  RETURN_IF_ERROR(Reserve(chunks, cache));

  const int64_t n = static_cast<int64_t>(seq_of.size());
  // Every layer rotates by the same positions: the tables once per step.
  const int64_t half = spec_.rotary_dim() / 2;
  std::vector<float> cos(n * half), sin(n * half);
  for (int64_t i = 0; i < n; ++i) {
    rope_.CosSin(position_of[i], cos.data() + i * half, sin.data() + i * half);
  }
  const StepInputs inputs{tokens, seq_of, position_of, output_rows,
                          cos,    sin,    share};

  // As a graph where the backend keeps one for the step's operations: a
  // replay step first (its operations only stage their arguments), then,
  // where no graph was recorded from them, the step is issued again to
  // record one (the second time they come) or to run as usual. Each pass
  // counts its own work; the one that ran is the step's.
  Backend& backend = *backend_;
  std::optional<Backend::GraphPhase> phase;
  if (UsesGraphs()) phase = Backend::GraphPhase::kReplay;
  while (true) {
    backend::Work pass_work;
    backend.set_work(work != nullptr ? &pass_work : nullptr);
    const bool in_graph = phase && backend.BeginGraphStep(*phase, n);
    absl::StatusOr<Backend::Buffer> out = EnqueueStep(inputs, cache);
    const Backend::GraphOutcome outcome =
        in_graph ? backend.EndGraphStep() : Backend::GraphOutcome::kLaunched;
    if (!out.ok() || outcome != Backend::GraphOutcome::kLaunched) {
      backend.set_work(nullptr);
      if (!out.ok()) return out.status();
      phase.reset();
      if (outcome == Backend::GraphOutcome::kRecord) {
        phase = Backend::GraphPhase::kRecord;
      }
      continue;
    }
    CopyOutputs(*out, logits_rows, greedy_rows, logits, greedy_tokens);
    backend.set_work(nullptr);
    if (work != nullptr) work->Add(pass_work);
    return backend.TakeError();
  }
}

void ModelRunner::CopyOutputs(const Tensor& out,
                              absl::Span<const int32_t> logits_rows,
                              absl::Span<const int32_t> greedy_rows,
                              std::vector<float>* logits,
                              std::vector<int32_t>* greedy_tokens) const {
  Backend& backend = *backend_;
  // The rows of `out` that `rows` names, gathered where they are not all.
  auto rows_of = [&](absl::Span<const int32_t> rows) {
    if (static_cast<int64_t>(rows.size()) == out.rows) {
      return Backend::Buffer(nullptr, out);
    }
    Backend::Buffer part =
        backend.NewTensor(static_cast<int64_t>(rows.size()), out.cols);
    backend.GatherRows(out, rows, part);
    return part;
  };
  if (!greedy_rows.empty()) {
    const Backend::Buffer from = rows_of(greedy_rows);
    const Backend::Buffer tokens = backend.NewTensor(from.tensor().rows, 1);
    backend.GreedyTokens(from, tokens);
    greedy_tokens->resize(greedy_rows.size());
    static_assert(sizeof(int32_t) == sizeof(float));
    backend.CopyToHost(tokens, reinterpret_cast<float*>(greedy_tokens->data()));
  }
  logits->resize(logits_rows.size() * out.cols);
  if (!logits_rows.empty()) {
    const Backend::Buffer from = rows_of(logits_rows);
    backend.CopyToHost(from, logits->data());
  }
}

bool ModelRunner::UsesGraphs() const {
  if (!graph_steps_ || !route_on_backend_ || usage_ != nullptr ||
      experts_->WantsPredictions()) {
    return false;
  }
  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    if (spec_.layer_is_moe[l] &&
        experts_->ExpertsInBackendMemory(static_cast<int>(l)).empty()) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<Backend::Buffer> ModelRunner::EnqueueStep(const StepInputs& in,
                                                         KvCache* cache) const {
  Backend& backend = *backend_;
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  const int64_t hidden = spec_.hidden_size;
  const int64_t half = spec_.rotary_dim() / 2;
  const Backend::Buffer cos_rows = backend.NewTensor(n, half);
  const Backend::Buffer sin_rows = backend.NewTensor(n, half);
  backend.CopyFromHost(in.cos.data(), cos_rows);
  backend.CopyFromHost(in.sin.data(), sin_rows);
  const Backend::Buffer x = backend.NewTensor(n, hidden);
  backend.Embed(weights_.embed_tokens, in.tokens, x);
  const AttentionStep step{in.seq_of, in.position_of, cache,
                           cos_rows,  sin_rows,       in.share.tokens};
  RETURN_IF_ERROR(RunLayers(step, x));

  const int64_t rows = static_cast<int64_t>(in.output_rows.size());
  const Backend::Buffer last = backend.NewTensor(rows, hidden);
  backend.GatherRows(x, in.output_rows, last);
  backend.RmsNorm(last, weights_.final_norm,
                  static_cast<float>(spec_.rms_norm_eps), last);
  Backend::Buffer out = backend.NewTensor(rows, spec_.vocab_size);
  backend.MatMul({{last, &weights_.lm_head, out, in.share.logits_rows}});
  return out;
}

absl::Status ModelRunner::ForwardWithoutTokens() const {
  experts_->BeginStep(0);
  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    if (!spec_.layer_is_moe[l]) continue;
    if (absl::Status status =
            experts_->Run(static_cast<int>(l), {}, {}, *backend_);
        !status.ok()) {
      experts_->EndStep();
      return status;
    }
  }
  experts_->EndStep();
  return backend_->TakeError();
}

absl::Status ModelRunner::RunLayers(const AttentionStep& step,
                                    const Tensor& x) const {
  Backend& backend = *backend_;
  const int64_t n = x.rows, hidden = x.cols;
  const float eps = static_cast<float>(spec_.rms_norm_eps);
  const Backend::Buffer normed = backend.NewTensor(n, hidden);
  const Backend::Buffer delta = backend.NewTensor(n, hidden);
  experts_->BeginStep(n);
  // Each residual add and the norm after it are one operation (the next
  // layer's input norm follows the feed-forward's add).
  if (spec_.num_layers > 0) {
    backend.RmsNorm(x, weights_.layers[0].input_norm, eps, normed);
  }
  for (int64_t l = 0; l < spec_.num_layers; ++l) {
    const model::LayerWeights& layer = weights_.layers[l];
    attention_[l]->Forward(step, l, normed, delta, backend);
    backend.AddRmsNorm(x, delta, layer.post_attention_norm, eps, normed);
    // The next layer's router on this layer's hidden state predicts the
    // experts it will need, so they load while this layer computes.
    if (experts_->WantsPredictions() && l + 1 < spec_.num_layers &&
        spec_.layer_is_moe[l + 1]) {
      experts_->Predict(
          static_cast<int>(l + 1),
          moe::RouteTokens(backend, normed, spec_, weights_.layers[l + 1],
                           step.batch_rows));
    }
    absl::Status status = moe::RunFeedForward(
        normed, spec_, layer, static_cast<int>(l),
        {backend_, experts_, usage_, route_on_backend_, step.batch_rows},
        delta);
    if (!status.ok()) {
      // The sequences' new KV positions hold partial results: callers must
      // release the sequences of a failed step.
      experts_->EndStep();
      return status;
    }
    if (l + 1 < spec_.num_layers) {
      backend.AddRmsNorm(x, delta, weights_.layers[l + 1].input_norm, eps,
                         normed);
    } else {
      backend.Add(x, delta);
    }
  }
  experts_->EndStep();
  return absl::OkStatus();
}

}  // namespace ringmoe::runtime

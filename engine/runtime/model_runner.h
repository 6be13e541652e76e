// ModelRunner: the decoder stack's forward pass over a batch of sequences,
// each contributing any number of new tokens (a prompt chunk or one decode
// token), reading and extending their entries in the KV cache.
#ifndef RINGMOE_ENGINE_RUNTIME_MODEL_RUNNER_H_
#define RINGMOE_ENGINE_RUNTIME_MODEL_RUNNER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/backend.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "engine/moe/expert_executor.h"
#include "engine/moe/expert_usage.h"
#include "engine/runtime/attention.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/rope.h"

namespace ringmoe::runtime {

// New tokens of one sequence, placed after the positions it already has in
// the KV cache.
struct SequenceChunk {
  SequenceId sequence = 0;
  absl::Span<const int32_t> tokens;
  // Logits for every token of the chunk; otherwise for its last token only.
  bool all_logits = false;
  // Under data-parallel attention: the rank that holds the sequence and its
  // KV cache, given by a caller that plans every rank's cache (the server's
  // scheduler) on the sequence's first chunk; -1: the engine picks one.
  int home = -1;
  // Instead of the last token's logits, only its greedy token
  // (kernels::GreedyToken of them), found where the logits lie: all a
  // caller needs for greedy decoding without penalties or log-probabilities
  // (Sampler::SamplesGreedyToken), or to discard a prompt chunk's output,
  // and a device then copies 4 bytes to the host rather than a vocabulary of
  // floats. Not with all_logits.
  bool greedy_token = false;
};

// INVALID_ARGUMENT when a chunk of `chunks` asks for its greedy token and
// there is nowhere to put it (`greedy_tokens` null). ModelRunner::Forward
// checks it, and the engine's data-parallel step before it homes anything.
absl::Status CheckGreedyOutput(absl::Span<const SequenceChunk> chunks,
                               const std::vector<int32_t>* greedy_tokens);

// Under data-parallel attention, the whole step that a rank's chunks are a
// share of: its tokens and its logits rows (0: the chunks' own). The
// rank's products and attention run as for the whole step
// (backend::Product::batch_rows), so on the CPU its rows are bitwise those
// of the whole step run in one process.
struct StepShare {
  int64_t tokens = 0;
  int64_t logits_rows = 0;
};

class ModelRunner {
 public:
  // `spec`, `weights`, `backend` (runs the step; required), `experts` (null:
  // every expert resident in `weights`) and `usage` (null: not counted)
  // must outlive the runner. `route_on_backend`: FeedForwardContext's.
  // `graph_steps`: steps whose MoE layers all route on the backend run as
  // graphs where the backend records them (Backend::BeginGraphStep).
  ModelRunner(const model::ModelSpec& spec, const model::ModelWeights& weights,
              backend::Backend* backend, moe::ExpertExecutor* experts = nullptr,
              moe::ExpertUsage* usage = nullptr, bool route_on_backend = true,
              bool graph_steps = true);
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // Runs the chunks through the model in one step. `logits`: the rows of
  // the chunks without greedy_token, in chunk order ([rows, vocab]);
  // `greedy_tokens`: one per chunk with greedy_token, in chunk order (may be
  // null when no chunk has it). Fails, with the cache unchanged, on an empty
  // chunk, a token id out of range, a sequence longer than the model's
  // maximum, or too few free KV-cache blocks. A failure to load streamed
  // weights fails the step after the cache grew: release its sequences.
  // `work`, when set, accumulates the weight bytes the step read and its
  // FLOPs (products and attention). `share`: the step these chunks are a
  // share of.
  absl::Status Forward(absl::Span<const SequenceChunk> chunks, KvCache* cache,
                       std::vector<float>* logits,
                       backend::Work* work = nullptr, StepShare share = {},
                       std::vector<int32_t>* greedy_tokens = nullptr) const;

  // A step that holds none of this process's tokens, under data-parallel
  // attention (TokenDispatchExecutor): runs no layer, but makes the expert
  // executor's calls of a step — BeginStep(0), one Run with no tasks per
  // MoE layer, EndStep — so that this rank joins every layer's exchange and
  // runs the other ranks' tokens routed to its experts.
  absl::Status ForwardWithoutTokens() const;

  const model::ModelSpec& spec() const { return spec_; }

 private:
  absl::Status Reserve(absl::Span<const SequenceChunk> chunks,
                       KvCache* cache) const;
  // A step's host inputs, per token (output_rows: the rows whose logits
  // the step returns; cos and sin [n, rotary_dim / 2]).
  struct StepInputs {
    absl::Span<const int32_t> tokens;
    absl::Span<const SequenceId> seq_of;
    absl::Span<const int64_t> position_of;
    absl::Span<const int32_t> output_rows;
    absl::Span<const float> cos;
    absl::Span<const float> sin;
    StepShare share;
  };
  // Issues every operation of the step to the backend; the logits tensor
  // ([output rows, vocab]) once they have run.
  absl::StatusOr<backend::Backend::Buffer> EnqueueStep(const StepInputs& in,
                                                       KvCache* cache) const;
  // Copies the step's outputs from `out` ([output rows, vocab]) to the host:
  // the `logits_rows` whole and the greedy tokens of the `greedy_rows`.
  void CopyOutputs(const backend::Tensor& out,
                   absl::Span<const int32_t> logits_rows,
                   absl::Span<const int32_t> greedy_rows,
                   std::vector<float>* logits,
                   std::vector<int32_t>* greedy_tokens) const;
  // Whether steps may run as backend graphs: every MoE layer routed and
  // run on the backend, nothing counted or predicted on the host.
  bool UsesGraphs() const;
  // The decoder layers over the step's hidden states x (in place).
  absl::Status RunLayers(const AttentionStep& step,
                         const backend::Tensor& x) const;

  const model::ModelSpec& spec_;
  const model::ModelWeights& weights_;
  backend::Backend* backend_;
  moe::ResidentExperts resident_experts_;
  moe::ExpertExecutor* experts_;  // never null
  moe::ExpertUsage* usage_;
  bool route_on_backend_;
  bool graph_steps_;
  Rope rope_;
  std::vector<std::unique_ptr<Attention>> attention_;  // one per layer
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_MODEL_RUNNER_H_

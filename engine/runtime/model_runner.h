// ModelRunner: the decoder stack's forward pass over a batch of sequences,
// each contributing any number of new tokens (a prompt chunk or one decode
// token), reading and extending their entries in the KV cache.
#ifndef RINGMOE_ENGINE_RUNTIME_MODEL_RUNNER_H_
#define RINGMOE_ENGINE_RUNTIME_MODEL_RUNNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "base/thread_pool.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "engine/moe/expert_executor.h"
#include "engine/moe/expert_usage.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/rope.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::runtime {

// New tokens of one sequence, placed after the positions it already has in
// the KV cache.
struct SequenceChunk {
  SequenceId sequence = 0;
  absl::Span<const int32_t> tokens;
  // Logits for every token of the chunk; otherwise for its last token only.
  bool all_logits = false;
};

class ModelRunner {
 public:
  // `spec`, `weights`, `pool` (null: single-threaded), `experts` (null:
  // every expert resident in `weights`) and `usage` (null: not counted) must
  // outlive the runner.
  ModelRunner(const model::ModelSpec& spec, const model::ModelWeights& weights,
              ThreadPool* pool = nullptr,
              moe::ExpertExecutor* experts = nullptr,
              moe::ExpertUsage* usage = nullptr);
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  // Runs the chunks through the model in one step. Logits rows come in chunk
  // order ([rows, vocab]). Fails, with the cache unchanged, on an empty
  // chunk, a token id out of range, a sequence longer than the model's
  // maximum, or too few free KV-cache blocks. A failure to load streamed
  // weights fails the step after the cache grew: release its sequences.
  // `work`, when set, accumulates the weight bytes the step read and its
  // FLOPs (products and attention).
  absl::Status Forward(absl::Span<const SequenceChunk> chunks, KvCache* cache,
                       std::vector<float>* logits,
                       kernels::ProductWork* work = nullptr) const;

  const model::ModelSpec& spec() const { return spec_; }

 private:
  // The tokens of one step and what their attention reads and extends.
  struct Batch {
    const std::vector<SequenceId>& seq_of;
    const std::vector<int64_t>& position_of;
    int64_t n;
    KvCache* cache;
    kernels::ProductWork* work;
  };

  absl::Status Reserve(absl::Span<const SequenceChunk> chunks,
                       KvCache* cache) const;
  // out[n, hidden] = layer l's attention of x[n, hidden]: grouped-query
  // attention, or multi-head latent attention (spec.mla). Both write the
  // batch's keys and values into the cache first.
  void GqaAttention(int64_t l, const Batch& batch, const float* x,
                    float* out) const;
  void MlaAttention(int64_t l, const Batch& batch, const float* x,
                    float* out) const;
  // attended[n, num_heads * head_dim] = each token's queries q[n, num_heads
  // * head_dim] attending causally (within the sliding window) over its
  // sequence's cached keys and values of layer l, on the thread pool.
  void AttendCached(int64_t l, const Batch& batch, const float* q,
                    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                    float scale, float* attended) const;

  const model::ModelSpec& spec_;
  const model::ModelWeights& weights_;
  ThreadPool* pool_;
  moe::ResidentExperts resident_experts_;
  moe::ExpertExecutor* experts_;  // never null
  moe::ExpertUsage* usage_;
  Rope rope_;
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_MODEL_RUNNER_H_

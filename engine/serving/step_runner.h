// What the scheduler needs of a model: its shape, its KV cache, its
// tokenizer and one forward step. The scheduler plans steps and applies
// their outputs; a StepRunner runs them. EngineStepRunner runs them on the
// engine; tests run the scheduler on a model of their own.
#ifndef RINGMOE_ENGINE_SERVING_STEP_RUNNER_H_
#define RINGMOE_ENGINE_SERVING_STEP_RUNNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/model_runner.h"
#include "engine/tokenizer/tokenizer.h"

namespace ringmoe::serving {

class StepRunner {
 public:
  virtual ~StepRunner() = default;

  virtual int64_t vocab_size() const = 0;
  // Positions a sequence may hold (prompt and generated tokens).
  virtual int64_t context_tokens() const = 0;
  // The cache the steps write; the scheduler admits and preempts by its
  // free blocks and releases finished sequences from it.
  virtual runtime::KvCache& kv_cache() = 0;
  // The KV caches the steps write: several under data-parallel attention
  // (one per rank, Engine::num_kv_caches), where the scheduler places each
  // sequence in one (SequenceChunk::home on its first chunk) and plans its
  // blocks there. All have kv_cache()'s configuration; cache 0 is
  // kv_cache().
  virtual int num_kv_caches() const { return 1; }
  virtual runtime::KvCache& kv_cache_of(int cache) { return kv_cache(); }
  // Frees sequence `id`'s cache blocks (finished, cancelled, preempted, or
  // to be recomputed): the scheduler releases only through here, so a
  // decorator sees every release (BroadcastingStepRunner sends them to the
  // other ranks of an expert-parallel job).
  virtual void Release(runtime::SequenceId id) { kv_cache().Release(id); }
  // Null when the model has none (no text, no stop strings).
  virtual const tokenizer::Tokenizer* tokenizer() const = 0;
  virtual absl::Span<const int32_t> eos_token_ids() const = 0;
  // Feeds each chunk's tokens to its sequence (growing its cache) and
  // writes `logits` [rows, vocab_size()]: the next-token logits after the
  // last token of each chunk without greedy_token, in chunk order; and
  // `greedy_tokens`: the greedy next token of each chunk with it
  // (runtime::SequenceChunk::greedy_token), in chunk order.
  virtual absl::Status Step(absl::Span<const runtime::SequenceChunk> chunks,
                            std::vector<float>* logits,
                            std::vector<int32_t>* greedy_tokens) = 0;
};

class EngineStepRunner final : public StepRunner {
 public:
  explicit EngineStepRunner(runtime::Engine* engine) : engine_(engine) {}

  int64_t vocab_size() const override { return engine_->spec().vocab_size; }
  int64_t context_tokens() const override {
    return engine_->spec().max_position_embeddings;
  }
  runtime::KvCache& kv_cache() override { return engine_->kv_cache(); }
  const tokenizer::Tokenizer* tokenizer() const override {
    return engine_->tokenizer();
  }
  absl::Span<const int32_t> eos_token_ids() const override {
    return engine_->eos_token_ids();
  }
  absl::Status Step(absl::Span<const runtime::SequenceChunk> chunks,
                    std::vector<float>* logits,
                    std::vector<int32_t>* greedy_tokens) override {
    return engine_->Step(chunks, logits, /*work=*/nullptr, greedy_tokens);
  }
  int num_kv_caches() const override { return engine_->num_kv_caches(); }
  runtime::KvCache& kv_cache_of(int cache) override {
    return engine_->kv_cache_of(cache);
  }
  void Release(runtime::SequenceId id) override { engine_->Release(id); }

 private:
  runtime::Engine* const engine_;
};

}  // namespace ringmoe::serving

#endif  // RINGMOE_ENGINE_SERVING_STEP_RUNNER_H_

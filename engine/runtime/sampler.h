// Per-sequence token sampling: logit penalties, temperature, top-k, top-p,
// min-p and a seeded draw.

#ifndef RINGMOE_ENGINE_RUNTIME_SAMPLER_H_
#define RINGMOE_ENGINE_RUNTIME_SAMPLER_H_

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ringmoe::runtime {

// A request's decoding parameters. The defaults switch every filter off and
// sample from the model's unmodified distribution.
struct SamplingParams {
  // 0 selects greedy decoding (argmax, lowest token id on ties). Values
  // below 1e-5 are treated as 0: dividing by them overflows the logits.
  float temperature = 1.0f;
  // Keep only the k most likely tokens; 0 = off. Values above the
  // vocabulary size are accepted and mean "off".
  int32_t top_k = 0;
  // Nucleus sampling: keep the smallest set of most likely tokens whose
  // probability sum reaches top_p. 1 = off.
  float top_p = 1.0f;
  // Drop tokens whose probability is below min_p times the largest
  // probability. 0 = off.
  float min_p = 0.0f;
  // Hugging Face semantics, once per distinct token id seen in the prompt or
  // the generated tokens: a positive logit is divided by the penalty, any
  // other logit multiplied by it. 1 = off.
  float repetition_penalty = 1.0f;
  // OpenAI semantics over generated tokens only (not the prompt):
  // logit -= presence_penalty * [count > 0] + frequency_penalty * count.
  // Both lie in [-2, 2]; negative values encourage repetition.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Fixes the sequence's random stream. Without it the sampler seeds itself
  // from std::random_device.
  std::optional<uint64_t> seed;
  // Generation ends with FinishReason::kLength after this many tokens.
  int32_t max_new_tokens = 256;
  // Tokens that end generation (in addition to the model's EOS tokens).
  std::vector<int32_t> stop_token_ids;
  // Strings that end generation when they appear in the generated text; the
  // text returned to the client stops before them.
  std::vector<std::string> stop_strings;
  // Keep generating past the model's EOS tokens (stop_token_ids still stop).
  bool ignore_eos = false;
};

// Checks every field against its documented range. `vocab_size` bounds
// stop_token_ids. The message names the offending field.
absl::Status Validate(const SamplingParams& params, int vocab_size);

// Log-probabilities of a sampled token, for the server's logprobs output.
struct SampledLogprobs {
  // Under the distribution actually sampled from: after penalties,
  // temperature and the top-k/top-p/min-p truncation (renormalised). For
  // greedy decoding, the log-softmax of the penalised logits.
  float processed = 0.0f;
  // Log-softmax of the logits as the model produced them.
  float raw = 0.0f;
};

// Samples the tokens of one sequence. It owns its random generator, so a
// seeded sequence draws the same tokens however it is batched with others:
// each non-greedy Sample() call consumes exactly one 64-bit draw from a
// std::mt19937_64, whose output the C++ standard fixes.
//
// Not thread-safe; a sequence is sampled by one thread at a time.
class Sampler {
 public:
  // Fails when Validate(params, vocab_size) does.
  static absl::StatusOr<Sampler> Create(const SamplingParams& params,
                                        int vocab_size);

  Sampler(Sampler&&) = default;
  Sampler& operator=(Sampler&&) = default;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Picks the next token from `logits` (one per vocabulary entry; the
  // padded vocabulary of the model is fine). Penalties see `prompt_ids` and
  // `generated_ids`; ids outside the logits are ignored. NaN logits count as
  // -inf, i.e. the token is never chosen. When `logprobs` is non-null it
  // receives the chosen token's log-probabilities (the raw one costs an extra
  // pass over the logits).
  //
  // Returns -1 when no token can be chosen: `logits` is empty or holds
  // nothing above -inf. The model output is then unusable and the caller
  // should fail the request.
  int32_t Sample(absl::Span<const float> logits,
                 absl::Span<const int32_t> prompt_ids,
                 absl::Span<const int32_t> generated_ids,
                 SampledLogprobs* logprobs = nullptr);

  // Whether Sample() returns kernels::GreedyToken(logits) whatever the
  // history and consumes no draw: greedy decoding without penalties. A
  // caller that wants no log-probabilities may then find that token where
  // the logits lie (runtime::SequenceChunk::greedy_token) and skip Sample().
  bool SamplesGreedyToken() const;

  const SamplingParams& params() const { return params_; }
  // The seed in use (drawn at creation when params().seed is unset), so that
  // a run can be reported and reproduced.
  uint64_t seed() const { return seed_; }

 private:
  Sampler(const SamplingParams& params, uint64_t seed, int vocab_size);

  bool Penalised() const {
    return params_.repetition_penalty != 1.0f ||
           params_.presence_penalty != 0.0f ||
           params_.frequency_penalty != 0.0f;
  }
  void ApplyPenalties(absl::Span<const int32_t> prompt_ids,
                      absl::Span<const int32_t> generated_ids);
  int32_t SampleFromWork(float max_logit, SampledLogprobs* logprobs);
  double UniformDouble();

  SamplingParams params_;
  uint64_t seed_;
  std::mt19937_64 rng_;
  // Buffers reused across calls so a step allocates nothing once warm.
  std::vector<float> work_;      // sanitised, penalised logits
  std::vector<int32_t> marks_;   // per-token scratch, all 0 between calls
  std::vector<int32_t> ids_;     // surviving tokens, ascending
  std::vector<double> weights_;  // their unnormalised probabilities
  std::vector<std::pair<float, uint32_t>> top_k_heap_;  // (logit, id)
  std::vector<double> select_mass_;  // top-k/top-p selection scratch
  std::vector<uint32_t> select_members_;
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_SAMPLER_H_

// When a sequence stops, and how much of its text may be streamed so far.

#ifndef RINGMOE_ENGINE_RUNTIME_STOP_CRITERIA_H_
#define RINGMOE_ENGINE_RUNTIME_STOP_CRITERIA_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/runtime/sampler.h"

namespace ringmoe::runtime {

enum class FinishReason {
  kNone,    // keep generating
  kStop,    // EOS, a stop token or a stop string
  kLength,  // max_new_tokens reached
};

// The outcome of one generated token.
struct StopUpdate {
  FinishReason finish_reason = FinishReason::kNone;
  // Text that is now safe to stream, possibly empty. Concatenating every
  // update's text (plus Flush()) gives the final output.
  std::string text;
  // What ended the sequence when finish_reason is kStop: the EOS or stop
  // token, or the stop string.
  std::optional<int32_t> stop_token_id;
  std::optional<std::string> stop_string;
};

// Per-sequence stop detection for a streaming server: call Update() once per
// generated token with the text that token added to the detokenised output.
//
// Text that could be the start of a stop string is held back until the next
// tokens decide it; a stop string spanning several tokens is therefore cut
// out whole, and the text before it is all the client ever sees. The text of
// the EOS or stop token that ends a sequence is not emitted. A stop on the
// last allowed token reports kStop rather than kLength, since that is what
// ended the text.
//
// Stop strings are matched on bytes; with UTF-8 text and stop strings the
// held-back split always falls on a character boundary.
class StopCriteria {
 public:
  // `params` should have passed Validate(); empty stop strings are ignored.
  // With params.ignore_eos, `eos_token_ids` do not stop the sequence.
  StopCriteria(const SamplingParams& params,
               absl::Span<const int32_t> eos_token_ids);

  // Records one generated token. FailedPrecondition once the sequence has
  // finished.
  absl::StatusOr<StopUpdate> Update(int32_t token_id,
                                    absl::string_view token_text);

  // Releases the held-back text when the sequence ends for a reason of the
  // caller's (abort, context length); no more Update() calls are expected.
  std::string Flush();

  bool finished() const { return finish_reason_ != FinishReason::kNone; }
  FinishReason finish_reason() const { return finish_reason_; }
  int num_generated_tokens() const { return num_generated_tokens_; }

 private:
  // Length of the longest suffix of held_ that is a proper prefix of a stop
  // string.
  size_t PartialMatchLength() const;

  int max_new_tokens_;
  std::vector<int32_t> stopping_ids_;  // stop tokens, plus EOS unless ignored
  std::vector<std::string> stop_strings_;
  std::string held_;  // generated text not yet emitted
  int num_generated_tokens_ = 0;
  FinishReason finish_reason_ = FinishReason::kNone;
};

// Printable name ("none", "stop", "length"), as OpenAI's API spells them.
absl::string_view FinishReasonName(FinishReason reason);

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_STOP_CRITERIA_H_

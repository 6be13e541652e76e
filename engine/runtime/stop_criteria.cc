#include "engine/runtime/stop_criteria.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

namespace ringmoe::runtime {

StopCriteria::StopCriteria(const SamplingParams& params,
                           absl::Span<const int32_t> eos_token_ids)
    : max_new_tokens_(params.max_new_tokens),
      stopping_ids_(params.stop_token_ids) {
  if (!params.ignore_eos) {
    stopping_ids_.insert(stopping_ids_.end(), eos_token_ids.begin(),
                         eos_token_ids.end());
  }
  for (const std::string& s : params.stop_strings) {
    if (!s.empty()) stop_strings_.push_back(s);
  }
}

absl::StatusOr<StopUpdate> StopCriteria::Update(int32_t token_id,
                                                absl::string_view token_text) {
  if (finished()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "StopCriteria::Update(token %d) after the sequence finished with "
        "reason \"%s\"",
        token_id, FinishReasonName(finish_reason_)));
  }
  ++num_generated_tokens_;
  StopUpdate update;

  if (std::find(stopping_ids_.begin(), stopping_ids_.end(), token_id) !=
      stopping_ids_.end()) {
    // Held text was only a possible stop-string start; with the sequence
    // over it is plain output. The stop token's own text is dropped.
    update.text = std::move(held_);
    held_.clear();
    update.stop_token_id = token_id;
    update.finish_reason = finish_reason_ = FinishReason::kStop;
    return update;
  }

  held_.append(token_text.data(), token_text.size());

  // Everything emitted so far has no suffix that starts a stop string, so
  // any match begins inside held_. The earliest-starting match wins: the
  // text before it is what the model wrote before any stop string.
  size_t match_pos = std::string::npos;
  const std::string* match = nullptr;
  for (const std::string& s : stop_strings_) {
    const size_t pos = held_.find(s);
    if (pos < match_pos || (pos != std::string::npos && pos == match_pos &&
                            s.size() < match->size())) {
      match_pos = pos;
      match = &s;
    }
  }
  if (match != nullptr) {
    update.text = held_.substr(0, match_pos);
    held_.clear();
    update.stop_string = *match;
    update.finish_reason = finish_reason_ = FinishReason::kStop;
    return update;
  }

  if (num_generated_tokens_ >= max_new_tokens_) {
    update.text = std::move(held_);
    held_.clear();
    update.finish_reason = finish_reason_ = FinishReason::kLength;
    return update;
  }

  const size_t emit = held_.size() - PartialMatchLength();
  update.text = held_.substr(0, emit);
  held_.erase(0, emit);
  return update;
}

std::string StopCriteria::Flush() {
  std::string text = std::move(held_);
  held_.clear();
  return text;
}

size_t StopCriteria::PartialMatchLength() const {
  const absl::string_view held = held_;
  size_t longest = 0;
  for (const std::string& s : stop_strings_) {
    // Proper prefixes only: a whole stop string would have matched above.
    for (size_t len = std::min(held.size(), s.size() - 1); len > longest;
         --len) {
      if (absl::EndsWith(held, absl::string_view(s).substr(0, len))) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

absl::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
  }
  return "unknown";
}

}  // namespace ringmoe::runtime

#include "engine/tokenizer/stream_decoder.h"

#include "absl/strings/match.h"
#include "absl/types/span.h"
#include "engine/tokenizer/utf8.h"

namespace ringmoe::tokenizer {
namespace {

// A UTF-8 character is at most 4 bytes and every token is at least one byte,
// so text followed by this many more ids can no longer change.
constexpr size_t kMaxIncompleteIds = 4;

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer,
                             bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::DecodeRange(size_t end) const {
  return tokenizer_.Decode(absl::MakeConstSpan(ids_).first(end),
                           skip_special_tokens_);
}

void StreamDecoder::Advance(size_t new_read) {
  ids_.erase(ids_.begin(), ids_.begin() + read_);
  read_ = new_read - read_;
}

std::string StreamDecoder::Push(int32_t id) {
  // Decode drops these before its decoder chain sees them, so dropping them
  // here changes nothing and keeps them out of the window.
  if (skip_special_tokens_ && tokenizer_.IsSpecial(id)) return "";
  ids_.push_back(id);
  return Emit(/*flush=*/false);
}

std::string StreamDecoder::Flush() {
  std::string text = Emit(/*flush=*/true);
  ids_.clear();
  read_ = 0;
  return text;
}

std::string StreamDecoder::Emit(bool flush) {
  std::string context = DecodeRange(read_);
  std::string text = DecodeRange(ids_.size());
  if (!absl::StartsWith(text, context)) {
    // The new ids changed text already returned, which only a byte-fallback
    // run turning invalid does. Go on without the old context.
    ids_.erase(ids_.begin(), ids_.begin() + read_);
    read_ = 0;
    context.clear();
    text = DecodeRange(ids_.size());
  }
  // Ids that add no text stay out of the context: a context that decodes to
  // nothing would let SentencePiece's leading-space strip hit the new text.
  if (text.size() == context.size()) return "";
  if (flush || !absl::EndsWith(text, kReplacementCharacter)) {
    Advance(ids_.size());
    return text.substr(context.size());
  }
  // The trailing U+FFFD may be a character still arriving. Once enough ids
  // follow it, the text before them is final even if it ends in U+FFFD.
  if (ids_.size() - read_ <= kMaxIncompleteIds) return "";
  const size_t stable_end = ids_.size() - kMaxIncompleteIds;
  const std::string stable = DecodeRange(stable_end);
  if (stable.size() == context.size() || !absl::StartsWith(stable, context) ||
      !absl::StartsWith(text, stable)) {
    return "";
  }
  Advance(stable_end);
  return stable.substr(context.size());
}

}  // namespace ringmoe::tokenizer

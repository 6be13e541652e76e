#ifndef RINGMOE_ENGINE_TOKENIZER_PRE_TOKENIZER_H_
#define RINGMOE_ENGINE_TOKENIZER_PRE_TOKENIZER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/json.h"

// PCRE2's compiled pattern type (pcre2_code with 8-bit code units).
struct pcre2_real_code_8;

namespace ringmoe::tokenizer {

// Rewrites a pattern from Hugging Face's regex dialect (Oniguruma, Ruby
// syntax) into PCRE2 syntax where the two differ: Oniguruma's \s is Unicode
// White_Space (U+0085 in, U+FEFF out) and its \h is a hex digit.
std::string TranslateOnigurumaPattern(absl::string_view pattern);

// A compiled PCRE2 pattern (UTF and UCP mode, JIT when available).
// Thread-safe: matching allocates its own match data.
class Regex {
 public:
  // `pattern` is in Oniguruma syntax, or a literal string when `literal`.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(
      absl::string_view pattern, bool literal);
  ~Regex();

  // The non-empty, non-overlapping matches in valid UTF-8 `text`, left to
  // right, as [begin, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> FindAll(absl::string_view text) const;

 private:
  explicit Regex(pcre2_real_code_8* code) : code_(code) {}
  pcre2_real_code_8* code_;
};

// tokenizer.json's "pre_tokenizer": a Sequence of Split (behavior Isolated)
// pre-tokenizers, optionally ending with ByteLevel without its own regex.
class PreTokenizer {
 public:
  // `json` is the "pre_tokenizer" member, possibly null (the whole text is one
  // pre-token).
  static absl::StatusOr<PreTokenizer> FromJson(const json::Json& json,
                                               absl::string_view path);

  // Appends the pre-tokens of `text`, views into it, to `pieces`.
  void Split(absl::string_view text,
             std::vector<absl::string_view>* pieces) const;

  // Whether pre-tokens are written in GPT-2's byte alphabet before BPE.
  bool byte_level() const { return byte_level_; }

 private:
  absl::Status Append(const json::Json& json, absl::string_view path);

  std::vector<std::shared_ptr<const Regex>> splits_;
  bool byte_level_ = false;
};

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_PRE_TOKENIZER_H_

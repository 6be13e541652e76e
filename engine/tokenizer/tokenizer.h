#ifndef RINGMOE_ENGINE_TOKENIZER_TOKENIZER_H_
#define RINGMOE_ENGINE_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ringmoe::tokenizer {

// A Hugging Face tokenizer.json tokenizer: byte-level BPE (Qwen3, DeepSeek-V3,
// gpt-oss) or SentencePiece-style BPE with byte fallback (Mistral, Mixtral).
// Encode and Decode give what the Rust `tokenizers` library gives, plus the
// BOS that Python transformers adds for Llama tokenizer classes (DeepSeek-V3).
// tests/testdata/tokenizers/README.md describes the exact semantics.
//
// Thread-safe: every method may be called from several threads at once.
class Tokenizer {
 public:
  // Loads `tokenizer_json_path` and, when it exists, tokenizer_config.json in
  // the same directory (bos_token, eos_token, add_bos_token, add_eos_token,
  // tokenizer_class). Errors name the file and the offending field.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(
      const std::string& tokenizer_json_path);

  // Loads `model_dir`/tokenizer.json (and tokenizer_config.json).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(
      const std::string& model_dir);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // The ids of `text`. Added tokens written in the text (special or not) are
  // always recognized; `add_special_tokens` adds the post-processor's tokens
  // (BOS). Invalid UTF-8 is decoded lossily (U+FFFD per maximal invalid
  // subpart) before tokenizing.
  std::vector<int32_t> Encode(std::string_view text,
                              bool add_special_tokens = true) const;

  // The text of `ids`, always valid UTF-8. Ids that name no token (negative,
  // too large, or gaps in the vocabulary) are skipped, as Hugging Face does.
  std::string Decode(absl::Span<const int32_t> ids,
                     bool skip_special_tokens = false) const;

  // One past the largest id of the vocabulary and the added tokens.
  int vocab_size() const;

  // From tokenizer_config.json's bos_token / eos_token.
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;

  // Whether `id` is an added token marked special (skip_special_tokens drops
  // exactly these).
  bool IsSpecial(int32_t id) const;

  // The id of a vocabulary or added token, written as in tokenizer.json
  // ("Ġthe" for byte-level vocabularies).
  std::optional<int32_t> TokenToId(std::string_view token) const;

  // The inverse of TokenToId; "" for ids that name no token.
  std::string IdToToken(int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

// Loads from `path`, which is either a model directory or a tokenizer.json
// file (what a command-line flag naming "the tokenizer" accepts).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(
    const std::string& path);

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_TOKENIZER_H_

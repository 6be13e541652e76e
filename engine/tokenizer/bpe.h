#ifndef RINGMOE_ENGINE_TOKENIZER_BPE_H_
#define RINGMOE_ENGINE_TOKENIZER_BPE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/json.h"

namespace ringmoe::tokenizer {

// `value` (found at `path`) as a token id: a non-negative 32-bit integer.
absl::StatusOr<int32_t> ParseTokenId(const json::Json& value,
                                     absl::string_view path);

// tokenizer.json's "model" of type BPE: vocabulary, ranked merges, byte
// fallback (SentencePiece style), unk handling and ignore_merges.
class BpeModel {
 public:
  static absl::StatusOr<BpeModel> FromJson(const json::Json& json,
                                           absl::string_view path);

  // Appends the ids of `word`, which is written in the vocabulary's alphabet
  // (byte-level text for byte-level models). Repeatedly merges the
  // lowest-ranked adjacent pair, leftmost first on ties, in O(n log n).
  void Encode(absl::string_view word, std::vector<int32_t>* ids) const;

  std::optional<int32_t> TokenToId(absl::string_view token) const;

  // nullptr for ids that are not in the vocabulary.
  const std::string* IdToToken(int32_t id) const;

  // One past the largest id in the vocabulary.
  int32_t id_end() const { return static_cast<int32_t>(id_to_token_.size()); }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  absl::Status LoadMerges(const json::Json& merges, absl::string_view path);
  // Appends the initial symbols of `word`: one per character, or per byte
  // when byte fallback applies, or unk.
  void AppendSymbols(absl::string_view word, std::vector<int32_t>* ids) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  absl::flat_hash_map<uint64_t, Merge> merges_;
  // Ids of the one-character tokens below U+0200, which covers the whole
  // byte-level alphabet; -1 where there is none.
  std::array<int32_t, 0x200> small_char_ids_;
  // Ids of the "<0xNN>" tokens when byte fallback is on.
  std::array<int32_t, 256> byte_ids_;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  std::optional<int32_t> unk_id_;
};

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_BPE_H_

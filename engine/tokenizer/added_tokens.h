#ifndef RINGMOE_ENGINE_TOKENIZER_ADDED_TOKENS_H_
#define RINGMOE_ENGINE_TOKENIZER_ADDED_TOKENS_H_

#include <bitset>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"

namespace ringmoe::tokenizer {

// Finds added tokens in text: exact, case-sensitive, leftmost-longest (the
// aho-corasick LeftmostLongest semantics of Hugging Face's AddedVocabulary).
// A byte trie; a scan costs O(text length x longest token) at worst.
class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin;
    size_t length;
    int32_t id;
  };

  // A later Add of the same content replaces the id.
  void Add(absl::string_view content, int32_t id);

  bool empty() const { return node_ids_.size() <= 1; }

  // The leftmost match starting at or after `from`, the longest among those.
  std::optional<Match> Find(absl::string_view text, size_t from) const;

 private:
  static uint64_t EdgeKey(int32_t node, uint8_t byte) {
    return (static_cast<uint64_t>(node) << 8) | byte;
  }

  // Node 0 is the root; node_ids_[n] is the token ending at node n, or -1.
  std::vector<int32_t> node_ids_ = {-1};
  absl::flat_hash_map<uint64_t, int32_t> edges_;
  std::bitset<256> first_bytes_;
};

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_ADDED_TOKENS_H_

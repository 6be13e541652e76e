#include "engine/tokenizer/added_tokens.h"

namespace ringmoe::tokenizer {

void AddedTokenMatcher::Add(absl::string_view content, int32_t id) {
  if (content.empty()) return;
  first_bytes_.set(static_cast<uint8_t>(content[0]));
  int32_t node = 0;
  for (const char c : content) {
    const auto [it, inserted] =
        edges_.try_emplace(EdgeKey(node, static_cast<uint8_t>(c)),
                           static_cast<int32_t>(node_ids_.size()));
    if (inserted) node_ids_.push_back(-1);
    node = it->second;
  }
  node_ids_[node] = id;
}

std::optional<AddedTokenMatcher::Match> AddedTokenMatcher::Find(
    absl::string_view text, size_t from) const {
  for (size_t begin = from; begin < text.size(); ++begin) {
    if (!first_bytes_.test(static_cast<uint8_t>(text[begin]))) continue;
    std::optional<Match> longest;
    int32_t node = 0;
    for (size_t pos = begin; pos < text.size(); ++pos) {
      const auto it =
          edges_.find(EdgeKey(node, static_cast<uint8_t>(text[pos])));
      if (it == edges_.end()) break;
      node = it->second;
      if (node_ids_[node] >= 0) {
        longest = Match{begin, pos + 1 - begin, node_ids_[node]};
      }
    }
    if (longest.has_value()) return longest;
  }
  return std::nullopt;
}

}  // namespace ringmoe::tokenizer

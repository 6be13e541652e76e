#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/tokenizer/utf8.h"

namespace ringmoe::tokenizer {

using json::FieldError;
using json::FieldPath;
using json::GetList;
using json::GetMember;
using json::GetOptionalBool;
using json::GetOptionalString;
using json::GetString;
using json::IndexPath;
using json::Json;

namespace {

// A merge candidate: the pair starting at symbol `pos`. It is stale once
// either side has changed, which the ids detect.
struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t left_id;
  int32_t right_id;
  int32_t merged_id;
  bool operator>(const Candidate& other) const {
    return rank != other.rank ? rank > other.rank : pos > other.pos;
  }
};

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
};

absl::Status CheckUnsupportedString(const Json& json, absl::string_view key,
                                    absl::string_view path) {
  ASSIGN_OR_RETURN(const std::optional<std::string> value,
                   GetOptionalString(json, key, path));
  if (value.has_value() && !value->empty()) {
    return absl::UnimplementedError(absl::StrCat(FieldPath(path, key),
                                                 ": non-empty value \"", *value,
                                                 "\" is not supported"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int32_t> ParseTokenId(const Json& value,
                                     absl::string_view path) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
      value.get<int64_t>() > INT32_MAX) {
    return FieldError(path, "expected a non-negative 32-bit integer id");
  }
  return value.get<int32_t>();
}

absl::StatusOr<BpeModel> BpeModel::FromJson(const Json& json,
                                            absl::string_view path) {
  ASSIGN_OR_RETURN(const std::string type, GetString(json, "type", path));
  if (type != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat(FieldPath(path, "type"), ": model '", type,
                     "' is not supported (only BPE)"));
  }
  RETURN_IF_ERROR(
      CheckUnsupportedString(json, "continuing_subword_prefix", path));
  RETURN_IF_ERROR(CheckUnsupportedString(json, "end_of_word_suffix", path));
  if (const auto it = json.find("dropout");
      it != json.end() && !it->is_null() &&
      !(it->is_number() && it->get<double>() == 0.0)) {
    return absl::UnimplementedError(absl::StrCat(
        FieldPath(path, "dropout"), ": BPE dropout is not supported"));
  }

  BpeModel model;
  ASSIGN_OR_RETURN(const std::optional<bool> byte_fallback,
                   GetOptionalBool(json, "byte_fallback", path));
  ASSIGN_OR_RETURN(const std::optional<bool> ignore_merges,
                   GetOptionalBool(json, "ignore_merges", path));
  ASSIGN_OR_RETURN(const std::optional<bool> fuse_unk,
                   GetOptionalBool(json, "fuse_unk", path));
  model.byte_fallback_ = byte_fallback.value_or(false);
  model.ignore_merges_ = ignore_merges.value_or(false);
  model.fuse_unk_ = fuse_unk.value_or(false);

  const std::string vocab_path = FieldPath(path, "vocab");
  ASSIGN_OR_RETURN(const Json* vocab, GetMember(json, "vocab", path));
  if (!vocab->is_object()) {
    return FieldError(vocab_path, "expected an object of token: id");
  }
  model.vocab_.reserve(vocab->size());
  int32_t max_id = -1;
  for (const auto& [token, id_json] : vocab->items()) {
    ASSIGN_OR_RETURN(const int32_t id,
                     ParseTokenId(id_json, FieldPath(vocab_path, token)));
    model.vocab_[token] = id;
    max_id = std::max(max_id, id);
  }
  // Ids number the tokens, with gaps at most: a table is kept per id, and
  // an id of 2^31 would make it gigabytes.
  constexpr int64_t kMaxGap = int64_t{1} << 20;
  if (max_id > static_cast<int64_t>(vocab->size()) + kMaxGap) {
    return FieldError(vocab_path,
                      absl::StrCat("id ", max_id, " is more than 2^20 past the ",
                                   vocab->size(), " tokens"));
  }
  model.id_to_token_.resize(static_cast<size_t>(max_id) + 1);
  model.has_id_.resize(static_cast<size_t>(max_id) + 1);
  for (const auto& [token, id] : model.vocab_) {
    model.id_to_token_[id] = token;
    model.has_id_[id] = true;
  }

  model.small_char_ids_.fill(-1);
  for (char32_t cp = 0; cp < model.small_char_ids_.size(); ++cp) {
    std::string token;
    AppendUtf8(cp, &token);
    if (const auto it = model.vocab_.find(token); it != model.vocab_.end()) {
      model.small_char_ids_[cp] = it->second;
    }
  }
  model.byte_ids_.fill(-1);
  if (model.byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      const auto it = model.vocab_.find(absl::StrFormat("<0x%02X>", b));
      if (it == model.vocab_.end()) {
        return FieldError(vocab_path,
                          absl::StrFormat("byte_fallback is on but there is no "
                                          "token <0x%02X>",
                                          b));
      }
      model.byte_ids_[b] = it->second;
    }
  }

  ASSIGN_OR_RETURN(const std::optional<std::string> unk,
                   GetOptionalString(json, "unk_token", path));
  if (unk.has_value() && !unk->empty()) {
    const auto it = model.vocab_.find(*unk);
    if (it == model.vocab_.end()) {
      return FieldError(FieldPath(path, "unk_token"),
                        absl::StrCat("\"", *unk, "\" is not in the vocab"));
    }
    model.unk_id_ = it->second;
  }

  ASSIGN_OR_RETURN(const Json* merges, GetList(json, "merges", path));
  RETURN_IF_ERROR(model.LoadMerges(*merges, FieldPath(path, "merges")));
  return model;
}

absl::Status BpeModel::LoadMerges(const Json& merges, absl::string_view path) {
  merges_.reserve(merges.size());
  std::string left, right;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& merge = merges[rank];
    // Two serializations: "a b" (older files) and ["a", "b"].
    if (merge.is_string()) {
      const std::string& text = merge.get_ref<const std::string&>();
      const size_t space = text.find(' ');
      if (space == std::string::npos) {
        return FieldError(
            IndexPath(path, rank),
            absl::StrCat("expected \"left right\", got \"", text, "\""));
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return FieldError(IndexPath(path, rank),
                        "expected \"left right\" or [\"left\", \"right\"]");
    }
    const auto left_it = vocab_.find(left);
    const auto right_it = vocab_.find(right);
    const auto merged_it = vocab_.find(absl::StrCat(left, right));
    if (left_it == vocab_.end() || right_it == vocab_.end() ||
        merged_it == vocab_.end()) {
      return FieldError(
          IndexPath(path, rank),
          absl::StrCat("\"", left, "\", \"", right, "\" or their merge \"",
                       left, right, "\" is not in the vocab"));
    }
    // As in Hugging Face, a repeated pair takes its last rank.
    merges_[PairKey(left_it->second, right_it->second)] = {
        static_cast<int32_t>(rank), merged_it->second};
  }
  return absl::OkStatus();
}

std::optional<int32_t> BpeModel::TokenToId(absl::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= id_end() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::AppendSymbols(absl::string_view word,
                             std::vector<int32_t>* ids) const {
  bool previous_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    size_t length = Utf8SequenceLength(word, pos);
    // Words are valid UTF-8; stepping over a stray byte keeps the loop finite
    // if one is not.
    if (length == 0) length = 1;
    const absl::string_view character = word.substr(pos, length);
    pos += length;
    int32_t id = -1;
    const char32_t cp = length == 1 ? static_cast<uint8_t>(character[0])
                                    : DecodeUtf8At(character, 0, length);
    if (cp < small_char_ids_.size()) {
      id = small_char_ids_[cp];
    } else if (const auto it = vocab_.find(character); it != vocab_.end()) {
      id = it->second;
    }
    if (id >= 0) {
      ids->push_back(id);
      previous_unk = false;
    } else if (byte_fallback_) {
      for (const char c : character) {
        ids->push_back(byte_ids_[static_cast<uint8_t>(c)]);
      }
      previous_unk = false;
    } else if (unk_id_.has_value()) {
      if (!(fuse_unk_ && previous_unk)) ids->push_back(*unk_id_);
      previous_unk = true;
    }
    // With neither byte fallback nor unk, Hugging Face drops the character.
  }
}

void BpeModel::Encode(absl::string_view word, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const size_t first = ids->size();
  AppendSymbols(word, ids);
  const int32_t count = static_cast<int32_t>(ids->size() - first);
  if (count < 2) return;

  std::vector<Symbol> symbols(count);
  for (int32_t i = 0; i < count; ++i) {
    symbols[i] = {(*ids)[first + i], i - 1, i + 1 < count ? i + 1 : -1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push_candidate = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const auto it = merges_.find(PairKey(symbols[pos].id, symbols[next].id));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, pos, symbols[pos].id, symbols[next].id,
                it->second.merged_id});
  };
  for (int32_t i = 0; i + 1 < count; ++i) push_candidate(i);

  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.id != top.left_id || left.next < 0 ||
        symbols[left.next].id != top.right_id) {
      continue;
    }
    Symbol& right = symbols[left.next];
    left.id = top.merged_id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    right.id = -1;
    if (left.prev >= 0) push_candidate(left.prev);
    push_candidate(top.pos);
  }

  ids->resize(first);
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    ids->push_back(symbols[i].id);
  }
}

}  // namespace ringmoe::tokenizer

#include "engine/tokenizer/tokenizer.h"

#include <array>
#include <filesystem>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/decoder.h"
#include "engine/tokenizer/normalizer.h"
#include "engine/tokenizer/pre_tokenizer.h"
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
using json::ParseFile;

namespace {

// Pre-token -> ids. Text repeats words heavily, so most pre-tokens skip BPE.
// Sharded so that threads encoding at once rarely wait on each other; a full
// shard is simply emptied, which bounds memory without LRU bookkeeping.
class PreTokenCache {
 public:
  // Longer pre-tokens are rare and would make entries large.
  static constexpr size_t kMaxKeyBytes = 256;

  bool Lookup(absl::string_view key, std::vector<int32_t>* ids) const {
    const Shard& shard = ShardFor(key);
    absl::ReaderMutexLock lock(&shard.mu);
    const auto it = shard.map.find(key);
    if (it == shard.map.end()) return false;
    ids->insert(ids->end(), it->second.begin(), it->second.end());
    return true;
  }

  void Insert(absl::string_view key, absl::Span<const int32_t> ids) {
    Shard& shard = ShardFor(key);
    absl::MutexLock lock(&shard.mu);
    if (shard.map.size() >= kMaxEntriesPerShard) shard.map.clear();
    shard.map.try_emplace(key, ids.begin(), ids.end());
  }

 private:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 8192;

  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> map
        ABSL_GUARDED_BY(mu);
  };

  Shard& ShardFor(absl::string_view key) const {
    return shards_[absl::Hash<absl::string_view>{}(key) % kShards];
  }

  mutable std::array<Shard, kShards> shards_;
};

enum class IdKind : uint8_t { kNone, kModel, kAdded, kSpecial };

absl::Status Annotate(const absl::Status& status, absl::string_view file) {
  return absl::Status(status.code(),
                      absl::StrCat(file, ": ", status.message()));
}

const Json& MemberOrNull(const Json& object, const char* key) {
  static const Json* const null = new Json(nullptr);
  const auto it = object.find(key);
  return it == object.end() ? *null : *it;
}

// A token in tokenizer_config.json: "text", {"content": "text", ...} or null.
absl::StatusOr<std::optional<std::string>> GetConfigToken(const Json& config,
                                                          const char* key) {
  const Json& value = MemberOrNull(config, key);
  if (value.is_null()) return std::nullopt;
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_object() || !value.contains("content")) {
    return FieldError(key, "expected a string, null or {\"content\": ...}");
  }
  ASSIGN_OR_RETURN(std::string content, GetString(value, "content", key));
  return content;
}

}  // namespace

struct Tokenizer::Impl {
  BpeModel model;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Decoder decoder;
  // Added tokens with normalized: false are found in the raw text; the others
  // in the normalized text, as Hugging Face's AddedVocabulary does.
  AddedTokenMatcher raw_added;
  AddedTokenMatcher normalized_added;
  absl::flat_hash_map<int32_t, std::string> added_contents;
  absl::flat_hash_map<std::string, int32_t> added_ids;
  std::vector<IdKind> id_kinds;
  // What the post-processor puts around a single sequence.
  std::vector<int32_t> prefix_ids;
  std::vector<int32_t> suffix_ids;
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;
  mutable PreTokenCache cache;

  // Errors name the field; the caller adds the file.
  absl::Status Load(const Json& json);
  absl::Status LoadAddedTokens(const Json& list);
  absl::Status LoadPostProcessor(const Json& json, absl::string_view path);
  absl::Status CheckPostProcessorId(int32_t id) const;
  // tokenizer_config.json.
  absl::Status LoadConfig(const Json& config);
  absl::StatusOr<int32_t> RequireId(const std::string& token,
                                    absl::string_view path) const;
  std::optional<int32_t> TokenToId(absl::string_view token) const;

  void EncodeSegment(absl::string_view segment,
                     std::vector<int32_t>* ids) const;
  void EncodeNormalized(absl::string_view text,
                        std::vector<int32_t>* ids) const;
  void EncodeWord(absl::string_view word, std::vector<int32_t>* ids) const;
};

namespace {

// Calls `encode` on the text between added tokens and appends the ids of the
// added tokens themselves.
template <typename EncodeFn>
void SplitOnAddedTokens(const AddedTokenMatcher& matcher,
                        absl::string_view text, std::vector<int32_t>* ids,
                        const EncodeFn& encode) {
  size_t pos = 0;
  while (pos < text.size()) {
    const std::optional<AddedTokenMatcher::Match> match =
        matcher.empty() ? std::nullopt : matcher.Find(text, pos);
    const size_t end = match.has_value() ? match->begin : text.size();
    if (end > pos) encode(text.substr(pos, end - pos));
    if (!match.has_value()) return;
    ids->push_back(match->id);
    pos = match->begin + match->length;
  }
}

}  // namespace

absl::Status Tokenizer::Impl::Load(const Json& json) {
  if (!json.is_object()) return FieldError("", "expected an object");
  ASSIGN_OR_RETURN(const Json* model_json, GetMember(json, "model", ""));
  ASSIGN_OR_RETURN(model, BpeModel::FromJson(*model_json, "model"));
  ASSIGN_OR_RETURN(
      normalizer,
      Normalizer::FromJson(MemberOrNull(json, "normalizer"), "normalizer"));
  ASSIGN_OR_RETURN(pre_tokenizer,
                   PreTokenizer::FromJson(MemberOrNull(json, "pre_tokenizer"),
                                          "pre_tokenizer"));
  ASSIGN_OR_RETURN(decoder,
                   Decoder::FromJson(MemberOrNull(json, "decoder"), "decoder"));
  id_kinds.assign(model.id_end(), IdKind::kNone);
  for (int32_t id = 0; id < model.id_end(); ++id) {
    if (model.IdToToken(id) != nullptr) id_kinds[id] = IdKind::kModel;
  }
  RETURN_IF_ERROR(LoadAddedTokens(MemberOrNull(json, "added_tokens")));
  RETURN_IF_ERROR(LoadPostProcessor(MemberOrNull(json, "post_processor"),
                                    "post_processor"));
  for (const int32_t id : prefix_ids) RETURN_IF_ERROR(CheckPostProcessorId(id));
  for (const int32_t id : suffix_ids) RETURN_IF_ERROR(CheckPostProcessorId(id));
  return absl::OkStatus();
}

absl::Status Tokenizer::Impl::CheckPostProcessorId(int32_t id) const {
  if (static_cast<size_t>(id) >= id_kinds.size() ||
      id_kinds[id] == IdKind::kNone) {
    return FieldError("post_processor",
                      absl::StrCat("id ", id, " names no token"));
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::Impl::LoadAddedTokens(const Json& list) {
  constexpr absl::string_view kPath = "added_tokens";
  if (list.is_null()) return absl::OkStatus();
  if (!list.is_array()) return FieldError(kPath, "expected a list");
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = IndexPath(kPath, i);
    const Json& token = list[i];
    ASSIGN_OR_RETURN(const Json* id_json, GetMember(token, "id", path));
    ASSIGN_OR_RETURN(const int32_t id,
                     ParseTokenId(*id_json, FieldPath(path, "id")));
    // Added tokens extend the model's vocabulary, not jump past it: a
    // table is kept per id, and an id of 2^31 would make it gigabytes.
    constexpr int64_t kMaxGap = int64_t{1} << 20;
    if (id > static_cast<int64_t>(id_kinds.size()) + kMaxGap) {
      return FieldError(
          FieldPath(path, "id"),
          absl::StrCat(id, " is more than 2^20 past the vocabulary's ",
                       id_kinds.size(), " ids"));
    }
    ASSIGN_OR_RETURN(const std::string content,
                     GetString(token, "content", path));
    if (content.empty()) return FieldError(FieldPath(path, "content"), "empty");
    ASSIGN_OR_RETURN(const std::optional<bool> special_option,
                     GetOptionalBool(token, "special", path));
    const bool special = special_option.value_or(false);
    ASSIGN_OR_RETURN(const std::optional<bool> normalized_option,
                     GetOptionalBool(token, "normalized", path));
    const bool normalized = normalized_option.value_or(!special);
    for (const char* option : {"lstrip", "rstrip", "single_word"}) {
      ASSIGN_OR_RETURN(const std::optional<bool> value,
                       GetOptionalBool(token, option, path));
      if (value.value_or(false)) {
        return absl::UnimplementedError(
            absl::StrCat(FieldPath(path, option),
                         ": true is not supported (token \"", content, "\")"));
      }
    }
    // Without a normalizer both kinds of added token see the same text.
    (normalized && !normalizer.empty() ? normalized_added : raw_added)
        .Add(content, id);
    added_ids[content] = id;
    added_contents[id] = content;
    if (static_cast<size_t>(id) >= id_kinds.size()) {
      id_kinds.resize(static_cast<size_t>(id) + 1, IdKind::kNone);
    }
    id_kinds[id] = special ? IdKind::kSpecial : IdKind::kAdded;
  }
  return absl::OkStatus();
}

std::optional<int32_t> Tokenizer::Impl::TokenToId(
    absl::string_view token) const {
  if (const auto it = added_ids.find(token); it != added_ids.end()) {
    return it->second;
  }
  return model.TokenToId(token);
}

absl::StatusOr<int32_t> Tokenizer::Impl::RequireId(
    const std::string& token, absl::string_view path) const {
  const std::optional<int32_t> id = TokenToId(token);
  if (!id.has_value()) {
    return FieldError(
        path, absl::StrCat("token \"", token, "\" is not in the vocabulary"));
  }
  return *id;
}

absl::Status Tokenizer::Impl::LoadPostProcessor(const Json& json,
                                                absl::string_view path) {
  if (json.is_null()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const std::string type, GetString(json, "type", path));
  // ByteLevel as a post-processor only adjusts offsets.
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, GetList(json, "processors", path));
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(LoadPostProcessor(
          (*list)[i], IndexPath(FieldPath(path, "processors"), i)));
    }
    return absl::OkStatus();
  }
  if (type != "TemplateProcessing") {
    return absl::UnimplementedError(absl::StrCat(FieldPath(path, "type"),
                                                 ": post-processor '", type,
                                                 "' is not supported"));
  }
  const std::string single_path = FieldPath(path, "single");
  const std::string specials_path = FieldPath(path, "special_tokens");
  ASSIGN_OR_RETURN(const Json* single, GetList(json, "single", path));
  ASSIGN_OR_RETURN(const Json* specials,
                   GetMember(json, "special_tokens", path));
  bool seen_sequence = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const Json& item = (*single)[i];
    const std::string item_path = IndexPath(single_path, i);
    if (item.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    ASSIGN_OR_RETURN(const Json* special,
                     GetMember(item, "SpecialToken", item_path));
    ASSIGN_OR_RETURN(
        const std::string name,
        GetString(*special, "id", FieldPath(item_path, "SpecialToken")));
    const std::string entry_path = FieldPath(specials_path, name);
    ASSIGN_OR_RETURN(const Json* entry,
                     GetMember(*specials, name, specials_path));
    ASSIGN_OR_RETURN(const Json* ids, GetList(*entry, "ids", entry_path));
    for (const Json& id_json : *ids) {
      ASSIGN_OR_RETURN(const int32_t id,
                       ParseTokenId(id_json, FieldPath(entry_path, "ids")));
      (seen_sequence ? suffix_ids : prefix_ids).push_back(id);
    }
  }
  return absl::OkStatus();
}

absl::Status Tokenizer::Impl::LoadConfig(const Json& config) {
  if (!config.is_object()) return FieldError("", "expected an object");
  ASSIGN_OR_RETURN(const std::optional<std::string> bos,
                   GetConfigToken(config, "bos_token"));
  ASSIGN_OR_RETURN(const std::optional<std::string> eos,
                   GetConfigToken(config, "eos_token"));
  if (bos.has_value()) {
    ASSIGN_OR_RETURN(bos_id, RequireId(*bos, "bos_token"));
  }
  if (eos.has_value()) {
    ASSIGN_OR_RETURN(eos_id, RequireId(*eos, "eos_token"));
  }

  // Python transformers' LlamaTokenizerFast rebuilds the post-processor from
  // add_bos_token / add_eos_token, whatever tokenizer.json says. DeepSeek-V3
  // relies on it: its tokenizer.json adds no BOS, its config asks for one.
  ASSIGN_OR_RETURN(const std::optional<std::string> tokenizer_class,
                   GetOptionalString(config, "tokenizer_class"));
  if (tokenizer_class != "LlamaTokenizer" &&
      tokenizer_class != "LlamaTokenizerFast") {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const std::optional<bool> add_bos_option,
                   GetOptionalBool(config, "add_bos_token"));
  ASSIGN_OR_RETURN(const std::optional<bool> add_eos_option,
                   GetOptionalBool(config, "add_eos_token"));
  const bool add_bos = add_bos_option.value_or(true);
  const bool add_eos = add_eos_option.value_or(false);
  if (add_bos && !bos_id.has_value()) {
    return FieldError("add_bos_token", "true but there is no bos_token");
  }
  if (add_eos && !eos_id.has_value()) {
    return FieldError("add_eos_token", "true but there is no eos_token");
  }
  prefix_ids.clear();
  suffix_ids.clear();
  if (add_bos) prefix_ids.push_back(*bos_id);
  if (add_eos) suffix_ids.push_back(*eos_id);
  return absl::OkStatus();
}

void Tokenizer::Impl::EncodeSegment(absl::string_view segment,
                                    std::vector<int32_t>* ids) const {
  if (normalizer.empty()) {
    EncodeNormalized(segment, ids);
    return;
  }
  const std::string normalized = normalizer.Normalize(segment);
  SplitOnAddedTokens(
      normalized_added, normalized, ids,
      [&](absl::string_view text) { EncodeNormalized(text, ids); });
}

void Tokenizer::Impl::EncodeNormalized(absl::string_view text,
                                       std::vector<int32_t>* ids) const {
  std::vector<absl::string_view> words;
  pre_tokenizer.Split(text, &words);
  for (const absl::string_view word : words) EncodeWord(word, ids);
}

void Tokenizer::Impl::EncodeWord(absl::string_view word,
                                 std::vector<int32_t>* ids) const {
  const bool cacheable = word.size() <= PreTokenCache::kMaxKeyBytes;
  if (cacheable && cache.Lookup(word, ids)) return;
  const size_t first = ids->size();
  if (pre_tokenizer.byte_level()) {
    std::string mapped;
    mapped.reserve(word.size() * 2);
    AppendByteLevel(word, &mapped);
    model.Encode(mapped, ids);
  } else {
    model.Encode(word, ids);
  }
  if (cacheable) {
    cache.Insert(word, absl::MakeConstSpan(*ids).subspan(first));
  }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(
    const std::string& tokenizer_json_path) {
  ASSIGN_OR_RETURN(const Json json, ParseFile(tokenizer_json_path));
  auto impl = std::make_unique<Impl>();
  if (absl::Status s = impl->Load(json); !s.ok()) {
    return Annotate(s, tokenizer_json_path);
  }
  const std::string config_path =
      (std::filesystem::path(tokenizer_json_path).parent_path() /
       "tokenizer_config.json")
          .string();
  std::error_code error;
  if (std::filesystem::exists(config_path, error)) {
    ASSIGN_OR_RETURN(const Json config, ParseFile(config_path));
    if (absl::Status s = impl->LoadConfig(config); !s.ok()) {
      return Annotate(s, config_path);
    }
  }
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(
    const std::string& model_dir) {
  return FromFile(
      (std::filesystem::path(model_dir) / "tokenizer.json").string());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(
    const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    return Tokenizer::FromDirectory(path);
  }
  return Tokenizer::FromFile(path);
}

std::vector<int32_t> Tokenizer::Encode(std::string_view input,
                                       bool add_special_tokens) const {
  absl::string_view text(input.data(), input.size());
  std::string repaired;
  if (!IsValidUtf8(text)) {
    repaired = LossyUtf8(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = impl_->prefix_ids;
  SplitOnAddedTokens(
      impl_->raw_added, text, &ids,
      [&](absl::string_view segment) { impl_->EncodeSegment(segment, &ids); });
  if (add_special_tokens) {
    ids.insert(ids.end(), impl_->suffix_ids.begin(), impl_->suffix_ids.end());
  }
  return ids;
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids,
                              bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_kinds.size()) continue;
    switch (impl_->id_kinds[id]) {
      case IdKind::kNone:
        break;
      case IdKind::kModel:
        tokens.push_back(*impl_->model.IdToToken(id));
        break;
      case IdKind::kSpecial:
        if (skip_special_tokens) break;
        [[fallthrough]];
      case IdKind::kAdded:
        tokens.push_back(impl_->added_contents.at(id));
        break;
    }
  }
  return impl_->decoder.Decode(std::move(tokens));
}

int Tokenizer::vocab_size() const {
  return static_cast<int>(impl_->id_kinds.size());
}

std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_id; }

std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos_id; }

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->id_kinds.size() &&
         impl_->id_kinds[id] == IdKind::kSpecial;
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  return impl_->TokenToId(absl::string_view(token.data(), token.size()));
}

std::string Tokenizer::IdToToken(int32_t id) const {
  if (const auto it = impl_->added_contents.find(id);
      it != impl_->added_contents.end()) {
    return it->second;
  }
  const std::string* token = impl_->model.IdToToken(id);
  return token == nullptr ? "" : *token;
}

}  // namespace ringmoe::tokenizer

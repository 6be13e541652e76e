#include "engine/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/tokenizer/utf8.h"

namespace ringmoe::tokenizer {

using json::FieldError;
using json::FieldPath;
using json::GetList;
using json::GetMember;
using json::GetOptionalBool;
using json::GetString;
using json::IndexPath;
using json::Json;

namespace {

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

}  // namespace

std::string TranslateOnigurumaPattern(absl::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    // Escapes are copied as pairs, so "\\s" (a backslash, then 's') stays.
    const char escaped = pattern[++i];
    switch (escaped) {
      case 's':
        out.append("\\p{White_Space}");
        break;
      case 'S':
        out.append("\\P{White_Space}");
        break;
      case 'h':
        out.append("\\p{ASCII_Hex_Digit}");
        break;
      case 'H':
        out.append("\\P{ASCII_Hex_Digit}");
        break;
      default:
        out.push_back('\\');
        out.push_back(escaped);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(absl::string_view pattern,
                                                      bool literal) {
  const std::string translated =
      literal ? std::string(pattern) : TranslateOnigurumaPattern(pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2 rejects UCP with LITERAL, and a literal needs no classes anyway.
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                    translated.size(), options, &error, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(
        absl::StrCat("cannot compile regex /", pattern, "/ (as PCRE2 /",
                     translated, "/) at offset ", error_offset, ": ",
                     reinterpret_cast<const char*>(message)));
  }
  // Without JIT support matching still works, only slower.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Regex>(new Regex(code));
}

Regex::~Regex() { pcre2_code_free(code_); }

std::vector<std::pair<size_t, size_t>> Regex::FindAll(
    absl::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(
      pcre2_match_data_create_from_pattern(code_, nullptr));
  if (data == nullptr) return matches;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    int rc = pcre2_match(code_, subject, text.size(), start, PCRE2_NO_UTF_CHECK,
                         data.get(), nullptr);
    // The JIT's fixed stack can overflow on long inputs; the interpreter
    // keeps its backtracking state on the heap.
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code_, subject, text.size(), start,
                       PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.get(), nullptr);
    }
    // No match, or a resource limit: the rest of the text stays unsplit.
    if (rc < 0) break;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0];
    const size_t end = ovector[1];
    if (end == begin) {
      // Empty matches produce no pre-token; step over one character.
      const size_t length = Utf8SequenceLength(text, begin);
      start = begin + (length == 0 ? 1 : length);
      continue;
    }
    matches.emplace_back(begin, end);
    start = end;
  }
  return matches;
}

absl::StatusOr<PreTokenizer> PreTokenizer::FromJson(const Json& json,
                                                    absl::string_view path) {
  PreTokenizer pre_tokenizer;
  if (!json.is_null()) RETURN_IF_ERROR(pre_tokenizer.Append(json, path));
  return pre_tokenizer;
}

absl::Status PreTokenizer::Append(const Json& json, absl::string_view path) {
  ASSIGN_OR_RETURN(const std::string type, GetString(json, "type", path));
  if (byte_level_) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": nothing may follow a ByteLevel pre-tokenizer"));
  }
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, GetList(json, "pretokenizers", path));
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(
          Append((*list)[i], IndexPath(FieldPath(path, "pretokenizers"), i)));
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    ASSIGN_OR_RETURN(const std::string behavior,
                     GetString(json, "behavior", path));
    ASSIGN_OR_RETURN(const std::optional<bool> invert,
                     GetOptionalBool(json, "invert", path));
    if (behavior != "Isolated" || invert.value_or(false)) {
      return absl::UnimplementedError(
          absl::StrCat(path,
                       ": only Split with behavior Isolated and "
                       "invert false is supported"));
    }
    const std::string pattern_path = FieldPath(path, "pattern");
    ASSIGN_OR_RETURN(const Json* pattern, GetMember(json, "pattern", path));
    const bool literal = pattern->contains("String");
    ASSIGN_OR_RETURN(
        const std::string text,
        GetString(*pattern, literal ? "String" : "Regex", pattern_path));
    absl::StatusOr<std::unique_ptr<Regex>> regex =
        Regex::Compile(text, literal);
    if (!regex.ok()) return FieldError(pattern_path, regex.status().message());
    splits_.push_back(*std::move(regex));
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(const std::optional<bool> use_regex,
                     GetOptionalBool(json, "use_regex", path));
    ASSIGN_OR_RETURN(const std::optional<bool> add_prefix_space,
                     GetOptionalBool(json, "add_prefix_space", path));
    if (use_regex.value_or(true) || add_prefix_space.value_or(true)) {
      return absl::UnimplementedError(
          absl::StrCat(path,
                       ": ByteLevel pre-tokenizer needs use_regex and "
                       "add_prefix_space false (split with a Split "
                       "pre-tokenizer before it instead)"));
    }
    byte_level_ = true;
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(FieldPath(path, "type"),
                                               ": pre-tokenizer '", type,
                                               "' is not supported"));
}

void PreTokenizer::Split(absl::string_view text,
                         std::vector<absl::string_view>* pieces) const {
  if (text.empty()) return;
  std::vector<absl::string_view> current = {text};
  std::vector<absl::string_view> next;
  for (const auto& regex : splits_) {
    next.clear();
    for (const absl::string_view piece : current) {
      size_t previous = 0;
      for (const auto& [begin, end] : regex->FindAll(piece)) {
        if (begin > previous) {
          next.push_back(piece.substr(previous, begin - previous));
        }
        next.push_back(piece.substr(begin, end - begin));
        previous = end;
      }
      if (previous < piece.size()) next.push_back(piece.substr(previous));
    }
    current.swap(next);
  }
  pieces->insert(pieces->end(), current.begin(), current.end());
}

}  // namespace ringmoe::tokenizer

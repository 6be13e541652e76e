#include "engine/tokenizer/decoder.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/utf8.h"

namespace ringmoe::tokenizer {

using json::FieldError;
using json::FieldPath;
using json::GetList;
using json::GetMember;
using json::GetString;
using json::IndexPath;
using json::Json;

namespace {

// The byte of a "<0xNN>" token.
std::optional<uint8_t> ParseByteToken(absl::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') {
    return std::nullopt;
  }
  int value = 0;
  if (!absl::SimpleHexAtoi(token.substr(3, 2), &value)) return std::nullopt;
  return static_cast<uint8_t>(value);
}

std::vector<std::string> DecodeByteLevel(std::vector<std::string> tokens) {
  std::string bytes;
  for (const std::string& token : tokens) {
    // Tokens outside the alphabet (some added tokens) are their own text.
    if (!AppendFromByteLevel(token, &bytes)) bytes.append(token);
  }
  std::vector<std::string> out;
  out.push_back(LossyUtf8(bytes));
  return out;
}

std::vector<std::string> DecodeByteFallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;
  size_t run_length = 0;
  const auto flush_run = [&] {
    if (run_length == 0) return;
    // Unlike the lossy UTF-8 decoding elsewhere, an invalid run becomes one
    // U+FFFD per byte, valid bytes included: that is the reference's rule.
    if (IsValidUtf8(run)) {
      out.push_back(run);
    } else {
      for (size_t i = 0; i < run_length; ++i) {
        out.emplace_back(kReplacementCharacter);
      }
    }
    run.clear();
    run_length = 0;
  };
  for (std::string& token : tokens) {
    if (const std::optional<uint8_t> byte = ParseByteToken(token)) {
      run.push_back(static_cast<char>(*byte));
      ++run_length;
      continue;
    }
    flush_run();
    out.push_back(std::move(token));
  }
  flush_run();
  return out;
}

void StripToken(const std::string& content, int start, int stop,
                std::string* token) {
  size_t begin = 0;
  for (int i = 0;
       i < start && token->compare(begin, content.size(), content) == 0; ++i) {
    begin += content.size();
  }
  size_t end = token->size();
  for (int i = 0;
       i < stop && end >= begin + content.size() &&
       token->compare(end - content.size(), content.size(), content) == 0;
       ++i) {
    end -= content.size();
  }
  *token = token->substr(begin, end - begin);
}

}  // namespace

absl::StatusOr<Decoder> Decoder::FromJson(const Json& json,
                                          absl::string_view path) {
  Decoder decoder;
  if (!json.is_null()) RETURN_IF_ERROR(Append(json, path, &decoder.steps_));
  return decoder;
}

absl::Status Decoder::Append(const Json& json, absl::string_view path,
                             std::vector<Step>* steps) {
  ASSIGN_OR_RETURN(const std::string type, GetString(json, "type", path));
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, GetList(json, "decoders", path));
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(
          Append((*list)[i], IndexPath(FieldPath(path, "decoders"), i), steps));
    }
    return absl::OkStatus();
  }
  // ByteLevel's options (add_prefix_space, trim_offsets, use_regex) only
  // affect offsets, never the decoded text.
  if (type == "ByteLevel") {
    steps->push_back({Step::Kind::kByteLevel});
    return absl::OkStatus();
  }
  if (type == "ByteFallback") {
    steps->push_back({Step::Kind::kByteFallback});
    return absl::OkStatus();
  }
  if (type == "Fuse") {
    steps->push_back({Step::Kind::kFuse});
    return absl::OkStatus();
  }
  if (type == "Replace") {
    const std::string pattern_path = FieldPath(path, "pattern");
    ASSIGN_OR_RETURN(const Json* pattern, GetMember(json, "pattern", path));
    if (!pattern->contains("String")) {
      return absl::UnimplementedError(
          absl::StrCat(pattern_path,
                       ": only {\"String\": ...} Replace "
                       "patterns are supported"));
    }
    ASSIGN_OR_RETURN(std::string literal,
                     GetString(*pattern, "String", pattern_path));
    if (literal.empty()) return FieldError(pattern_path, "empty pattern");
    ASSIGN_OR_RETURN(std::string content, GetString(json, "content", path));
    steps->push_back(
        {Step::Kind::kReplace, std::move(literal), std::move(content)});
    return absl::OkStatus();
  }
  if (type == "Strip") {
    ASSIGN_OR_RETURN(std::string content, GetString(json, "content", path));
    if (content.empty()) {
      return FieldError(FieldPath(path, "content"), "empty content");
    }
    Step step{Step::Kind::kStrip, "", std::move(content)};
    for (const auto& [key, field] :
         {std::pair{"start", &step.start}, std::pair{"stop", &step.stop}}) {
      ASSIGN_OR_RETURN(const Json* value, GetMember(json, key, path));
      if (!value->is_number_unsigned() || value->get<uint64_t>() > 1024) {
        return FieldError(FieldPath(path, key), "expected a small count");
      }
      *field = value->get<int>();
    }
    steps->push_back(std::move(step));
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      FieldPath(path, "type"), ": decoder '", type, "' is not supported"));
}

std::string Decoder::Decode(std::vector<std::string> tokens) const {
  if (steps_.empty()) return absl::StrJoin(tokens, " ");
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kByteLevel:
        tokens = DecodeByteLevel(std::move(tokens));
        break;
      case Step::Kind::kByteFallback:
        tokens = DecodeByteFallback(std::move(tokens));
        break;
      case Step::Kind::kFuse: {
        std::string fused = absl::StrJoin(tokens, "");
        tokens.assign(1, std::move(fused));
        break;
      }
      case Step::Kind::kReplace:
        for (std::string& token : tokens) {
          absl::StrReplaceAll({{step.pattern, step.content}}, &token);
        }
        break;
      case Step::Kind::kStrip:
        for (std::string& token : tokens) {
          StripToken(step.content, step.start, step.stop, &token);
        }
        break;
    }
  }
  return absl::StrJoin(tokens, "");
}

}  // namespace ringmoe::tokenizer

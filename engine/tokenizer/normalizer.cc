#include "engine/tokenizer/normalizer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "unicode/bytestream.h"
#include "unicode/stringpiece.h"

namespace ringmoe::tokenizer {

using json::FieldError;
using json::FieldPath;
using json::GetList;
using json::GetMember;
using json::GetString;
using json::IndexPath;
using json::Json;

namespace {

absl::StatusOr<const icu::Normalizer2*> GetUnicodeNormalizer(
    absl::string_view type, absl::string_view path) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  if (type == "NFC") {
    normalizer = icu::Normalizer2::getNFCInstance(status);
  } else if (type == "NFD") {
    normalizer = icu::Normalizer2::getNFDInstance(status);
  } else if (type == "NFKC") {
    normalizer = icu::Normalizer2::getNFKCInstance(status);
  } else {
    normalizer = icu::Normalizer2::getNFKDInstance(status);
  }
  if (U_FAILURE(status)) {
    return absl::InternalError(absl::StrCat(path, ": ICU cannot load ", type,
                                            ": ", u_errorName(status)));
  }
  return normalizer;
}

bool IsAscii(absl::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<Normalizer> Normalizer::FromJson(const Json& json,
                                                absl::string_view path) {
  Normalizer normalizer;
  if (!json.is_null()) RETURN_IF_ERROR(Append(json, path, &normalizer.steps_));
  return normalizer;
}

absl::Status Normalizer::Append(const Json& json, absl::string_view path,
                                std::vector<Step>* steps) {
  ASSIGN_OR_RETURN(const std::string type, GetString(json, "type", path));
  if (type == "Sequence") {
    ASSIGN_OR_RETURN(const Json* list, GetList(json, "normalizers", path));
    for (size_t i = 0; i < list->size(); ++i) {
      RETURN_IF_ERROR(Append(
          (*list)[i], IndexPath(FieldPath(path, "normalizers"), i), steps));
    }
    return absl::OkStatus();
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    ASSIGN_OR_RETURN(const icu::Normalizer2* unicode,
                     GetUnicodeNormalizer(type, path));
    steps->push_back({Step::Kind::kUnicode, unicode, "", ""});
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string prepend, GetString(json, "prepend", path));
    steps->push_back({Step::Kind::kPrepend, nullptr, "", std::move(prepend)});
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
    steps->push_back({Step::Kind::kReplace, nullptr, std::move(literal),
                      std::move(content)});
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      FieldPath(path, "type"), ": normalizer '", type, "' is not supported"));
}

std::string Normalizer::Normalize(absl::string_view text) const {
  std::string current(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Step::Kind::kUnicode: {
        // All four forms leave ASCII alone; most text is ASCII.
        if (IsAscii(current)) break;
        std::string normalized;
        icu::StringByteSink<std::string> sink(&normalized);
        UErrorCode status = U_ZERO_ERROR;
        step.unicode->normalizeUTF8(
            0, icu::StringPiece(current.data(), current.size()), sink, nullptr,
            status);
        // The input is valid UTF-8, so ICU can only fail on allocation; the
        // text is then left as it was.
        if (U_SUCCESS(status)) current = std::move(normalized);
        break;
      }
      case Step::Kind::kPrepend:
        // Hugging Face prepends only to non-empty text: "" stays "".
        if (!current.empty()) current.insert(0, step.content);
        break;
      case Step::Kind::kReplace:
        current = absl::StrReplaceAll(current, {{step.pattern, step.content}});
        break;
    }
  }
  return current;
}

}  // namespace ringmoe::tokenizer

#include "engine/tokenizer/json_util.h"

#include "absl/strings/str_cat.h"

namespace ringmoe::tokenizer {

std::string FieldPath(absl::string_view parent, absl::string_view key) {
  return parent.empty() ? std::string(key) : absl::StrCat(parent, ".", key);
}

std::string IndexPath(absl::string_view parent, size_t index) {
  return absl::StrCat(parent, "[", index, "]");
}

absl::Status FieldError(absl::string_view path, absl::string_view problem) {
  return absl::InvalidArgumentError(
      absl::StrCat(path.empty() ? "document root" : path, ": ", problem));
}

absl::StatusOr<const Json*> GetMember(const Json& object, absl::string_view key,
                                      absl::string_view path) {
  if (!object.is_object()) return FieldError(path, "expected an object");
  const auto it = object.find(std::string(key));
  if (it == object.end()) return FieldError(FieldPath(path, key), "missing");
  return &*it;
}

absl::StatusOr<const Json*> GetList(const Json& object, absl::string_view key,
                                    absl::string_view path) {
  absl::StatusOr<const Json*> member = GetMember(object, key, path);
  if (member.ok() && !(*member)->is_array()) {
    return FieldError(FieldPath(path, key), "expected a list");
  }
  return member;
}

absl::StatusOr<std::string> GetString(const Json& object, absl::string_view key,
                                      absl::string_view path) {
  absl::StatusOr<const Json*> member = GetMember(object, key, path);
  if (!member.ok()) return member.status();
  if (!(*member)->is_string()) {
    return FieldError(FieldPath(path, key), "expected a string");
  }
  return (*member)->get<std::string>();
}

absl::StatusOr<std::string> GetOptionalString(const Json& object,
                                              absl::string_view key,
                                              absl::string_view path,
                                              absl::string_view fallback) {
  if (!object.is_object()) return FieldError(path, "expected an object");
  const auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) return std::string(fallback);
  if (!it->is_string()) {
    return FieldError(FieldPath(path, key), "expected a string or null");
  }
  return it->get<std::string>();
}

absl::StatusOr<bool> GetOptionalBool(const Json& object, absl::string_view key,
                                     absl::string_view path, bool fallback) {
  if (!object.is_object()) return FieldError(path, "expected an object");
  const auto it = object.find(std::string(key));
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    return FieldError(FieldPath(path, key), "expected true or false");
  }
  return it->get<bool>();
}

absl::StatusOr<int32_t> GetId(const Json& value, absl::string_view path) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
      value.get<int64_t>() > INT32_MAX) {
    return FieldError(path, "expected a non-negative 32-bit integer id");
  }
  return value.get<int32_t>();
}

}  // namespace ringmoe::tokenizer

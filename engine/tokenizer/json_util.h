#ifndef RINGMOE_ENGINE_TOKENIZER_JSON_UTIL_H_
#define RINGMOE_ENGINE_TOKENIZER_JSON_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace ringmoe::tokenizer {

using Json = nlohmann::json;

// Errors name the field by its path from the document root ("model.merges[3]")
// so that a bad tokenizer.json can be fixed without a debugger.
std::string FieldPath(absl::string_view parent, absl::string_view key);
std::string IndexPath(absl::string_view parent, size_t index);

absl::Status FieldError(absl::string_view path, absl::string_view problem);

// The member `key` of object `object` (found at `path`); an error when the
// member is missing.
absl::StatusOr<const Json*> GetMember(const Json& object, absl::string_view key,
                                      absl::string_view path);

// Like GetMember, for members that must be lists.
absl::StatusOr<const Json*> GetList(const Json& object, absl::string_view key,
                                    absl::string_view path);

absl::StatusOr<std::string> GetString(const Json& object, absl::string_view key,
                                      absl::string_view path);

// Like GetString, for members that may be absent or null.
absl::StatusOr<std::string> GetOptionalString(const Json& object,
                                              absl::string_view key,
                                              absl::string_view path,
                                              absl::string_view fallback);

absl::StatusOr<bool> GetOptionalBool(const Json& object, absl::string_view key,
                                     absl::string_view path, bool fallback);

// `value` (found at `path`) as a token id.
absl::StatusOr<int32_t> GetId(const Json& value, absl::string_view path);

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_JSON_UTIL_H_

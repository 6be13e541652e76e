// Reading JSON documents (config.json, tokenizer.json, safetensors headers and
// indexes): parsing that never throws, and typed reads of an object's members
// whose errors name the member by its path from the document root
// ("model.merges[3]", "rope_scaling.factor").
//
// Every read takes the object and, last, the object's own path ("" for the
// document root). Errors are INVALID_ARGUMENT and do not name the file:
// callers that know it prefix it.
#ifndef RINGMOE_BASE_JSON_H_
#define RINGMOE_BASE_JSON_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace ringmoe::json {

using Json = nlohmann::json;
// Keeps members in the order written (what a client sent, echoed back or
// rendered into a prompt, keeps its order).
using OrderedJson = nlohmann::ordered_json;

// Parsing. Messages: nlohmann's description of a syntax error ("... parse
// error at line 1, column 11: ..."), or what ParseStrict rejects besides.

// Parses `text` as one JSON value, as nlohmann does (a repeated key keeps its
// last value, as in Python).
absl::StatusOr<Json> Parse(absl::string_view text);

// Parses untrusted `text`, also rejecting what nlohmann accepts silently: a
// key repeated in an object ("duplicate key \"k\" inside \"parent\""), more
// than `max_depth` nested arrays and objects, and NUL bytes (nlohmann stops at
// one as if the input ended there). Hostile nesting costs neither stack nor
// memory: a first pass that builds nothing stops at the first problem.
absl::StatusOr<Json> ParseStrict(absl::string_view text, int max_depth);
// ParseStrict into an OrderedJson.
absl::StatusOr<OrderedJson> ParseStrictOrdered(absl::string_view text,
                                               int max_depth);

// Reads and parses the file at `path` with Parse. Errors name the file:
// ReadFileToString's (base/file.h) and "<path>: invalid JSON: <message>".
absl::StatusOr<Json> ParseFile(const std::string& path);

// Paths and errors.

// "parent.key", or "key" at the document root.
std::string FieldPath(absl::string_view parent, absl::string_view key);
// "parent[index]".
std::string IndexPath(absl::string_view parent, size_t index);
// INVALID_ARGUMENT "<path>: <problem>" ("document root" for an empty path),
// for what the reads below do not check.
absl::Status FieldError(absl::string_view path, absl::string_view problem);

// Typed reads of member `key` of `object` (found at `path`). Each fails when
// `object` is not an object. A member of the wrong type is "field '<path>'
// must be <type>, got <the value's JSON, cut at 80 characters>".

// Required members: a missing one is "missing required <type> field
// '<path>'".
// The member whatever its type, null included.
absl::StatusOr<const Json*> GetMember(const Json& object, absl::string_view key,
                                      absl::string_view path = "");
// A list.
absl::StatusOr<const Json*> GetList(const Json& object, absl::string_view key,
                                    absl::string_view path = "");
absl::StatusOr<std::string> GetString(const Json& object, absl::string_view key,
                                      absl::string_view path = "");
// An integer (as GetOptionalInt reads one) of at least 1: null counts as
// missing; a smaller value is "field '<path>' is <v>, must be at least 1".
absl::StatusOr<int64_t> GetPositiveInt(const Json& object,
                                       absl::string_view key,
                                       absl::string_view path = "");

// Optional members: missing or null reads as std::nullopt.
// An integer; integral numbers written as floats (4096.0) count.
absl::StatusOr<std::optional<int64_t>> GetOptionalInt(
    const Json& object, absl::string_view key, absl::string_view path = "");
// Any number.
absl::StatusOr<std::optional<double>> GetOptionalDouble(
    const Json& object, absl::string_view key, absl::string_view path = "");
absl::StatusOr<std::optional<bool>> GetOptionalBool(
    const Json& object, absl::string_view key, absl::string_view path = "");
absl::StatusOr<std::optional<std::string>> GetOptionalString(
    const Json& object, absl::string_view key, absl::string_view path = "");
// An integer or a list of integers (eos_token_id takes both forms); missing
// or null is an empty list.
absl::StatusOr<std::vector<int64_t>> GetIntOrIntList(
    const Json& object, absl::string_view key, absl::string_view path = "");

}  // namespace ringmoe::json

#endif  // RINGMOE_BASE_JSON_H_

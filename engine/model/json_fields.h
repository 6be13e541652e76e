// Typed reads of config.json fields with errors that name the field.
#ifndef RINGMOE_ENGINE_MODEL_JSON_FIELDS_H_
#define RINGMOE_ENGINE_MODEL_JSON_FIELDS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace ringmoe::model {

// A missing key or a JSON null reads as std::nullopt; a value of the wrong
// type is INVALID_ARGUMENT naming the key.
absl::StatusOr<std::optional<int64_t>> OptionalInt(const nlohmann::json& obj,
                                                   absl::string_view key);
absl::StatusOr<std::optional<double>> OptionalDouble(const nlohmann::json& obj,
                                                     absl::string_view key);
absl::StatusOr<std::optional<bool>> OptionalBool(const nlohmann::json& obj,
                                                 absl::string_view key);
absl::StatusOr<std::optional<std::string>> OptionalString(
    const nlohmann::json& obj, absl::string_view key);
// An integer or a list of integers (eos_token_id takes both forms).
absl::StatusOr<std::vector<int64_t>> IntOrIntList(const nlohmann::json& obj,
                                                  absl::string_view key);

// As OptionalInt, but a missing key is INVALID_ARGUMENT; the value must be
// at least `min`.
absl::StatusOr<int64_t> RequiredInt(const nlohmann::json& obj,
                                    absl::string_view key, int64_t min = 1);

}  // namespace ringmoe::model

#endif  // RINGMOE_ENGINE_MODEL_JSON_FIELDS_H_

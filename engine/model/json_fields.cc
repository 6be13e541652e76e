#include "engine/model/json_fields.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringmoe::model {
namespace {

const nlohmann::json* Lookup(const nlohmann::json& obj, absl::string_view key) {
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status WrongType(absl::string_view key, absl::string_view want,
                       const nlohmann::json& got) {
  return absl::InvalidArgumentError(absl::StrCat(
      "field '", key, "' must be ", want, ", got ", got.dump().substr(0, 80)));
}

}  // namespace

absl::StatusOr<std::optional<int64_t>> OptionalInt(const nlohmann::json& obj,
                                                   absl::string_view key) {
  const nlohmann::json* v = Lookup(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
  // Some configs write integers as 4096.0.
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (d == static_cast<double>(static_cast<int64_t>(d))) {
      return std::optional<int64_t>(static_cast<int64_t>(d));
    }
  }
  return WrongType(key, "an integer", *v);
}

absl::StatusOr<std::optional<double>> OptionalDouble(const nlohmann::json& obj,
                                                     absl::string_view key) {
  const nlohmann::json* v = Lookup(obj, key);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return WrongType(key, "a number", *v);
  return std::optional<double>(v->get<double>());
}

absl::StatusOr<std::optional<bool>> OptionalBool(const nlohmann::json& obj,
                                                 absl::string_view key) {
  const nlohmann::json* v = Lookup(obj, key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return WrongType(key, "true or false", *v);
  return std::optional<bool>(v->get<bool>());
}

absl::StatusOr<std::optional<std::string>> OptionalString(
    const nlohmann::json& obj, absl::string_view key) {
  const nlohmann::json* v = Lookup(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return WrongType(key, "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

absl::StatusOr<std::vector<int64_t>> IntOrIntList(const nlohmann::json& obj,
                                                  absl::string_view key) {
  const nlohmann::json* v = Lookup(obj, key);
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  if (v->is_number_integer()) {
    out.push_back(v->get<int64_t>());
    return out;
  }
  if (!v->is_array())
    return WrongType(key, "an integer or a list of integers", *v);
  for (const auto& item : *v) {
    if (!item.is_number_integer()) {
      return WrongType(key, "an integer or a list of integers", *v);
    }
    out.push_back(item.get<int64_t>());
  }
  return out;
}

absl::StatusOr<int64_t> RequiredInt(const nlohmann::json& obj,
                                    absl::string_view key, int64_t min) {
  absl::StatusOr<std::optional<int64_t>> v = OptionalInt(obj, key);
  if (!v.ok()) return v.status();
  if (!v->has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("missing required integer field '", key, "'"));
  }
  if (**v < min) {
    return absl::InvalidArgumentError(
        absl::StrCat("field '", key, "' is ", **v, ", must be at least ", min));
  }
  return **v;
}

}  // namespace ringmoe::model

#include "base/json.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "base/status_macros.h"

namespace ringmoe::json {
namespace {

// ParseStrict's first pass, which builds nothing. Returning false stops
// nlohmann's parser at once, so hostile nesting costs neither stack nor
// memory, and the DOM pass that follows only ever sees well-formed,
// duplicate-free input.
class Checker : public nlohmann::json_sax<Json> {
 public:
  explicit Checker(int max_depth) : max_depth_(max_depth) {}

  const std::string& error() const { return error_; }

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }

  bool start_object(std::size_t) override {
    if (!Enter()) return false;
    scopes_.push_back(Scope{/*is_object=*/true, {}, {}});
    return true;
  }
  bool key(string_t& key) override {
    Scope& scope = scopes_.back();
    if (!scope.keys.insert(key).second) {
      const std::string parent =
          scopes_.size() >= 2 ? scopes_[scopes_.size() - 2].last_key : "";
      error_ = absl::StrCat("duplicate key \"", key, "\"",
                            scopes_.size() == 1
                                ? " in the top-level object"
                                : absl::StrCat(" inside \"", parent, "\""));
      return false;
    }
    scope.last_key = key;
    return true;
  }
  bool end_object() override {
    scopes_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (!Enter()) return false;
    scopes_.push_back(Scope{/*is_object=*/false, {}, {}});
    return true;
  }
  bool end_array() override {
    scopes_.pop_back();
    return true;
  }

  bool parse_error(std::size_t, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error_ = ex.what();
    return false;
  }

 private:
  struct Scope {
    bool is_object;
    absl::flat_hash_set<std::string> keys;
    std::string last_key;
  };

  bool Enter() {
    if (static_cast<int>(scopes_.size()) >= max_depth_) {
      error_ = absl::StrCat("JSON nested deeper than ", max_depth_, " levels");
      return false;
    }
    return true;
  }

  const int max_depth_;
  std::vector<Scope> scopes_;
  std::string error_;
};

absl::Status WrongType(absl::string_view path, absl::string_view want,
                       const Json& got) {
  return absl::InvalidArgumentError(absl::StrCat(
      path.empty() ? "the document root" : absl::StrCat("field '", path, "'"),
      " must be ", want, ", got ", got.dump().substr(0, 80)));
}

absl::Status Missing(absl::string_view path, absl::string_view type) {
  return absl::InvalidArgumentError(absl::StrCat("missing required ", type,
                                                 type.empty() ? "" : " ",
                                                 "field '", path, "'"));
}

// Member `key` of `object`, or nullptr when it is missing or (unless
// `null_is_missing` is false) null.
absl::StatusOr<const Json*> Find(const Json& object, absl::string_view key,
                                 absl::string_view path,
                                 bool null_is_missing = true) {
  if (!object.is_object()) return WrongType(path, "an object", object);
  const auto it = object.find(key);
  if (it == object.end() || (null_is_missing && it->is_null())) {
    return nullptr;
  }
  return &*it;
}

}  // namespace

absl::StatusOr<Json> Parse(absl::string_view text) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {
    // Not only parse_error: a number beyond double's range (1e400) throws
    // out_of_range, which escaped here until fuzzing found it.
    return absl::InvalidArgumentError(e.what());
  }
}

namespace {

// ParseStrict's checks, then nlohmann's DOM parse into `JsonType`.
template <typename JsonType>
absl::StatusOr<JsonType> ParseChecked(absl::string_view text, int max_depth) {
  if (const size_t nul = text.find('\0'); nul != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON holds a NUL byte at offset ", nul));
  }
  Checker checker(max_depth);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &checker,
                                  Json::input_format_t::json,
                                  /*strict=*/true);
  if (!ok) {
    return absl::InvalidArgumentError(
        checker.error().empty() ? "malformed JSON" : checker.error());
  }
  JsonType json = JsonType::parse(text.begin(), text.end(), /*cb=*/nullptr,
                                  /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    // The checker accepted what the DOM parser refused: cannot happen with a
    // consistent nlohmann, but never hand out a discarded value.
    return absl::InvalidArgumentError("malformed JSON");
  }
  return json;
}

}  // namespace

absl::StatusOr<Json> ParseStrict(absl::string_view text, int max_depth) {
  return ParseChecked<Json>(text, max_depth);
}

absl::StatusOr<OrderedJson> ParseStrictOrdered(absl::string_view text,
                                               int max_depth) {
  return ParseChecked<OrderedJson>(text, max_depth);
}

absl::StatusOr<Json> ParseFile(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  absl::StatusOr<Json> json = Parse(text);
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": invalid JSON: ", json.status().message()));
  }
  return json;
}

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
  ASSIGN_OR_RETURN(const Json* member,
                   Find(object, key, path, /*null_is_missing=*/false));
  if (member == nullptr) return Missing(FieldPath(path, key), "");
  return member;
}

absl::StatusOr<const Json*> GetList(const Json& object, absl::string_view key,
                                    absl::string_view path) {
  ASSIGN_OR_RETURN(const Json* member,
                   Find(object, key, path, /*null_is_missing=*/false));
  if (member == nullptr) return Missing(FieldPath(path, key), "list");
  if (!member->is_array()) {
    return WrongType(FieldPath(path, key), "a list", *member);
  }
  return member;
}

absl::StatusOr<std::string> GetString(const Json& object, absl::string_view key,
                                      absl::string_view path) {
  ASSIGN_OR_RETURN(const Json* member,
                   Find(object, key, path, /*null_is_missing=*/false));
  if (member == nullptr) return Missing(FieldPath(path, key), "string");
  if (!member->is_string()) {
    return WrongType(FieldPath(path, key), "a string", *member);
  }
  return member->get<std::string>();
}

absl::StatusOr<int64_t> GetPositiveInt(const Json& object,
                                       absl::string_view key,
                                       absl::string_view path) {
  ASSIGN_OR_RETURN(const std::optional<int64_t> v,
                   GetOptionalInt(object, key, path));
  if (!v.has_value()) return Missing(FieldPath(path, key), "integer");
  if (*v < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field '", FieldPath(path, key), "' is ", *v, ", must be at least 1"));
  }
  return *v;
}

absl::StatusOr<std::optional<int64_t>> GetOptionalInt(const Json& object,
                                                      absl::string_view key,
                                                      absl::string_view path) {
  ASSIGN_OR_RETURN(const Json* v, Find(object, key, path));
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  // Some configs write integers as 4096.0.
  if (v->is_number_float()) {
    const double d = v->get<double>();
    // Range first: converting a double outside int64 (1e300) is undefined
    // behaviour, which fuzzing found here.
    constexpr double kTwoTo63 = 9223372036854775808.0;
    if (d >= -kTwoTo63 && d < kTwoTo63 && d == std::trunc(d)) {
      return static_cast<int64_t>(d);
    }
  }
  return WrongType(FieldPath(path, key), "an integer", *v);
}

absl::StatusOr<std::optional<double>> GetOptionalDouble(
    const Json& object, absl::string_view key, absl::string_view path) {
  ASSIGN_OR_RETURN(const Json* v, Find(object, key, path));
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return WrongType(FieldPath(path, key), "a number", *v);
  return v->get<double>();
}

absl::StatusOr<std::optional<bool>> GetOptionalBool(const Json& object,
                                                    absl::string_view key,
                                                    absl::string_view path) {
  ASSIGN_OR_RETURN(const Json* v, Find(object, key, path));
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) {
    return WrongType(FieldPath(path, key), "true or false", *v);
  }
  return v->get<bool>();
}

absl::StatusOr<std::optional<std::string>> GetOptionalString(
    const Json& object, absl::string_view key, absl::string_view path) {
  ASSIGN_OR_RETURN(const Json* v, Find(object, key, path));
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) return WrongType(FieldPath(path, key), "a string", *v);
  return v->get<std::string>();
}

absl::StatusOr<std::vector<int64_t>> GetIntOrIntList(const Json& object,
                                                     absl::string_view key,
                                                     absl::string_view path) {
  ASSIGN_OR_RETURN(const Json* v, Find(object, key, path));
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  if (v->is_number_integer()) {
    out.push_back(v->get<int64_t>());
    return out;
  }
  const auto wrong = [&] {
    return WrongType(FieldPath(path, key), "an integer or a list of integers",
                     *v);
  };
  if (!v->is_array()) return wrong();
  for (const Json& item : *v) {
    if (!item.is_number_integer()) return wrong();
    out.push_back(item.get<int64_t>());
  }
  return out;
}

}  // namespace ringmoe::json

#include "engine/checkpoint/json_strict.h"

#include <cstddef>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringmoe::checkpoint {
namespace {

using Json = nlohmann::json;

// A first pass that builds nothing. Returning false stops nlohmann's parser at
// once, so hostile nesting costs neither stack nor memory, and the DOM pass
// that follows only ever sees well-formed, duplicate-free input.
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

}  // namespace

absl::StatusOr<Json> ParseJsonStrict(absl::string_view text, int max_depth) {
  // nlohmann stops at a NUL byte as if the input ended there, which would
  // accept anything hidden behind one; JSON text never holds a raw NUL.
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
  Json json = Json::parse(text.begin(), text.end(), /*cb=*/nullptr,
                          /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    // The checker accepted what the DOM parser refused: cannot happen with a
    // consistent nlohmann, but never hand out a discarded value.
    return absl::InvalidArgumentError("malformed JSON");
  }
  return json;
}

}  // namespace ringmoe::checkpoint

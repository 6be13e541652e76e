#ifndef RINGMOE_ENGINE_TOKENIZER_NORMALIZER_H_
#define RINGMOE_ENGINE_TOKENIZER_NORMALIZER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/json.h"
#include "unicode/normalizer2.h"

namespace ringmoe::tokenizer {

// tokenizer.json's "normalizer": NFC/NFD/NFKC/NFKD, Prepend, Replace (string
// pattern) and Sequence of those.
class Normalizer {
 public:
  // `json` is the "normalizer" member, possibly null (no normalization).
  static absl::StatusOr<Normalizer> FromJson(const json::Json& json,
                                             absl::string_view path);

  // True when Normalize is the identity.
  bool empty() const { return steps_.empty(); }

  std::string Normalize(absl::string_view text) const;

 private:
  struct Step {
    enum class Kind { kUnicode, kPrepend, kReplace } kind;
    const icu::Normalizer2* unicode = nullptr;
    std::string pattern;
    std::string content;
  };

  static absl::Status Append(const json::Json& json, absl::string_view path,
                             std::vector<Step>* steps);

  std::vector<Step> steps_;
};

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_NORMALIZER_H_

#ifndef RINGMOE_ENGINE_TOKENIZER_DECODER_H_
#define RINGMOE_ENGINE_TOKENIZER_DECODER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/json.h"

namespace ringmoe::tokenizer {

// tokenizer.json's "decoder": ByteLevel, Replace (string pattern),
// ByteFallback, Fuse, Strip and Sequence of those. Each step maps the list of
// token strings to a new list, as Hugging Face's decode_chain does.
class Decoder {
 public:
  // `json` is the "decoder" member, possibly null (tokens joined by spaces).
  static absl::StatusOr<Decoder> FromJson(const json::Json& json,
                                          absl::string_view path);

  // The text of `tokens` (vocabulary strings and added-token contents).
  std::string Decode(std::vector<std::string> tokens) const;

 private:
  struct Step {
    enum class Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip } kind;
    std::string pattern;
    std::string content;
    int start = 0;
    int stop = 0;
  };

  static absl::Status Append(const json::Json& json, absl::string_view path,
                             std::vector<Step>* steps);

  std::vector<Step> steps_;
};

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_DECODER_H_

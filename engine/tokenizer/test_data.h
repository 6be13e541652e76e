#ifndef RINGMOE_ENGINE_TOKENIZER_TEST_DATA_H_
#define RINGMOE_ENGINE_TOKENIZER_TEST_DATA_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace ringmoe::tokenizer::testdata {

// The tokenizers of tests/testdata/tokenizers.
inline constexpr absl::string_view kNames[] = {"qwen3", "deepseek_v3",
                                               "mistral", "gpt_oss"};

// kNames as strings (for parameterized tests).
std::vector<std::string> AllNames();

// tests/testdata/tokenizers/`name` in the runfiles of the running test or
// binary.
std::string GoldenDir(absl::string_view name);

// The tokenizer.json of `name`, or "" when it is absent. gpt_oss's is too
// large for the repository: it is $RINGMOE_GPT_OSS_TOKENIZER_JSON, or else
// shared/testdata/tokenizers/gpt_oss/tokenizer.json beside the checkout that
// the runfiles link to.
std::string TokenizerJsonPath(absl::string_view name);

// The tokenizer of `name`, loaded once per process; nullptr when its
// tokenizer.json is absent. Aborts when it does not load.
const Tokenizer* GetTokenizer(absl::string_view name);

// The objects of a JSON Lines file; aborts when it cannot be read.
std::vector<nlohmann::json> ReadJsonLines(const std::string& path);

// "48c3" -> "H\xC3".
std::string HexToBytes(absl::string_view hex);

}  // namespace ringmoe::tokenizer::testdata

#endif  // RINGMOE_ENGINE_TOKENIZER_TEST_DATA_H_

// Encode throughput on about 1 MB of English prose (the long_paragraph golden
// case repeated) for each tokenizer in tests/testdata/tokenizers. Prints one
// JSON object per tokenizer:
//   {"tokenizer": ..., "bytes": ..., "tokens": ..., "tokens_per_s": ...,
//    "load_s": ...}
// Usage: tokenizer_benchmark [name...] (default: all four; gpt_oss needs
// ../shared beside the checkout or $RINGMOE_GPT_OSS_TOKENIZER_JSON).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "engine/tokenizer/test_data.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace ringmoe::tokenizer {
namespace {

constexpr size_t kTargetBytes = 1 << 20;
constexpr int kRepetitions = 3;

std::string LongText(absl::string_view name) {
  std::string paragraph;
  for (const nlohmann::json& c :
       testdata::ReadJsonLines(testdata::GoldenDir(name) + "/cases.jsonl")) {
    if (c["category"] == "long_paragraph") paragraph = c["text"];
  }
  std::string text;
  while (text.size() < kTargetBytes) {
    text += paragraph;
    text += "\n\n";
  }
  return text;
}

int Run(const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    const auto load_start = std::chrono::steady_clock::now();
    const Tokenizer* tokenizer = testdata::GetTokenizer(name);
    const std::chrono::duration<double> load_seconds =
        std::chrono::steady_clock::now() - load_start;
    if (tokenizer == nullptr) {
      std::fprintf(stderr, "%s: tokenizer.json not found, skipped\n",
                   name.c_str());
      continue;
    }
    const std::string text = LongText(name);
    // The first run fills the pre-token cache; report the best of the rest,
    // which is what a server sees after warm-up.
    size_t tokens = tokenizer->Encode(text, false).size();
    double best_seconds = 1e30;
    for (int i = 0; i < kRepetitions; ++i) {
      const auto start = std::chrono::steady_clock::now();
      tokens = tokenizer->Encode(text, false).size();
      const std::chrono::duration<double> elapsed =
          std::chrono::steady_clock::now() - start;
      best_seconds = std::min(best_seconds, elapsed.count());
    }
    const nlohmann::ordered_json result = {
        {"tokenizer", name},
        {"bytes", text.size()},
        {"tokens", tokens},
        {"tokens_per_s", static_cast<int64_t>(tokens / best_seconds)},
        {"load_s", load_seconds.count()},
    };
    std::printf("%s\n", result.dump().c_str());
  }
  return 0;
}

}  // namespace
}  // namespace ringmoe::tokenizer

int main(int argc, char** argv) {
  std::vector<std::string> names(argv + 1, argv + argc);
  if (names.empty()) {
    for (const absl::string_view name : ringmoe::tokenizer::testdata::kNames) {
      names.emplace_back(name);
    }
  }
  return ringmoe::tokenizer::Run(names);
}

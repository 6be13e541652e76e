// ringmoe tokenize (--model DIR | --tokenizer FILE) (--text TEXT | --jsonl
// FILE)
//   [--add_special_tokens=false]
#include <iostream>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "clients/cli/cli_util.h"
#include "clients/cli/commands.h"
#include "engine/runtime/engine_flags.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, tokenizer, "",
          "tokenize: a tokenizer.json (its tokenizer_config.json beside it is "
          "honoured).");
ABSL_FLAG(std::string, text, "", "tokenize: the text to encode.");
ABSL_FLAG(
    std::string, jsonl, "",
    "tokenize: a file of JSON objects with a `text` field, one per line.");
ABSL_FLAG(bool, add_special_tokens, true,
          "tokenize: add the tokenizer's default special tokens (e.g. BOS).");

namespace ringmoe::cli {
namespace {

void PrintIds(const std::vector<int32_t>& ids) {
  std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
}

}  // namespace

int RunTokenize() {
  const std::string model = absl::GetFlag(FLAGS_model);
  const std::string file = absl::GetFlag(FLAGS_tokenizer);
  if (model.empty() == file.empty()) {
    return Fail("tokenize",
                absl::InvalidArgumentError(
                    "give exactly one of --model DIR and --tokenizer FILE"));
  }
  auto tok = model.empty() ? tokenizer::Tokenizer::FromFile(file)
                           : tokenizer::Tokenizer::FromDirectory(model);
  if (!tok.ok()) return Fail("tokenize", tok.status());
  const bool special = absl::GetFlag(FLAGS_add_special_tokens);
  const std::string jsonl = absl::GetFlag(FLAGS_jsonl);
  if (jsonl.empty()) {
    PrintIds((*tok)->Encode(absl::GetFlag(FLAGS_text), special));
    return 0;
  }
  absl::Status status =
      ForEachJsonlLine(jsonl, [&](int line_number, const std::string& line) {
        nlohmann::json obj = nlohmann::json::parse(line, nullptr, false);
        if (obj.is_discarded() || !obj.is_object() || !obj.contains("text") ||
            !obj["text"].is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(
              jsonl, ":", line_number,
              ": expected a JSON object with a string `text` field"));
        }
        PrintIds((*tok)->Encode(obj["text"].get<std::string>(), special));
        return absl::OkStatus();
      });
  return status.ok() ? 0 : Fail("tokenize", status);
}

}  // namespace ringmoe::cli

// ringmoe tokenize (--model DIR | --tokenizer FILE) (--text TEXT | --jsonl
// FILE) [--add_special_tokens=false]
// ringmoe tokenize ... --decode (--ids 1,2,3 | --jsonl FILE)
//   [--skip_special_tokens]
#include <cstdint>
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
ABSL_FLAG(std::string, jsonl, "",
          "tokenize: a file of JSON objects, one per line, each with a `text` "
          "field (an `ids` array with --decode).");
ABSL_FLAG(bool, add_special_tokens, true,
          "tokenize: add the tokenizer's default special tokens (e.g. BOS).");
ABSL_FLAG(bool, decode, false,
          "tokenize: decode token ids (--ids or --jsonl) to text instead.");
ABSL_FLAG(std::string, ids, "", "tokenize --decode: ids to decode, 1,2,3.");
ABSL_FLAG(bool, skip_special_tokens, false,
          "tokenize --decode: leave out special tokens, as Hugging Face's "
          "decode(..., skip_special_tokens=True).");

namespace ringmoe::cli {
namespace {

void PrintIds(const std::vector<int32_t>& ids) {
  std::cout << nlohmann::json{{"ids", ids}}.dump() << "\n";
}

// Text that is not valid UTF-8 (a decode may end inside a character) is
// printed with U+FFFD in place of each bad byte, as JSON requires.
void PrintText(const std::string& text) {
  std::cout << nlohmann::json{{"text", text}}.dump(
                   -1, ' ', false, nlohmann::json::error_handler_t::replace)
            << "\n";
}

// Ids as Decode takes them (ids that name no token are skipped there, as
// Hugging Face skips them): integers of int32's range, else an error.
absl::StatusOr<std::vector<int32_t>> Int32Ids(const nlohmann::json& ids) {
  if (!ids.is_array()) {
    return absl::InvalidArgumentError("`ids` must be an array of token ids");
  }
  std::vector<int32_t> out;
  for (const nlohmann::json& id : ids) {
    if (!id.is_number_integer() ||
        (id.is_number_unsigned() && id.get<uint64_t>() > INT32_MAX) ||
        (!id.is_number_unsigned() &&
         (id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX))) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id.dump(), " is not a 32-bit integer"));
    }
    out.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return out;
}

int RunDecode(const tokenizer::Tokenizer& tok, const std::string& jsonl) {
  const bool skip = absl::GetFlag(FLAGS_skip_special_tokens);
  if (jsonl.empty()) {
    absl::StatusOr<std::vector<int32_t>> ids =
        ParseIdList(absl::GetFlag(FLAGS_ids));
    if (!ids.ok()) return Fail("tokenize", ids.status());
    PrintText(tok.Decode(*ids, skip));
    return 0;
  }
  absl::Status status =
      ForEachJsonlLine(jsonl, [&](int line_number, const std::string& line) {
        nlohmann::json obj = nlohmann::json::parse(line, nullptr, false);
        if (obj.is_discarded() || !obj.is_object() || !obj.contains("ids")) {
          return absl::InvalidArgumentError(
              absl::StrCat(jsonl, ":", line_number,
                           ": expected a JSON object with an `ids` field"));
        }
        absl::StatusOr<std::vector<int32_t>> checked = Int32Ids(obj["ids"]);
        if (!checked.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(
              jsonl, ":", line_number, ": ", checked.status().message()));
        }
        PrintText(tok.Decode(*checked, skip));
        return absl::OkStatus();
      });
  return status.ok() ? 0 : Fail("tokenize", status);
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
  const std::string jsonl = absl::GetFlag(FLAGS_jsonl);
  if (absl::GetFlag(FLAGS_decode)) return RunDecode(**tok, jsonl);
  const bool special = absl::GetFlag(FLAGS_add_special_tokens);
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

// ringmoe chat-template --tokenizer_dir DIR [--chat_template FILE] --jsonl FILE
//
// Renders one conversation per input line with the model's chat template and
// prints one JSON object per line, in input order: {"prompt": ...}, or
// {"error": ...} with the template's raise_exception message exactly (or
// what else failed, a malformed line included; the tool goes on).
#include <iostream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "clients/cli/cli_util.h"
#include "clients/cli/commands.h"
#include "engine/tokenizer/chat_template.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, tokenizer_dir, "",
          "chat-template: the model or tokenizer directory (its "
          "chat_template.jinja or tokenizer_config.json's chat_template, and "
          "the special tokens of tokenizer_config.json).");
ABSL_FLAG(std::string, chat_template, "",
          "chat-template: a Jinja template file to use instead of the "
          "directory's.");
ABSL_DECLARE_FLAG(std::string, jsonl);

namespace ringmoe::cli {
namespace {

using OrderedJson = nlohmann::ordered_json;

// The input of one line: {messages, tools?, add_generation_prompt?,
// template_kwargs?, now?}.
absl::StatusOr<tokenizer::ChatTemplateInput> ParseCase(
    const std::string& line) {
  OrderedJson obj =
      OrderedJson::parse(line, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded() || !obj.is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  tokenizer::ChatTemplateInput input;
  if (!obj.contains("messages") || !obj["messages"].is_array()) {
    return absl::InvalidArgumentError("`messages` must be a list");
  }
  input.messages = obj["messages"];
  if (obj.contains("tools")) {
    if (!obj["tools"].is_null() && !obj["tools"].is_array()) {
      return absl::InvalidArgumentError("`tools` must be a list or null");
    }
    input.tools = obj["tools"];
  }
  if (obj.contains("add_generation_prompt")) {
    if (!obj["add_generation_prompt"].is_boolean()) {
      return absl::InvalidArgumentError(
          "`add_generation_prompt` must be a boolean");
    }
    input.add_generation_prompt = obj["add_generation_prompt"].get<bool>();
  }
  if (obj.contains("template_kwargs")) {
    if (!obj["template_kwargs"].is_null() &&
        !obj["template_kwargs"].is_object()) {
      return absl::InvalidArgumentError("`template_kwargs` must be an object");
    }
    input.template_kwargs = obj["template_kwargs"];
  }
  if (obj.contains("now")) {
    absl::CivilSecond now;
    if (!obj["now"].is_string() ||
        !absl::ParseCivilTime(obj["now"].get<std::string>(), &now)) {
      return absl::InvalidArgumentError(
          "`now` must be a time like \"2025-08-05T09:30:00\"");
    }
    input.now = now;
  }
  return input;
}

void Print(const char* key, const std::string& value) {
  std::cout << OrderedJson{{key, value}}.dump(
                   -1, ' ', false, OrderedJson::error_handler_t::replace)
            << "\n";
}

}  // namespace

int RunChatTemplate() {
  const std::string dir = absl::GetFlag(FLAGS_tokenizer_dir);
  const std::string file = absl::GetFlag(FLAGS_chat_template);
  const std::string jsonl = absl::GetFlag(FLAGS_jsonl);
  if ((dir.empty() && file.empty()) || jsonl.empty()) {
    return Fail("chat-template",
                absl::InvalidArgumentError(
                    "give --tokenizer_dir DIR (and/or --chat_template FILE) "
                    "and --jsonl FILE"));
  }
  absl::StatusOr<tokenizer::ChatTemplate> chat_template =
      tokenizer::ChatTemplate::Load(dir, file);
  if (!chat_template.ok()) return Fail("chat-template", chat_template.status());
  absl::Status status =
      ForEachJsonlLine(jsonl, [&](int line_number, const std::string& line) {
        absl::StatusOr<tokenizer::ChatTemplateInput> input = ParseCase(line);
        if (!input.ok()) {
          Print("error", absl::StrCat(jsonl, ":", line_number, ": ",
                                      input.status().message()));
          return absl::OkStatus();
        }
        absl::StatusOr<std::string> prompt = chat_template->Render(*input);
        if (prompt.ok()) {
          Print("prompt", *prompt);
        } else {
          Print("error", std::string(prompt.status().message()));
        }
        return absl::OkStatus();
      });
  return status.ok() ? 0 : Fail("chat-template", status);
}

}  // namespace ringmoe::cli

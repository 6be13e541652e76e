// libFuzzer target: a chat template and a conversation, parsed and rendered
// as a tokenizer_config.json's chat_template would be.
//
// Input: the template source, a NUL byte, then JSON: a list of messages, or
// an object with any of messages, tools, add_generation_prompt,
// template_kwargs and special_tokens. Without a NUL byte the whole input is
// the template, rendered with one user message. The sandbox limits are
// small so that a template looping or doubling strings ends within
// milliseconds; reaching one is a normal error.
//
// Checked: no crash or sanitizer report (the interpreter recurses: its depth
// limits must hold the native stack); a render never exceeds
// max_output_bytes; every failure is INVALID_ARGUMENT, as documented.
#include "tests/fuzz/chat_template_fuzzer.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/civil_time.h"
#include "base/json.h"
#include "engine/tokenizer/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

using ::ringmoe::tokenizer::ChatTemplate;
using ::ringmoe::tokenizer::ChatTemplateInput;
using Json = nlohmann::ordered_json;

constexpr size_t kMaxInputBytes = 64 << 10;
constexpr int kMaxJsonDepth = 32;

[[noreturn]] void Fail(const char* what, absl::string_view detail = "") {
  std::fprintf(stderr, "chat template fuzzer: %s %.*s\n", what,
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

void CheckError(const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    Fail("failure not INVALID_ARGUMENT:", status.ToString());
  }
}

}  // namespace

namespace ringmoe::fuzz {

absl::StatusOr<std::string> RenderChatTemplateInput(absl::string_view input) {
  const size_t nul = input.find('\0');

  ChatTemplateInput render;
  render.messages = Json::array({{{"role", "user"}, {"content", "Hi"}}});
  render.now = absl::CivilSecond(2024, 6, 1, 12, 30, 0);
  render.limits.max_output_bytes = 16 << 10;
  render.limits.max_steps = 20'000;
  render.limits.max_call_depth = 16;
  render.limits.max_depth = 64;
  // Special tokens as a tokenizer_config.json of a Llama-style model has.
  Json special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
  if (nul != absl::string_view::npos) {
    absl::StatusOr<Json> conversation =
        ringmoe::json::ParseStrictOrdered(input.substr(nul + 1), kMaxJsonDepth);
    if (!conversation.ok()) return conversation.status();
    if (conversation->is_object()) {
      auto take = [&conversation](const char* key, Json& into) {
        if (auto it = conversation->find(key); it != conversation->end()) {
          into = std::move(*it);
        }
      };
      take("messages", render.messages);
      take("tools", render.tools);
      take("template_kwargs", render.template_kwargs);
      take("special_tokens", special_tokens);
      if (auto it = conversation->find("add_generation_prompt");
          it != conversation->end() && it->is_boolean()) {
        render.add_generation_prompt = it->get<bool>();
      }
    } else {
      render.messages = *std::move(conversation);
    }
  }

  absl::StatusOr<ChatTemplate> parsed = ChatTemplate::FromSource(
      std::string(input.substr(0, nul)), std::move(special_tokens));
  if (!parsed.ok()) {
    CheckError(parsed.status());
    return parsed.status();
  }
  absl::StatusOr<std::string> prompt = parsed->Render(render);
  if (!prompt.ok()) {
    CheckError(prompt.status());
    return prompt.status();
  }
  if (prompt->size() > render.limits.max_output_bytes) {
    Fail("render longer than max_output_bytes");
  }
  return prompt;
}

}  // namespace ringmoe::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInputBytes) return -1;
  ringmoe::fuzz::RenderChatTemplateInput(
      absl::string_view(reinterpret_cast<const char*>(data), size))
      .IgnoreError();
  return 0;
}

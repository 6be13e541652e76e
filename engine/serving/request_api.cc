#include "engine/serving/request_api.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/tokenizer/chat_template.h"

namespace ringmoe::serving {
namespace {

std::string NewRequestId() {
  static std::atomic<uint64_t> next{1};
  return absl::StrCat("req-", next.fetch_add(1));
}

// Where a UTF-8 character starts at or before `pos`.
size_t CharBoundary(absl::string_view text, size_t pos) {
  while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) {
    --pos;
  }
  return pos;
}

// A message as chat templates expect it (transformers' and vLLM's
// conventions): content given as a list of text parts becomes one string,
// and tool-call arguments sent as JSON text become objects, except for
// formats whose templates concatenate them as text (DeepSeek-V3).
absl::Status NormalizeMessage(ChatFormat format, size_t index,
                              nlohmann::ordered_json& message) {
  const std::string where = absl::StrCat("messages[", index, "]");
  if (message.contains("content") && message["content"].is_array()) {
    std::string text;
    const nlohmann::ordered_json& parts = message["content"];
    for (size_t i = 0; i < parts.size(); ++i) {
      const nlohmann::ordered_json& part = parts[i];
      if (!part.is_object() || part.value("type", "") != "text" ||
          !part.contains("text") || !part["text"].is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".content[", i,
            "] must be a text part {\"type\": \"text\", \"text\": ...}: "
            "this model reads text only"));
      }
      if (!text.empty()) text += "\n";
      text += part["text"].get<std::string>();
    }
    message["content"] = text;
  }
  if (format == ChatFormat::kDeepSeekV3 || !message.contains("tool_calls")) {
    return absl::OkStatus();
  }
  nlohmann::ordered_json& calls = message["tool_calls"];
  if (!calls.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".tool_calls must be a list"));
  }
  for (nlohmann::ordered_json& call : calls) {
    if (!call.is_object() || !call.contains("function") ||
        !call["function"].is_object()) {
      continue;
    }
    nlohmann::ordered_json& function = call["function"];
    if (!function.contains("arguments") || !function["arguments"].is_string())
      continue;
    const std::string& text = function["arguments"].get_ref<std::string&>();
    nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(
        text, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_object()) function["arguments"] = std::move(parsed);
  }
  return absl::OkStatus();
}

}  // namespace

std::string Quote(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  return absl::StrCat(text.substr(0, CharBoundary(text, max_bytes)), "...");
}

absl::Status CheckModelName(const ServedModel& model,
                            absl::string_view requested) {
  if (requested.empty() || requested == model.name) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model '", Quote(requested),
                   "'; this server serves '", model.name, "'"));
}

absl::StatusOr<const tokenizer::Tokenizer*> TokenizerFor(
    const ServedModel& model, absl::string_view requested) {
  RETURN_IF_ERROR(CheckModelName(model, requested));
  const tokenizer::Tokenizer* tok = model.engine->tokenizer();
  if (tok == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", model.name, "' has no tokenizer.json"));
  }
  return tok;
}

absl::StatusOr<std::string> RenderChat(const ServedModel& model,
                                       const ChatInput& chat) {
  if (model.chat_template == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "model '", model.name,
        "' has no chat template (tokenizer_config.json has no chat_template "
        "and there is no chat_template.jinja; the server's --chat_template "
        "names one); send a prompt instead of messages"));
  }
  if (!chat.messages.is_array() || chat.messages.empty()) {
    return absl::InvalidArgumentError(
        "messages must be a non-empty list of message objects");
  }
  for (size_t i = 0; i < chat.messages.size(); ++i) {
    const nlohmann::ordered_json& m = chat.messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "messages[", i, "] must be an object with a string 'role'"));
    }
  }
  if (!chat.tools.is_null() && !chat.tools.is_array()) {
    return absl::InvalidArgumentError("tools must be a list");
  }
  if (!chat.template_kwargs.is_null() && !chat.template_kwargs.is_object()) {
    return absl::InvalidArgumentError(
        "chat template arguments must be an object");
  }
  tokenizer::ChatTemplateInput input;
  input.messages = chat.messages;
  for (size_t i = 0; i < input.messages.size(); ++i) {
    RETURN_IF_ERROR(NormalizeMessage(model.chat_format, i, input.messages[i]));
  }
  input.tools = chat.tools;
  input.add_generation_prompt = chat.add_generation_prompt;
  input.template_kwargs = chat.template_kwargs;
  return model.chat_template->Render(input);
}

absl::StatusOr<Request> PrepareRequest(const ServedModel& model,
                                       GenerationInput input,
                                       std::string* chat_prompt) {
  if (input.request_id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("request id '", Quote(input.request_id), "' is ",
                     input.request_id.size(), " bytes, more than the limit of ",
                     kMaxRequestIdBytes));
  }
  Request request;
  request.id =
      input.request_id.empty() ? NewRequestId() : std::move(input.request_id);
  const std::string who = absl::StrCat("request ", request.id, ": ");
  auto invalid = [&who](absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat(who, message));
  };
  absl::Status name = CheckModelName(model, input.model);
  if (!name.ok()) return invalid(name.message());

  const int prompts = (input.text.has_value() ? 1 : 0) +
                      (input.input_ids.empty() ? 0 : 1) +
                      (input.chat.has_value() ? 1 : 0);
  if (prompts > 1) {
    return invalid("give one prompt: text, input_ids or messages");
  }
  const tokenizer::Tokenizer* tok = model.engine->tokenizer();
  if ((input.text.has_value() || input.chat.has_value()) && tok == nullptr) {
    return invalid(absl::StrCat("model '", model.name,
                                "' has no tokenizer; send input_ids instead"));
  }
  if (input.chat.has_value()) {
    absl::StatusOr<std::string> prompt = RenderChat(model, *input.chat);
    if (!prompt.ok()) {
      return absl::Status(prompt.status().code(),
                          absl::StrCat(who, prompt.status().message()));
    }
    request.prompt_ids = tok->Encode(*prompt, /*add_special_tokens=*/false);
    if (chat_prompt != nullptr) *chat_prompt = *std::move(prompt);
  } else if (input.text.has_value()) {
    request.prompt_ids =
        tok->Encode(*input.text, input.add_special_tokens.value_or(true));
  } else {
    request.prompt_ids = std::move(input.input_ids);
  }
  if (request.prompt_ids.empty()) {
    return invalid("the prompt is empty");
  }

  const runtime::SamplingParams& s = input.sampling;
  if (s.stop_strings.size() > kMaxStopStrings) {
    return invalid(absl::StrCat("at most ", kMaxStopStrings,
                                " stop strings, got ", s.stop_strings.size()));
  }
  for (const std::string& stop : s.stop_strings) {
    if (stop.empty() || stop.size() > kMaxStopStringBytes) {
      return invalid(absl::StrCat("a stop string must have 1 to ",
                                  kMaxStopStringBytes, " bytes, got ",
                                  stop.size()));
    }
  }
  if (input.top_logprobs < 0 || input.top_logprobs > kMaxTopLogprobs) {
    return invalid(absl::StrCat("top_logprobs must lie in [0, ",
                                kMaxTopLogprobs, "], got ",
                                input.top_logprobs));
  }
  if (input.top_logprobs > 0 && !input.logprobs) {
    return invalid("top_logprobs needs logprobs");
  }
  request.max_tokens = input.max_tokens;
  request.sampling = std::move(input.sampling);
  request.logprobs = input.logprobs;
  request.top_logprobs = input.top_logprobs;
  request.keep_special_tokens = input.keep_special_tokens;
  request.deadline = input.deadline;
  return request;
}

}  // namespace ringmoe::serving

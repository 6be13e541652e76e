#include "server/openai_protocol.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace ringmoe::server::openai {
namespace {

// Deeper bodies are refused before they are built.
constexpr int kMaxJsonDepth = 64;

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

absl::Status WrongType(absl::string_view key, absl::string_view type) {
  return Invalid(absl::StrCat("'", key, "' must be ", type));
}

// Typed reads of a body member; missing and null read as std::nullopt.
const OrderedJson* Member(const OrderedJson& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<std::optional<double>> Number(const OrderedJson& body,
                                             const char* key) {
  const OrderedJson* v = Member(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return WrongType(key, "a number");
  return v->get<double>();
}

absl::StatusOr<std::optional<int64_t>> Integer(const OrderedJson& body,
                                               const char* key) {
  const OrderedJson* v = Member(body, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() >
            static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return WrongType(key, "an integer within 64 bits");
    }
    return v->get<int64_t>();
  }
  return WrongType(key, "an integer");
}

absl::StatusOr<std::optional<bool>> Bool(const OrderedJson& body,
                                         const char* key) {
  const OrderedJson* v = Member(body, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return WrongType(key, "true or false");
  return v->get<bool>();
}

// An integer within [lo, hi] (messages name the field and the range).
absl::StatusOr<std::optional<int64_t>> IntegerIn(const OrderedJson& body,
                                                 const char* key, int64_t lo,
                                                 int64_t hi) {
  ASSIGN_OR_RETURN(std::optional<int64_t> v, Integer(body, key));
  if (v.has_value() && (*v < lo || *v > hi)) {
    return Invalid(
        absl::StrCat("'", key, "' must lie in [", lo, ", ", hi, "], got ", *v));
  }
  return v;
}

// A float setting; NaN and infinities are refused here, the range by the
// sampler's validation (which names the field the same way).
absl::StatusOr<std::optional<float>> Float(const OrderedJson& body,
                                           const char* key) {
  ASSIGN_OR_RETURN(std::optional<double> v, Number(body, key));
  if (!v.has_value()) return std::nullopt;
  if (!std::isfinite(*v) || std::fabs(*v) > 1e6) {
    return Invalid(absl::StrCat("'", key, "' must be a finite number"));
  }
  return static_cast<float>(*v);
}

// What chat and completions share: sampling, limits, stream options.
absl::Status ParseCommon(const OrderedJson& body, ApiRequest& request,
                         serving::GenerationInput& input, int& n) {
  runtime::SamplingParams& p = input.sampling;
  ASSIGN_OR_RETURN(std::optional<float> temperature,
                   Float(body, "temperature"));
  if (temperature.has_value()) {
    if (*temperature < 0 || *temperature > 2) {
      return Invalid(
          absl::StrCat("'temperature' must lie in [0, 2], got ", *temperature));
    }
    p.temperature = *temperature;
  }
  ASSIGN_OR_RETURN(std::optional<float> top_p, Float(body, "top_p"));
  if (top_p.has_value()) p.top_p = *top_p;
  ASSIGN_OR_RETURN(std::optional<int64_t> top_k,
                   IntegerIn(body, "top_k", -1, 1 << 30));
  // vLLM's convention: -1 (or 0) turns top-k off.
  if (top_k.has_value())
    p.top_k = static_cast<int32_t>(std::max<int64_t>(0, *top_k));
  ASSIGN_OR_RETURN(std::optional<float> min_p, Float(body, "min_p"));
  if (min_p.has_value()) p.min_p = *min_p;
  ASSIGN_OR_RETURN(std::optional<float> presence,
                   Float(body, "presence_penalty"));
  if (presence.has_value()) p.presence_penalty = *presence;
  ASSIGN_OR_RETURN(std::optional<float> frequency,
                   Float(body, "frequency_penalty"));
  if (frequency.has_value()) p.frequency_penalty = *frequency;
  ASSIGN_OR_RETURN(std::optional<float> repetition,
                   Float(body, "repetition_penalty"));
  if (repetition.has_value()) p.repetition_penalty = *repetition;
  ASSIGN_OR_RETURN(std::optional<int64_t> seed, Integer(body, "seed"));
  if (seed.has_value()) p.seed = static_cast<uint64_t>(*seed);
  ASSIGN_OR_RETURN(std::optional<bool> ignore_eos, Bool(body, "ignore_eos"));
  p.ignore_eos = ignore_eos.value_or(false);

  if (const OrderedJson* stop = Member(body, "stop")) {
    if (stop->is_string()) {
      p.stop_strings.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const OrderedJson& s : *stop) {
        if (!s.is_string())
          return WrongType("stop", "a string or a list of strings");
        p.stop_strings.push_back(s.get<std::string>());
      }
    } else {
      return WrongType("stop", "a string or a list of strings");
    }
  }

  // max_completion_tokens is the newer name; either sets the limit.
  ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens,
                   IntegerIn(body, "max_completion_tokens", 1,
                             std::numeric_limits<int32_t>::max()));
  if (!max_tokens.has_value()) {
    ASSIGN_OR_RETURN(
        max_tokens,
        IntegerIn(body, "max_tokens", 1, std::numeric_limits<int32_t>::max()));
  }
  if (max_tokens.has_value())
    input.max_tokens = static_cast<int32_t>(*max_tokens);

  ASSIGN_OR_RETURN(std::optional<int64_t> count,
                   IntegerIn(body, "n", 1, kMaxChoices));
  n = static_cast<int>(count.value_or(1));
  ASSIGN_OR_RETURN(std::optional<int64_t> best_of, Integer(body, "best_of"));
  if (best_of.has_value() && *best_of != n) {
    return Invalid("'best_of' other than n is not supported");
  }

  ASSIGN_OR_RETURN(std::optional<bool> stream, Bool(body, "stream"));
  request.stream = stream.value_or(false);
  if (const OrderedJson* options = Member(body, "stream_options")) {
    if (!options->is_object()) return WrongType("stream_options", "an object");
    if (!request.stream) {
      return Invalid("'stream_options' is only allowed with 'stream': true");
    }
    ASSIGN_OR_RETURN(std::optional<bool> usage,
                     Bool(*options, "include_usage"));
    request.include_usage = usage.value_or(false);
  }
  if (const OrderedJson* format = Member(body, "response_format")) {
    if (!format->is_object() || !format->contains("type") ||
        !(*format)["type"].is_string()) {
      return WrongType("response_format", "an object with a string 'type'");
    }
    const std::string type = (*format)["type"].get<std::string>();
    if (type != "text") {
      return Invalid(absl::StrCat(
          "response_format '", serving::Quote(type),
          "' is not supported (no constrained decoding); only 'text'"));
    }
  }
  if (const OrderedJson* bias = Member(body, "logit_bias")) {
    if (!bias->is_object()) return WrongType("logit_bias", "an object");
    if (!bias->empty()) return Invalid("'logit_bias' is not supported");
  }
  return absl::OkStatus();
}

// Chat message content must be text; parts are checked when rendered.
absl::Status CheckMessages(const OrderedJson& messages) {
  if (!messages.is_array() || messages.empty()) {
    return Invalid("'messages' must be a non-empty list");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const OrderedJson& m = messages[i];
    if (!m.is_object()) {
      return Invalid(absl::StrCat("messages[", i, "] must be an object"));
    }
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return Invalid(absl::StrCat("messages[", i, "].role must be a string"));
    }
    auto content = m.find("content");
    if (content != m.end() && !content->is_null() && !content->is_string() &&
        !content->is_array()) {
      return Invalid(
          absl::StrCat("messages[", i,
                       "].content must be a string, a list of parts or null"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseChat(const OrderedJson& body,
                       const serving::ServedModel& model, ApiRequest& request,
                       serving::GenerationInput& input) {
  const OrderedJson* messages = Member(body, "messages");
  if (messages == nullptr) return Invalid("'messages' is required");
  RETURN_IF_ERROR(CheckMessages(*messages));
  serving::ChatInput chat;
  chat.messages = *messages;

  std::string tool_choice = "auto";
  if (const OrderedJson* choice = Member(body, "tool_choice")) {
    if (!choice->is_string()) {
      return Invalid(
          "'tool_choice' naming a function is not supported (no constrained "
          "decoding); use \"auto\" or \"none\"");
    }
    tool_choice = choice->get<std::string>();
    if (tool_choice == "required") {
      return Invalid(
          "'tool_choice': \"required\" is not supported (no constrained "
          "decoding); use \"auto\" or \"none\"");
    }
    if (tool_choice != "auto" && tool_choice != "none") {
      return Invalid("'tool_choice' must be \"auto\" or \"none\"");
    }
  }
  if (const OrderedJson* tools = Member(body, "tools")) {
    if (!tools->is_array()) return WrongType("tools", "a list");
    for (size_t i = 0; i < tools->size(); ++i) {
      const OrderedJson& tool = (*tools)[i];
      if (!tool.is_object() || !tool.contains("function") ||
          !tool["function"].is_object() || !tool["function"].contains("name") ||
          !tool["function"]["name"].is_string()) {
        return Invalid(absl::StrCat("tools[", i,
                                    "] must be {\"type\": \"function\", "
                                    "\"function\": {\"name\": ...}}"));
      }
    }
    if (tool_choice != "none" && !tools->empty()) {
      chat.tools = *tools;
      request.parse_tool_calls = true;
    }
  }
  chat.template_kwargs = OrderedJson::object();
  if (const OrderedJson* kwargs = Member(body, "chat_template_kwargs")) {
    if (!kwargs->is_object())
      return WrongType("chat_template_kwargs", "an object");
    chat.template_kwargs = *kwargs;
  }
  if (const OrderedJson* effort = Member(body, "reasoning_effort")) {
    if (!effort->is_string()) return WrongType("reasoning_effort", "a string");
    chat.template_kwargs["reasoning_effort"] = *effort;
  }
  ASSIGN_OR_RETURN(std::optional<bool> generation_prompt,
                   Bool(body, "add_generation_prompt"));
  chat.add_generation_prompt = generation_prompt.value_or(true);
  input.chat = std::move(chat);
  input.keep_special_tokens = serving::NeedsSpecialTokens(model.chat_format);

  ASSIGN_OR_RETURN(std::optional<bool> logprobs, Bool(body, "logprobs"));
  input.logprobs = logprobs.value_or(false);
  ASSIGN_OR_RETURN(
      std::optional<int64_t> top,
      IntegerIn(body, "top_logprobs", 0, serving::kMaxTopLogprobs));
  if (top.has_value() && *top > 0 && !input.logprobs) {
    return Invalid("'top_logprobs' needs 'logprobs': true");
  }
  input.top_logprobs = static_cast<int>(top.value_or(0));
  request.logprobs = input.logprobs;
  return absl::OkStatus();
}

// Completions' prompt: a string, a list of strings, a list of token ids, or
// a list of lists of token ids.
absl::StatusOr<std::vector<serving::GenerationInput>> CompletionPrompts(
    const OrderedJson& body, const serving::GenerationInput& settings) {
  const OrderedJson* prompt = Member(body, "prompt");
  if (prompt == nullptr) return Invalid("'prompt' is required");
  std::vector<serving::GenerationInput> prompts;
  auto ids_of = [](const OrderedJson& list,
                   std::vector<int32_t>& ids) -> absl::Status {
    for (const OrderedJson& id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Invalid("'prompt' token ids must be non-negative integers");
      }
      ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    if (ids.empty()) return Invalid("'prompt' must not be empty");
    return absl::OkStatus();
  };
  auto add_text = [&](const std::string& text) {
    serving::GenerationInput input = settings;
    input.text = text;
    prompts.push_back(std::move(input));
  };
  if (prompt->is_string()) {
    add_text(prompt->get<std::string>());
  } else if (prompt->is_array() && !prompt->empty()) {
    if ((*prompt)[0].is_number()) {
      serving::GenerationInput input = settings;
      RETURN_IF_ERROR(ids_of(*prompt, input.input_ids));
      prompts.push_back(std::move(input));
    } else {
      for (const OrderedJson& item : *prompt) {
        if (item.is_string()) {
          add_text(item.get<std::string>());
        } else if (item.is_array()) {
          serving::GenerationInput input = settings;
          RETURN_IF_ERROR(ids_of(item, input.input_ids));
          prompts.push_back(std::move(input));
        } else {
          return Invalid(
              "'prompt' must be a string, a list of strings or token ids");
        }
      }
    }
  } else {
    return Invalid("'prompt' must be a string, a list of strings or token ids");
  }
  return prompts;
}

std::string ErrorType(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kNotFound:
      return "not_found_error";
    case absl::StatusCode::kResourceExhausted:
      return "rate_limit_error";
    case absl::StatusCode::kUnavailable:
      return "service_unavailable_error";
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      return "server_error";
    default:
      return "invalid_request_error";
  }
}

std::atomic<uint64_t> next_call_id{1};

}  // namespace

absl::StatusOr<ApiRequest> ParseRequest(Endpoint endpoint,
                                        absl::string_view body_text,
                                        const serving::ServedModel& model) {
  if (!tokenizer::IsValidUtf8(body_text)) {
    return Invalid("the request body is not valid UTF-8");
  }
  absl::StatusOr<OrderedJson> parsed =
      json::ParseStrictOrdered(body_text, kMaxJsonDepth);
  if (!parsed.ok()) {
    return Invalid(absl::StrCat("the request body is not valid JSON: ",
                                parsed.status().message()));
  }
  const OrderedJson& body = *parsed;
  if (!body.is_object())
    return Invalid("the request body must be a JSON object");

  ApiRequest request;
  request.endpoint = endpoint;
  if (const OrderedJson* name = Member(body, "model")) {
    if (!name->is_string()) return WrongType("model", "a string");
    request.model = name->get<std::string>();
  }
  if (!request.model.empty() && request.model != model.name) {
    return absl::NotFoundError(absl::StrCat(
        "The model '", serving::Quote(request.model),
        "' does not exist; this server serves '", model.name, "'"));
  }

  serving::GenerationInput settings;
  int n = 1;
  RETURN_IF_ERROR(ParseCommon(body, request, settings, n));
  std::vector<serving::GenerationInput> prompts;
  if (endpoint == Endpoint::kChatCompletions) {
    RETURN_IF_ERROR(ParseChat(body, model, request, settings));
    prompts.push_back(std::move(settings));
  } else {
    ASSIGN_OR_RETURN(std::optional<bool> echo, Bool(body, "echo"));
    request.echo = echo.value_or(false);
    if (Member(body, "suffix") != nullptr) {
      return Invalid("'suffix' is not supported");
    }
    ASSIGN_OR_RETURN(std::optional<int64_t> logprobs,
                     IntegerIn(body, "logprobs", 0, kMaxCompletionLogprobs));
    if (logprobs.has_value()) {
      settings.logprobs = true;
      settings.top_logprobs = static_cast<int>(*logprobs);
      request.logprobs = true;
    }
    ASSIGN_OR_RETURN(prompts, CompletionPrompts(body, settings));
  }
  if (static_cast<int64_t>(prompts.size()) * n > kMaxChoices) {
    return Invalid(absl::StrCat("prompts times 'n' must be at most ",
                                kMaxChoices, ", got ", prompts.size() * n));
  }
  request.choices_per_prompt = n;
  for (serving::GenerationInput& prompt : prompts) {
    prompt.model = request.model;
    for (int j = 0; j < n; ++j) {
      serving::GenerationInput choice = prompt;
      // A seeded request's choices differ from each other, and repeat.
      if (choice.sampling.seed.has_value()) *choice.sampling.seed += j;
      request.choices.push_back(std::move(choice));
    }
  }
  return request;
}

int HttpStatus(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kUnimplemented:
      return 501;
    default:
      return 500;
  }
}

std::string ErrorJson(const absl::Status& status, const char* code) {
  OrderedJson error = {
      {"message", std::string(status.message())},
      {"type", ErrorType(status.code())},
      {"param", nullptr},
      {"code", code != nullptr ? OrderedJson(code) : OrderedJson(nullptr)}};
  return OrderedJson{{"error", std::move(error)}}.dump(
      -1, ' ', false, OrderedJson::error_handler_t::replace);
}

std::string ErrorJson(const absl::Status& status) {
  return ErrorJson(status, status.code() == absl::StatusCode::kNotFound
                               ? "model_not_found"
                               : nullptr);
}

std::string FinishReasonName(serving::FinishReason reason, bool called_tools) {
  switch (reason) {
    case serving::FinishReason::kStop:
      return called_tools ? "tool_calls" : "stop";
    case serving::FinishReason::kLength:
      return "length";
    case serving::FinishReason::kCancelled:
    case serving::FinishReason::kError:
      return "abort";
  }
  return "stop";
}

LogprobsBuilder::LogprobsBuilder(Endpoint endpoint,
                                 const tokenizer::Tokenizer* tokenizer,
                                 int64_t text_offset)
    : endpoint_(endpoint), tokenizer_(tokenizer), text_offset_(text_offset) {}

std::string LogprobsBuilder::TokenText(int32_t id) const {
  return tokenizer_ == nullptr ? absl::StrCat("token_id:", id)
                               : tokenizer_->Decode({id}, false);
}

void LogprobsBuilder::Add(const serving::RequestOutput& out) {
  // The EOS or stop token that ended the sequence is not part of the text.
  size_t n = std::min(out.token_ids.size(), out.logprobs.size());
  if (out.ended_by_stop_token && n == out.token_ids.size() && n > 0) --n;
  for (size_t i = 0; i < n; ++i) {
    const std::string token = TokenText(out.token_ids[i]);
    const std::vector<serving::TokenLogprob> none;
    const std::vector<serving::TokenLogprob>& top =
        i < out.top_logprobs.size() ? out.top_logprobs[i] : none;
    if (endpoint_ == Endpoint::kChatCompletions) {
      OrderedJson alternatives = OrderedJson::array();
      for (const serving::TokenLogprob& t : top) {
        const std::string text = TokenText(t.id);
        alternatives.push_back(
            {{"token", text},
             {"logprob", t.logprob},
             {"bytes", std::vector<uint8_t>(text.begin(), text.end())}});
      }
      pending_.push_back(
          {{"token", token},
           {"logprob", out.logprobs[i]},
           {"bytes", std::vector<uint8_t>(token.begin(), token.end())},
           {"top_logprobs", std::move(alternatives)}});
    } else {
      if (pending_.is_null()) {
        pending_ = {{"tokens", OrderedJson::array()},
                    {"token_logprobs", OrderedJson::array()},
                    {"top_logprobs", OrderedJson::array()},
                    {"text_offset", OrderedJson::array()}};
      }
      pending_["tokens"].push_back(token);
      pending_["token_logprobs"].push_back(out.logprobs[i]);
      OrderedJson alternatives = OrderedJson::object();
      for (const serving::TokenLogprob& t : top) {
        alternatives[TokenText(t.id)] = t.logprob;
      }
      pending_["top_logprobs"].push_back(std::move(alternatives));
      pending_["text_offset"].push_back(text_offset_);
      text_offset_ += static_cast<int64_t>(token.size());
    }
  }
}

OrderedJson LogprobsBuilder::Take() {
  OrderedJson taken = std::move(pending_);
  pending_ = OrderedJson();
  if (endpoint_ == Endpoint::kChatCompletions) {
    return OrderedJson{
        {"content", taken.is_null() ? OrderedJson::array() : std::move(taken)}};
  }
  if (taken.is_null()) {
    taken = {{"tokens", OrderedJson::array()},
             {"token_logprobs", OrderedJson::array()},
             {"top_logprobs", OrderedJson::array()},
             {"text_offset", OrderedJson::array()}};
  }
  return taken;
}

OrderedJson ToolCallJson(const serving::ToolCall& call, int index,
                         bool with_index) {
  OrderedJson json;
  if (with_index) json["index"] = index;
  json["id"] = absl::StrCat("call_", next_call_id.fetch_add(1));
  json["type"] = "function";
  json["function"] = {{"name", call.name}, {"arguments", call.arguments}};
  return json;
}

}  // namespace ringmoe::server::openai

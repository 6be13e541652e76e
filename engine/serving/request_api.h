// The one request API every front end uses. A front end turns its wire
// request into a GenerationInput; PrepareRequest validates it once (model
// name, prompt, limits on what the client may ask), renders the chat
// template and tokenizes, and gives the scheduler Request. Errors are
// INVALID_ARGUMENT naming the field in the front end's own terms, with the
// request id, and never echo unbounded client text.
#ifndef RINGMOE_ENGINE_SERVING_REQUEST_API_H_
#define RINGMOE_ENGINE_SERVING_REQUEST_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/sampler.h"
#include "engine/serving/chat_output.h"
#include "engine/serving/scheduler.h"
#include "engine/serving/serving_metrics.h"
#include "nlohmann/json.hpp"

namespace ringmoe::tokenizer {
class ChatTemplate;
}  // namespace ringmoe::tokenizer

namespace ringmoe::serving {

// The one model a server process serves, and what every front end uses.
struct ServedModel {
  std::string name;
  const runtime::Engine* engine = nullptr;  // spec and tokenizer (read-only)
  Scheduler* scheduler = nullptr;           // all engine work goes here
  ServingMetrics* metrics = nullptr;        // may be null
  // The model's chat template; null when it has none (chat requests are
  // then refused).
  const tokenizer::ChatTemplate* chat_template = nullptr;
  // How the model writes reasoning and tool calls (from the template).
  ChatFormat chat_format = ChatFormat::kPlain;
};

// A conversation to render with the model's chat template.
struct ChatInput {
  nlohmann::ordered_json messages;  // OpenAI-style message objects
  nlohmann::ordered_json tools;     // a list of tool schemas, or null
  bool add_generation_prompt = true;
  // Extra template variables (enable_thinking, reasoning_effort, ...): an
  // object or null.
  nlohmann::ordered_json template_kwargs;
};

// Limits on what one request may ask for.
inline constexpr size_t kMaxRequestIdBytes = 256;
inline constexpr size_t kMaxStopStrings = 16;
inline constexpr size_t kMaxStopStringBytes = 1024;
inline constexpr int kMaxTopLogprobs = 20;

// A generation request as a front end states it.
struct GenerationInput {
  std::string request_id;  // empty: one is assigned
  std::string model;       // empty: the served model
  // The prompt: exactly one of text, input_ids and chat.
  std::optional<std::string> text;
  std::vector<int32_t> input_ids;
  std::optional<ChatInput> chat;
  // Text prompts only: add the tokenizer's special tokens (BOS). Unset:
  // true. A rendered chat prompt is encoded without them: the template
  // writes its own.
  std::optional<bool> add_special_tokens;
  std::optional<int32_t> max_tokens;
  runtime::SamplingParams sampling;
  bool logprobs = false;
  int top_logprobs = 0;  // alternatives per token, [0, kMaxTopLogprobs]
  // Keep special tokens in the output text (tool-call formats need them).
  bool keep_special_tokens = false;
  absl::Time deadline = absl::InfiniteFuture();
};

// OK when `requested` is empty or the served model's name; INVALID_ARGUMENT
// naming both (the requested name cut to 64 bytes) otherwise.
absl::Status CheckModelName(const ServedModel& model,
                            absl::string_view requested);

// `text` cut to `max_bytes` (on a UTF-8 character boundary) with "..."
// appended when cut: for error messages that quote the client.
std::string Quote(absl::string_view text, size_t max_bytes = 64);

// The model's tokenizer for a request naming `requested` as its model:
// INVALID_ARGUMENT for another model, FAILED_PRECONDITION when the model
// has none.
absl::StatusOr<const tokenizer::Tokenizer*> TokenizerFor(
    const ServedModel& model, absl::string_view requested);

// Renders `chat` with the model's template (FAILED_PRECONDITION when the
// model has none; the template's own error otherwise, INVALID_ARGUMENT).
absl::StatusOr<std::string> RenderChat(const ServedModel& model,
                                       const ChatInput& chat);

// Validates `input` and builds the scheduler Request (without its output
// callback). The scheduler checks what depends on its state and limits
// (prompt length, context, KV blocks) when the request is submitted. For a
// chat input, `chat_prompt` (when given) receives the rendered prompt.
absl::StatusOr<Request> PrepareRequest(const ServedModel& model,
                                       GenerationInput input,
                                       std::string* chat_prompt = nullptr);

}  // namespace ringmoe::serving

#endif  // RINGMOE_ENGINE_SERVING_REQUEST_API_H_

// OpenAI's HTTP API, the wire side: request bodies of /v1/completions and
// /v1/chat/completions turned into the serving core's GenerationInputs, and
// the JSON of responses, stream chunks and errors. Pure functions: the
// handler (server/openai_service.h) does the I/O.
#ifndef RINGMOE_SERVER_OPENAI_PROTOCOL_H_
#define RINGMOE_SERVER_OPENAI_PROTOCOL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/json.h"
#include "engine/serving/chat_output.h"
#include "engine/serving/request_api.h"
#include "engine/serving/scheduler.h"

namespace ringmoe::server::openai {

using json::OrderedJson;

// Sequences one request may ask for (prompts times n).
inline constexpr int kMaxChoices = 16;
// Completions' `logprobs`: alternatives per token at most.
inline constexpr int kMaxCompletionLogprobs = 5;

enum class Endpoint { kCompletions, kChatCompletions };

// A parsed request body.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;  // as sent (may be empty)
  // One per sequence to generate, in choice order (prompt-major: choice
  // i * n + j is prompt i's j-th sample); each without request id.
  std::vector<serving::GenerationInput> choices;
  int choices_per_prompt = 1;  // n
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // Completions: the prompt text returned before each choice's text.
  bool echo = false;
  // Chat: tools were offered, so tool calls are parsed from the output.
  bool parse_tool_calls = false;
  // Logprobs output: chat's logprobs.content or completions' logprobs.
  bool logprobs = false;
};

// Parses a body of the endpoint for the served model. INVALID_ARGUMENT
// naming the field for a body that is not the API's; NOT_FOUND for another
// model; the chat template's error for a conversation it refuses.
absl::StatusOr<ApiRequest> ParseRequest(Endpoint endpoint,
                                        absl::string_view body,
                                        const serving::ServedModel& model);

// HTTP status for a status of the serving core.
int HttpStatus(absl::StatusCode code);
// {"error": {"message", "type", "param", "code"}}: the type from the status
// code, `code` as given (null when nullptr).
std::string ErrorJson(const absl::Status& status, const char* code);
// As above with the code the serving core's status implies:
// "model_not_found" for NOT_FOUND (its only one: a request naming another
// model), null otherwise.
std::string ErrorJson(const absl::Status& status);

// "stop", "length", "tool_calls" (a chat choice that called tools and
// stopped), or "abort" for a cancelled or failed sequence.
std::string FinishReasonName(serving::FinishReason reason, bool called_tools);

// Log-probabilities of generated tokens, in the chat shape
// ({"content": [{"token", "logprob", "bytes", "top_logprobs"}]}) or the
// completions shape ({"tokens", "token_logprobs", "top_logprobs",
// "text_offset"}); appended to token by token.
class LogprobsBuilder {
 public:
  LogprobsBuilder(Endpoint endpoint, const tokenizer::Tokenizer* tokenizer,
                  int64_t text_offset);
  void Add(const serving::RequestOutput& out);
  // The entries added since the last Take (for stream chunks), or all.
  OrderedJson Take();

 private:
  std::string TokenText(int32_t id) const;

  const Endpoint endpoint_;
  const tokenizer::Tokenizer* const tokenizer_;
  int64_t text_offset_;
  OrderedJson pending_;
};

// One tool call in the API's shape, with a fresh id.
OrderedJson ToolCallJson(const serving::ToolCall& call, int index,
                         bool with_index);

}  // namespace ringmoe::server::openai

#endif  // RINGMOE_SERVER_OPENAI_PROTOCOL_H_

// libFuzzer target: an OpenAI-compatible request body, parsed as the HTTP
// front end parses it before anything reaches the engine.
//
// Input: one selector byte, then the body. The selector's bit 0 picks the
// endpoint (1: /v1/chat/completions, 0: /v1/completions) and bits 1-2 the
// served model's chat format, which changes how chat messages are checked.
// ParseRequest reads only the model's name and chat format, so no engine is
// loaded.
//
// Checked: no crash or sanitizer report; failures are INVALID_ARGUMENT
// (NOT_FOUND for another model's name); an accepted request has between 1
// and kMaxChoices choices, n per prompt, each with exactly one prompt.
#include "tests/fuzz/openai_request_fuzzer.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/serving/chat_output.h"
#include "engine/serving/request_api.h"
#include "server/openai_protocol.h"

namespace {

using ::ringmoe::server::openai::ApiRequest;
using ::ringmoe::server::openai::Endpoint;
using ::ringmoe::server::openai::kMaxChoices;

[[noreturn]] void Fail(const char* what, absl::string_view detail = "") {
  std::fprintf(stderr, "openai request fuzzer: %s %.*s\n", what,
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

void CheckRequest(const ApiRequest& request, Endpoint endpoint) {
  if (request.endpoint != endpoint) Fail("endpoint changed");
  const int n = request.choices_per_prompt;
  const size_t choices = request.choices.size();
  if (n < 1 || choices < 1 || choices > static_cast<size_t>(kMaxChoices) ||
      choices % n != 0) {
    Fail("accepted a request with a bad number of choices");
  }
  for (const auto& choice : request.choices) {
    const int prompts = choice.text.has_value() + !choice.input_ids.empty() +
                        choice.chat.has_value();
    if (prompts != 1) Fail("a choice without exactly one prompt");
    if ((endpoint == Endpoint::kChatCompletions) != choice.chat.has_value()) {
      Fail("prompt kind does not match the endpoint");
    }
  }
}

}  // namespace

namespace ringmoe::fuzz {

absl::StatusOr<server::openai::ApiRequest> ParseOpenAiInput(
    absl::string_view input) {
  if (input.empty()) return absl::InvalidArgumentError("no selector byte");
  const uint8_t selector = static_cast<uint8_t>(input[0]);
  const Endpoint endpoint =
      (selector & 1) != 0 ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  serving::ServedModel model;
  model.name = "fuzz-model";
  model.chat_format = static_cast<serving::ChatFormat>((selector >> 1) & 3);
  absl::StatusOr<ApiRequest> request =
      server::openai::ParseRequest(endpoint, input.substr(1), model);
  if (!request.ok()) {
    if (request.status().code() != absl::StatusCode::kInvalidArgument &&
        request.status().code() != absl::StatusCode::kNotFound) {
      Fail("unexpected error code:", request.status().ToString());
    }
    return request;
  }
  CheckRequest(*request, endpoint);
  return request;
}

}  // namespace ringmoe::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringmoe::fuzz::ParseOpenAiInput(
      absl::string_view(reinterpret_cast<const char*>(data), size))
      .IgnoreError();
  return 0;
}

#include "server/openai_protocol.h"

#include <string>

#include "gtest/gtest.h"

namespace ringmoe::server::openai {
namespace {

serving::ServedModel Model(
    serving::ChatFormat format = serving::ChatFormat::kThinkTags) {
  serving::ServedModel model;
  model.name = "m";
  model.chat_format = format;
  return model;
}

absl::StatusOr<ApiRequest> Chat(const std::string& body) {
  return ParseRequest(Endpoint::kChatCompletions, body, Model());
}

void ExpectInvalid(const absl::StatusOr<ApiRequest>& r,
                   const std::string& message) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(message), std::string::npos)
      << r.status();
}

TEST(OpenAiProtocolTest, ChatSettingsAndMessagesKeepTheirOrder) {
  absl::StatusOr<ApiRequest> r = Chat(R"({
    "model": "m",
    "messages": [{"role": "user", "content": "hi", "z": 1, "a": 2.0}],
    "max_completion_tokens": 7, "max_tokens": 99, "temperature": 0.5,
    "top_p": 0.9, "top_k": -1, "min_p": 0.1, "seed": 42,
    "stop": ["x", "y"], "presence_penalty": 0.5, "frequency_penalty": -0.5,
    "n": 2, "stream": true, "stream_options": {"include_usage": true},
    "logprobs": true, "top_logprobs": 3,
    "tools": [{"type": "function", "function": {"name": "f",
               "parameters": {"type": "object", "properties": {}}}}],
    "chat_template_kwargs": {"enable_thinking": false},
    "reasoning_effort": "low"})");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->choices.size(), 2u);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->parse_tool_calls);
  EXPECT_TRUE(r->logprobs);
  const serving::GenerationInput& in = r->choices[0];
  EXPECT_EQ(in.max_tokens, 7);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(in.sampling.temperature, 0.5f);
  EXPECT_EQ(in.sampling.top_k, 0);
  EXPECT_EQ(in.sampling.stop_strings, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(in.top_logprobs, 3);
  EXPECT_EQ(*in.sampling.seed, 42u);
  EXPECT_EQ(*r->choices[1].sampling.seed, 43u);  // choices differ
  ASSERT_TRUE(in.chat.has_value());
  EXPECT_EQ(in.chat->messages.dump(),
            R"([{"role":"user","content":"hi","z":1,"a":2.0}])");
  EXPECT_EQ(in.chat->template_kwargs.dump(),
            R"({"enable_thinking":false,"reasoning_effort":"low"})");
  EXPECT_TRUE(in.chat->add_generation_prompt);
  EXPECT_FALSE(in.keep_special_tokens);
}

TEST(OpenAiProtocolTest, ToolChoiceNoneLeavesToolsOut) {
  absl::StatusOr<ApiRequest> r = Chat(R"({"messages": [{"role": "user"}],
      "tools": [{"type": "function", "function": {"name": "f"}}],
      "tool_choice": "none"})");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->parse_tool_calls);
  EXPECT_TRUE(r->choices[0].chat->tools.is_null());
}

TEST(OpenAiProtocolTest, HarmonyKeepsSpecialTokens) {
  absl::StatusOr<ApiRequest> r =
      ParseRequest(Endpoint::kChatCompletions,
                   R"({"messages": [{"role": "user", "content": "x"}]})",
                   Model(serving::ChatFormat::kHarmony));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->choices[0].keep_special_tokens);
}

TEST(OpenAiProtocolTest, CompletionPromptsTimesN) {
  absl::StatusOr<ApiRequest> r =
      ParseRequest(Endpoint::kCompletions,
                   R"({"prompt": ["a", [1, 2]], "n": 3, "logprobs": 2,
                       "echo": true})",
                   Model());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->choices.size(), 6u);
  EXPECT_EQ(r->choices_per_prompt, 3);
  EXPECT_EQ(*r->choices[0].text, "a");
  EXPECT_EQ(r->choices[3].input_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(r->choices[3].top_logprobs, 2);
  EXPECT_TRUE(r->echo);
  r = ParseRequest(Endpoint::kCompletions, R"({"prompt": [5, 6]})", Model());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->choices[0].input_ids, (std::vector<int32_t>{5, 6}));
}

TEST(OpenAiProtocolTest, RefusesWhatIsNotTheApi) {
  ExpectInvalid(Chat("{"), "not valid JSON");
  ExpectInvalid(Chat("\"x\""), "must be a JSON object");
  ExpectInvalid(Chat(std::string("{\"messages\": \"\xff\"}")), "UTF-8");
  ExpectInvalid(Chat(R"({"messages": []})"), "'messages' must be a non-empty");
  ExpectInvalid(Chat(R"({})"), "'messages' is required");
  ExpectInvalid(Chat(R"({"messages": [{"content": "x"}]})"),
                "messages[0].role");
  ExpectInvalid(Chat(R"({"messages": [{"role": "user", "content": 5}]})"),
                "messages[0].content");
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  ExpectInvalid(Chat("{" + user + R"(, "n": 17})"), "'n' must lie in [1, 16]");
  ExpectInvalid(Chat("{" + user + R"(, "n": 1.5})"), "'n' must be an integer");
  ExpectInvalid(Chat("{" + user + R"(, "temperature": 3})"), "'temperature'");
  ExpectInvalid(Chat("{" + user + R"(, "temperature": "1"})"),
                "'temperature' must be a number");
  ExpectInvalid(Chat("{" + user + R"(, "seed": 18446744073709551615})"),
                "'seed' must be an integer within 64 bits");
  ExpectInvalid(Chat("{" + user + R"(, "top_logprobs": 2})"),
                "needs 'logprobs'");
  ExpectInvalid(Chat("{" + user + R"(, "top_logprobs": 21, "logprobs": true})"),
                "'top_logprobs' must lie in [0, 20]");
  ExpectInvalid(Chat("{" + user + R"(, "stop": 5})"), "'stop'");
  ExpectInvalid(Chat("{" + user + R"(, "tools": [{"type": "function"}]})"),
                "tools[0]");
  ExpectInvalid(Chat("{" + user + R"(, "tool_choice": {"type": "function"}})"),
                "not supported");
  ExpectInvalid(Chat("{" + user + R"(, "logit_bias": {"5": 10}})"),
                "'logit_bias' is not supported");
  ExpectInvalid(Chat("{" + user + R"(, "messages": [], "messages": []})"),
                "duplicate key");
  ExpectInvalid(ParseRequest(Endpoint::kCompletions,
                             R"({"prompt": ["a", "b"], "n": 9})", Model()),
                "at most 16");
  ExpectInvalid(
      ParseRequest(Endpoint::kCompletions, R"({"prompt": [-1]})", Model()),
      "non-negative");
  absl::StatusOr<ApiRequest> other = Chat("{" + user + R"(, "model": "x"})");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kNotFound);
}

TEST(OpenAiProtocolTest, ErrorsInOpenAiShape) {
  EXPECT_EQ(ErrorJson(absl::InvalidArgumentError("bad \"x\"")),
            R"({"error":{"message":"bad \"x\"","type":"invalid_request_error",)"
            R"("param":null,"code":null}})");
  EXPECT_EQ(ErrorJson(absl::NotFoundError("The model 'x' does not exist")),
            R"({"error":{"message":"The model 'x' does not exist",)"
            R"("type":"not_found_error","param":null,)"
            R"("code":"model_not_found"}})");
  EXPECT_EQ(ErrorJson(absl::NotFoundError("no route"), nullptr),
            R"({"error":{"message":"no route","type":"not_found_error",)"
            R"("param":null,"code":null}})");
  EXPECT_EQ(HttpStatus(absl::StatusCode::kResourceExhausted), 429);
  EXPECT_EQ(HttpStatus(absl::StatusCode::kNotFound), 404);
  EXPECT_EQ(HttpStatus(absl::StatusCode::kUnavailable), 503);
  EXPECT_EQ(HttpStatus(absl::StatusCode::kInternal), 500);
  EXPECT_EQ(FinishReasonName(serving::FinishReason::kStop, true), "tool_calls");
  EXPECT_EQ(FinishReasonName(serving::FinishReason::kLength, true), "length");
}

}  // namespace
}  // namespace ringmoe::server::openai

#include "engine/serving/request_api.h"

#include <memory>
#include <string>

#include "engine/runtime/engine.h"
#include "engine/tokenizer/chat_template.h"
#include "gtest/gtest.h"

namespace ringmoe::serving {
namespace {

using Json = nlohmann::ordered_json;

// The adder (a tokenizer, BOS 1) with a template that shows what it was
// given: roles, contents and tool-call arguments, as JSON.
class RequestApiTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    runtime::EngineOptions options;
    options.model_dir = "tests/testdata/moe-adder";
    auto engine = runtime::Engine::Load(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = engine->release();
    auto tmpl = tokenizer::ChatTemplate::FromSource(
        "{{ bos_token }}{% for m in messages %}{{ m['role'] }}:"
        "{{ m['content'] }}{% if m['tool_calls'] is defined %}"
        "{{ m['tool_calls'][0]['function']['arguments'] | tojson }}"
        "{% endif %};{% endfor %}"
        "{% if tools %}tools={{ tools | length }};{% endif %}"
        "{% if enable_thinking is defined %}think={{ enable_thinking }};"
        "{% endif %}{% if add_generation_prompt %}>{% endif %}",
        Json{{"bos_token", "<s>"}});
    ASSERT_TRUE(tmpl.ok()) << tmpl.status();
    template_ = new tokenizer::ChatTemplate(*std::move(tmpl));
  }
  static void TearDownTestSuite() {
    delete template_;
    delete engine_;
  }

  ServedModel Model(ChatFormat format = ChatFormat::kThinkTags) const {
    ServedModel model;
    model.name = "adder";
    model.engine = engine_;
    model.chat_template = template_;
    model.chat_format = format;
    return model;
  }

  static runtime::Engine* engine_;
  static tokenizer::ChatTemplate* template_;
};

runtime::Engine* RequestApiTest::engine_;
tokenizer::ChatTemplate* RequestApiTest::template_;

TEST_F(RequestApiTest, TextIdsAndLimits) {
  GenerationInput input;
  input.text = "37+485=";
  input.max_tokens = 4;
  input.sampling.temperature = 0;
  absl::StatusOr<Request> r = PrepareRequest(Model(), input);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_ids, engine_->tokenizer()->Encode("37+485=", true));
  EXPECT_EQ(r->prompt_ids[0], 1);
  EXPECT_EQ(r->max_tokens, 4);
  EXPECT_FALSE(r->id.empty());
  input.add_special_tokens = false;
  EXPECT_EQ(PrepareRequest(Model(), input)->prompt_ids,
            engine_->tokenizer()->Encode("37+485=", false));

  GenerationInput ids;
  ids.input_ids = {5, 6};
  ids.request_id = "mine";
  r = PrepareRequest(Model(), ids);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, "mine");
  EXPECT_EQ(r->prompt_ids, (std::vector<int32_t>{5, 6}));
}

TEST_F(RequestApiTest, ChatIsRenderedAndNormalised) {
  GenerationInput input;
  input.chat.emplace();
  input.chat->messages = Json::parse(R"([
      {"role": "user", "content": [{"type": "text", "text": "a"},
                                   {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "f", "arguments": "{\"x\": 1}"}}]}])");
  input.chat->tools = Json::parse(R"([{"type": "function",
                                       "function": {"name": "f"}}])");
  input.chat->template_kwargs = Json{{"enable_thinking", false}};
  std::string prompt;
  absl::StatusOr<Request> r = PrepareRequest(Model(), input, &prompt);
  ASSERT_TRUE(r.ok()) << r.status();
  // Parts joined; JSON-text arguments became an object (null content
  // prints as Python's None).
  EXPECT_EQ(prompt,
            "<s>user:a\nb;assistant:None{\"x\": 1};tools=1;think=False;>");
  EXPECT_EQ(r->prompt_ids, engine_->tokenizer()->Encode(prompt, false));
  // DeepSeek-V3's template concatenates arguments: they stay text.
  r = PrepareRequest(Model(ChatFormat::kDeepSeekV3), input, &prompt);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(prompt.find(R"("{\"x\": 1}")"), std::string::npos) << prompt;
}

TEST_F(RequestApiTest, RefusesWithTheFieldAndBoundedEchoes) {
  auto expect = [this](GenerationInput input, absl::StatusCode code,
                       const std::string& want) {
    absl::Status s = PrepareRequest(Model(), std::move(input)).status();
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
    EXPECT_LT(s.message().size(), 600u) << s;
  };
  GenerationInput empty;
  expect(empty, absl::StatusCode::kInvalidArgument, "the prompt is empty");
  GenerationInput two;
  two.text = "1";
  two.input_ids = {1};
  expect(two, absl::StatusCode::kInvalidArgument, "give one prompt");
  GenerationInput model;
  model.text = "1";
  model.model = std::string(100000, 'm');
  expect(model, absl::StatusCode::kInvalidArgument, "unknown model 'mmm");
  GenerationInput id;
  id.text = "1";
  id.request_id = std::string(100000, 'i');
  expect(id, absl::StatusCode::kInvalidArgument, "more than the limit of 256");
  GenerationInput stops;
  stops.text = "1";
  stops.sampling.stop_strings.assign(17, "x");
  expect(stops, absl::StatusCode::kInvalidArgument, "at most 16 stop strings");
  GenerationInput top;
  top.text = "1";
  top.top_logprobs = 3;
  expect(top, absl::StatusCode::kInvalidArgument, "needs logprobs");
  GenerationInput image;
  image.chat.emplace();
  image.chat->messages =
      Json::parse(R"([{"role": "user", "content": [{"type": "image_url"}]}])");
  expect(image, absl::StatusCode::kInvalidArgument,
         "messages[0].content[0] must be a text part");
  GenerationInput no_messages;
  no_messages.chat.emplace();
  no_messages.chat->messages = Json::array();
  expect(no_messages, absl::StatusCode::kInvalidArgument, "non-empty list");

  ServedModel bare = Model();
  bare.chat_template = nullptr;
  GenerationInput chat;
  chat.chat.emplace();
  chat.chat->messages = Json::parse(R"([{"role": "user", "content": "x"}])");
  absl::Status s = PrepareRequest(bare, chat).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("has no chat template"), std::string::npos);
}

TEST(QuoteTest, CutsOnACharacterBoundary) {
  EXPECT_EQ(Quote("short"), "short");
  EXPECT_EQ(Quote(std::string(100, 'a'), 4), "aaaa...");
  // "é" is two bytes: a cut inside it backs off to its start.
  EXPECT_EQ(Quote("aé", 2), "a...");
}

}  // namespace
}  // namespace ringmoe::serving

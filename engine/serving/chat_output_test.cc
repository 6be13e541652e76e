#include "engine/serving/chat_output.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe::serving {
namespace {

// Everything a parser delivers for `text`, fed in pieces of `chunk` bytes.
ChatDelta ParseAll(ChatFormat format, const std::string& text, size_t chunk,
                   const std::string& prompt = "", bool tools = true) {
  ChatOutputParser parser(format, prompt, tools);
  ChatDelta all;
  auto add = [&all](ChatDelta d) {
    all.content += d.content;
    all.reasoning += d.reasoning;
    for (ToolCall& c : d.tool_calls) all.tool_calls.push_back(std::move(c));
  };
  for (size_t i = 0; i < text.size(); i += chunk) {
    add(parser.Push(text.substr(i, chunk)));
  }
  add(parser.Finish());
  return all;
}

class ChatOutputTest : public ::testing::TestWithParam<size_t> {};

TEST_P(ChatOutputTest, QwenThinkingThenAnswer) {
  ChatDelta d = ParseAll(
      ChatFormat::kThinkTags,
      "<think>\nLet me add.\n2+2 is 4.\n</think>\n\nIt is 4.", GetParam());
  EXPECT_EQ(d.reasoning, "Let me add.\n2+2 is 4.");
  EXPECT_EQ(d.content, "It is 4.");
  EXPECT_TRUE(d.tool_calls.empty());
}

TEST_P(ChatOutputTest, ReasoningOpenedByThePrompt) {
  ChatDelta d = ParseAll(ChatFormat::kThinkTags, "hmm\n</think>\n\nYes.",
                         GetParam(), "<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(d.reasoning, "hmm");
  EXPECT_EQ(d.content, "Yes.");
  // A closed think block in the prompt does not open one in the output.
  d = ParseAll(ChatFormat::kThinkTags, "Yes.", GetParam(),
               "<think>\n\n</think>\n\n");
  EXPECT_EQ(d.content, "Yes.");
  EXPECT_EQ(d.reasoning, "");
}

TEST_P(ChatOutputTest, HermesToolCalls) {
  ChatDelta d = ParseAll(
      ChatFormat::kThinkTags,
      "I will check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n",
      GetParam());
  EXPECT_EQ(d.content, "I will check.");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\":\"Paris\",\"days\":2}");
  EXPECT_EQ(d.tool_calls[1].name, "now");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
}

TEST_P(ChatOutputTest, QwenCoderXmlToolCall) {
  ChatDelta d = ParseAll(ChatFormat::kThinkTags,
                         "<tool_call>\n<function=search>\n<parameter=query>\n"
                         "ring buffers\n</parameter>\n<parameter=limit>\n5\n"
                         "</parameter>\n</function>\n</tool_call>",
                         GetParam());
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "search");
  EXPECT_EQ(d.tool_calls[0].arguments,
            "{\"query\":\"ring buffers\",\"limit\":5}");
  EXPECT_EQ(d.content, "");
}

TEST_P(ChatOutputTest, BrokenToolCallIsContent) {
  const std::string text = "<tool_call>\n{\"name\": oops}\n</tool_call>";
  ChatDelta d = ParseAll(ChatFormat::kThinkTags, text, GetParam());
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, text);
  // Unterminated: the text as written too.
  d = ParseAll(ChatFormat::kThinkTags, "<tool_call>\n{\"name\"", GetParam());
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, "<tool_call>\n{\"name\"");
}

TEST_P(ChatOutputTest, WithoutToolsTheMarkupIsContent) {
  const std::string text = "<tool_call>{\"name\": \"f\"}</tool_call>";
  ChatDelta d = ParseAll(ChatFormat::kThinkTags, text, GetParam(), "",
                         /*tools=*/false);
  EXPECT_TRUE(d.tool_calls.empty());
  EXPECT_EQ(d.content, text);
}

TEST_P(ChatOutputTest, DeepSeekToolCalls) {
  ChatDelta d = ParseAll(
      ChatFormat::kDeepSeekV3,
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
      "get_weather\n```json\n{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜>\n"
      "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```"
      "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
      GetParam());
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\": \"Oslo\"}");
  EXPECT_EQ(d.tool_calls[1].name, "get_time");
}

TEST_P(ChatOutputTest, HarmonyChannels) {
  ChatDelta d = ParseAll(ChatFormat::kHarmony,
                         "<|channel|>analysis<|message|>User wants sum. Easy."
                         "<|end|><|start|>assistant<|channel|>final<|message|>"
                         "The sum is 5.",
                         GetParam());
  EXPECT_EQ(d.reasoning, "User wants sum. Easy.");
  EXPECT_EQ(d.content, "The sum is 5.");
}

TEST_P(ChatOutputTest, HarmonyToolCall) {
  ChatDelta d = ParseAll(
      ChatFormat::kHarmony,
      "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant"
      "<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>{\"location\":\"Tokyo\"}",
      GetParam());
  EXPECT_EQ(d.reasoning, "Need weather.");
  EXPECT_EQ(d.content, "");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"location\":\"Tokyo\"}");
}

TEST_P(ChatOutputTest, PlainKeepsEverything) {
  const std::string text = "  <think>not special here</think>\n";
  EXPECT_EQ(ParseAll(ChatFormat::kPlain, text, GetParam()).content, text);
}

INSTANTIATE_TEST_SUITE_P(Chunks, ChatOutputTest,
                         ::testing::Values(1, 2, 3, 7, 1000));

TEST(DetectChatFormatTest, FromTemplateMarkers) {
  EXPECT_EQ(DetectChatFormat("{{ '<|im_start|>' }}<tool_call>"),
            ChatFormat::kThinkTags);
  EXPECT_EQ(DetectChatFormat("<｜tool▁calls▁begin｜>"),
            ChatFormat::kDeepSeekV3);
  EXPECT_EQ(DetectChatFormat("<|start|>assistant<|channel|>final"),
            ChatFormat::kHarmony);
  EXPECT_EQ(DetectChatFormat("[INST] {{ m }} [/INST]"), ChatFormat::kPlain);
  EXPECT_TRUE(NeedsSpecialTokens(ChatFormat::kHarmony));
  EXPECT_FALSE(NeedsSpecialTokens(ChatFormat::kThinkTags));
}

}  // namespace
}  // namespace ringmoe::serving

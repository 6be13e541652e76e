// What a chat model's output means: the answer, the reasoning before it and
// the tool calls in it, in the format the model was trained to write. The
// format is recognised from the markers the model's chat template writes
// itself (a model is trained on its own template), so no flag has to name it.
//
// Formats:
//   kPlain       everything is content.
//   kThinkTags   <think>reasoning</think>, tool calls as
//                <tool_call>{"name": ..., "arguments": {...}}</tool_call>
//                (Qwen2.5/Qwen3, Hermes) or, inside the same tags,
//                <function=NAME><parameter=P>value</parameter></function>
//                (Qwen3-Coder).
//   kDeepSeekV3  <think> as above; tool calls as
//                <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>
//                NAME\n```json\nARGS\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>.
//   kHarmony     gpt-oss: messages <|channel|>C[ to=R]<|message|>BODY<|end|>;
//                channel analysis is reasoning, final is content, a
//                commentary message to=functions.NAME is a tool call.
// kDeepSeekV3 and kHarmony mark structure with special tokens: the text
// must be decoded with special tokens kept (NeedsSpecialTokens).
#ifndef RINGMOE_ENGINE_SERVING_CHAT_OUTPUT_H_
#define RINGMOE_ENGINE_SERVING_CHAT_OUTPUT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace ringmoe::serving {

enum class ChatFormat { kPlain, kThinkTags, kDeepSeekV3, kHarmony };

// The format of a model whose chat template is `template_source`.
ChatFormat DetectChatFormat(absl::string_view template_source);
// "plain", "think_tags", "deepseek_v3", "harmony".
absl::string_view ChatFormatName(ChatFormat format);
bool NeedsSpecialTokens(ChatFormat format);

struct ToolCall {
  std::string name;
  // The arguments as JSON text (an object, as the model wrote it, or as
  // parsed and written again for formats that are not JSON).
  std::string arguments;
};

// Output that became final since the last call.
struct ChatDelta {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> tool_calls;

  bool empty() const {
    return content.empty() && reasoning.empty() && tool_calls.empty();
  }
};

// Splits a stream of generated text into content, reasoning and tool calls.
// Text that may be the start of a marker is held back until the next text
// decides it; a tool call is delivered whole once its end marker arrives. A
// tool call that does not parse is delivered as content, as written.
class ChatOutputParser {
 public:
  // `prompt` is the rendered prompt: when it ends inside an open <think>
  // block (templates that start the reasoning for the model), the output
  // starts as reasoning. With `parse_tool_calls` false (no tools were
  // offered), tool-call markup is content.
  ChatOutputParser(ChatFormat format, absl::string_view prompt,
                   bool parse_tool_calls);

  ChatDelta Push(absl::string_view text);
  // The end of the output: whatever is held back.
  ChatDelta Finish();

 private:
  enum class State { kContent, kReasoning, kToolCalls, kHarmonyHeader };

  // Consumes as much of pending_ as can be decided.
  void Drain(bool at_end, ChatDelta& out);
  // Appends text to the part the current state (or harmony channel) feeds.
  void Emit(absl::string_view text, ChatDelta& out);
  // Parses the tool-call block `block` (without its outer markers).
  void EndToolCalls(absl::string_view block, absl::string_view as_written,
                    ChatDelta& out);
  void EndHarmonyHeader(absl::string_view header);

  const ChatFormat format_;
  const bool parse_tool_calls_;
  State state_ = State::kContent;
  std::string pending_;
  // Drop newlines at the start of the next reasoning or content text.
  bool skip_newlines_ = false;
  // Harmony: the current message's channel and recipient.
  std::string channel_;
  std::string recipient_;
};

}  // namespace ringmoe::serving

#endif  // RINGMOE_ENGINE_SERVING_CHAT_OUTPUT_H_

#include "engine/serving/chat_output.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace ringmoe::serving {
namespace {

using Json = nlohmann::ordered_json;

constexpr absl::string_view kThinkBegin = "<think>";
constexpr absl::string_view kThinkEnd = "</think>";
constexpr absl::string_view kToolCallBegin = "<tool_call>";
constexpr absl::string_view kToolCallEnd = "</tool_call>";
constexpr absl::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr absl::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr absl::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr absl::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr absl::string_view kDsSep = "<｜tool▁sep｜>";
constexpr absl::string_view kHarmonyChannel = "<|channel|>";
constexpr absl::string_view kHarmonyMessage = "<|message|>";
constexpr absl::string_view kHarmonyEnds[] = {"<|end|>", "<|call|>",
                                              "<|return|>", "<|start|>"};

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// The earliest occurrence of any of `markers` in `text`.
struct Found {
  size_t pos = absl::string_view::npos;
  absl::string_view marker;
};
Found FindFirst(absl::string_view text,
                std::initializer_list<absl::string_view> markers) {
  Found found;
  for (absl::string_view m : markers) {
    const size_t pos = text.find(m);
    if (pos < found.pos) found = {pos, m};
  }
  return found;
}

// Length of the longest suffix of `text` that is a proper prefix of one of
// `markers`.
size_t PartialMarker(absl::string_view text,
                     std::initializer_list<absl::string_view> markers) {
  size_t longest = 0;
  for (absl::string_view m : markers) {
    for (size_t n = std::min(text.size(), m.size() - 1); n > longest; --n) {
      if (absl::EndsWith(text, m.substr(0, n))) {
        longest = n;
        break;
      }
    }
  }
  return longest;
}

// A JSON value's text when `text` holds exactly one JSON object.
bool ParseObject(absl::string_view text, Json& out) {
  out = Json::parse(text.begin(), text.end(), nullptr,
                    /*allow_exceptions=*/false);
  return out.is_object();
}

// <function=NAME><parameter=P>value</parameter>...</function> (Qwen3-Coder):
// each value is JSON when it parses as JSON, else the string as written.
bool ParseXmlFunction(absl::string_view body, ToolCall& call) {
  body = absl::StripAsciiWhitespace(body);
  if (!absl::ConsumePrefix(&body, "<function=")) return false;
  const size_t name_end = body.find('>');
  if (name_end == absl::string_view::npos) return false;
  call.name = std::string(absl::StripAsciiWhitespace(body.substr(0, name_end)));
  body.remove_prefix(name_end + 1);
  body = absl::StripAsciiWhitespace(body);
  if (!absl::ConsumeSuffix(&body, "</function>")) return false;
  Json args = Json::object();
  while (true) {
    body = absl::StripAsciiWhitespace(body);
    if (body.empty()) break;
    if (!absl::ConsumePrefix(&body, "<parameter=")) return false;
    const size_t key_end = body.find('>');
    const size_t value_end = body.find("</parameter>");
    if (key_end == absl::string_view::npos ||
        value_end == absl::string_view::npos || value_end < key_end) {
      return false;
    }
    const std::string key(absl::StripAsciiWhitespace(body.substr(0, key_end)));
    absl::string_view value = body.substr(key_end + 1, value_end - key_end - 1);
    // The template writes "\n" around each value.
    absl::ConsumePrefix(&value, "\n");
    absl::ConsumeSuffix(&value, "\n");
    Json parsed = Json::parse(value.begin(), value.end(), nullptr, false);
    args[key] = parsed.is_discarded() ? Json(std::string(value)) : parsed;
    body.remove_prefix(value_end + absl::string_view("</parameter>").size());
  }
  call.arguments = args.dump(-1, ' ', false, Json::error_handler_t::replace);
  return !call.name.empty();
}

// {"name": ..., "arguments": {...}} (Hermes, Qwen).
bool ParseJsonCall(absl::string_view body, ToolCall& call) {
  Json json;
  if (!ParseObject(absl::StripAsciiWhitespace(body), json)) return false;
  if (!json.contains("name") || !json["name"].is_string()) return false;
  call.name = json["name"].get<std::string>();
  const Json& args = json.contains("arguments")    ? json["arguments"]
                     : json.contains("parameters") ? json["parameters"]
                                                   : Json::object();
  if (args.is_string()) {
    call.arguments = args.get<std::string>();
  } else {
    call.arguments = args.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  return true;
}

// TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n``` (DeepSeek-V3).
bool ParseDeepSeekCall(absl::string_view body, ToolCall& call) {
  const size_t sep = body.find(kDsSep);
  if (sep == absl::string_view::npos) return false;
  body.remove_prefix(sep + kDsSep.size());
  const size_t newline = body.find('\n');
  if (newline == absl::string_view::npos) return false;
  call.name = std::string(absl::StripAsciiWhitespace(body.substr(0, newline)));
  absl::string_view args = absl::StripAsciiWhitespace(body.substr(newline));
  if (absl::ConsumePrefix(&args, "```")) {
    absl::ConsumePrefix(&args, "json");
    if (!absl::ConsumeSuffix(&args, "```")) return false;
  }
  args = absl::StripAsciiWhitespace(args);
  Json json;
  if (!ParseObject(args, json)) return false;
  call.arguments = std::string(args);
  return !call.name.empty();
}

}  // namespace

ChatFormat DetectChatFormat(absl::string_view source) {
  if (absl::StrContains(source, "<|channel|>")) return ChatFormat::kHarmony;
  if (absl::StrContains(source, kDsCallsBegin)) return ChatFormat::kDeepSeekV3;
  if (absl::StrContains(source, kToolCallBegin) ||
      absl::StrContains(source, kThinkBegin)) {
    return ChatFormat::kThinkTags;
  }
  return ChatFormat::kPlain;
}

absl::string_view ChatFormatName(ChatFormat format) {
  switch (format) {
    case ChatFormat::kPlain:
      return "plain";
    case ChatFormat::kThinkTags:
      return "think_tags";
    case ChatFormat::kDeepSeekV3:
      return "deepseek_v3";
    case ChatFormat::kHarmony:
      return "harmony";
  }
  return "plain";
}

bool NeedsSpecialTokens(ChatFormat format) {
  return format == ChatFormat::kDeepSeekV3 || format == ChatFormat::kHarmony;
}

ChatOutputParser::ChatOutputParser(ChatFormat format, absl::string_view prompt,
                                   bool parse_tool_calls)
    : format_(format), parse_tool_calls_(parse_tool_calls) {
  if (format_ == ChatFormat::kHarmony) {
    state_ = State::kHarmonyHeader;
    return;
  }
  if (format_ == ChatFormat::kPlain) return;
  const size_t open = prompt.rfind(kThinkBegin);
  if (open != absl::string_view::npos &&
      prompt.find(kThinkEnd, open) == absl::string_view::npos) {
    state_ = State::kReasoning;
    skip_newlines_ = true;
  }
}

ChatDelta ChatOutputParser::Push(absl::string_view text) {
  ChatDelta out;
  pending_.append(text.data(), text.size());
  Drain(/*at_end=*/false, out);
  return out;
}

ChatDelta ChatOutputParser::Finish() {
  ChatDelta out;
  Drain(/*at_end=*/true, out);
  return out;
}

void ChatOutputParser::Emit(absl::string_view text, ChatDelta& out) {
  if (skip_newlines_) {
    while (!text.empty() && (text.front() == '\n' || text.front() == '\r')) {
      text.remove_prefix(1);
    }
    if (text.empty()) return;
    skip_newlines_ = false;
  }
  (state_ == State::kReasoning ? out.reasoning : out.content)
      .append(text.data(), text.size());
}

void ChatOutputParser::EndHarmonyHeader(absl::string_view header) {
  channel_.clear();
  recipient_.clear();
  const size_t channel = header.find(kHarmonyChannel);
  if (channel != absl::string_view::npos) {
    absl::string_view rest = header.substr(channel + kHarmonyChannel.size());
    const size_t end = rest.find_first_of(" <");
    channel_ = std::string(rest.substr(0, end));
  }
  const size_t to = header.find("to=");
  if (to != absl::string_view::npos) {
    absl::string_view rest = header.substr(to + 3);
    const size_t end = rest.find_first_of(" <");
    recipient_ = std::string(rest.substr(0, end));
  }
  if (parse_tool_calls_ && absl::StartsWith(recipient_, "functions.")) {
    state_ = State::kToolCalls;
  } else if (channel_ == "analysis") {
    state_ = State::kReasoning;
  } else {
    state_ = State::kContent;
  }
}

void ChatOutputParser::EndToolCalls(absl::string_view block,
                                    absl::string_view as_written,
                                    ChatDelta& out) {
  std::vector<ToolCall> calls;
  bool ok = true;
  if (format_ == ChatFormat::kThinkTags) {
    ToolCall call;
    ok = ParseJsonCall(block, call) || ParseXmlFunction(block, call);
    calls.push_back(std::move(call));
  } else if (format_ == ChatFormat::kDeepSeekV3) {
    for (absl::string_view part : absl::StrSplit(block, kDsCallBegin)) {
      if (absl::StripAsciiWhitespace(part).empty()) continue;
      ToolCall call;
      absl::string_view body = part;
      const size_t end = body.find(kDsCallEnd);
      if (end != absl::string_view::npos) body = body.substr(0, end);
      if (!ParseDeepSeekCall(body, call)) ok = false;
      calls.push_back(std::move(call));
    }
    ok = ok && !calls.empty();
  } else if (format_ == ChatFormat::kHarmony) {
    ToolCall call;
    call.name = recipient_.substr(absl::string_view("functions.").size());
    call.arguments = std::string(absl::StripAsciiWhitespace(block));
    calls.push_back(std::move(call));
  }
  if (!ok) {
    // Not a call the client could run: show the model's text instead.
    const State state = state_;
    state_ = State::kContent;
    Emit(as_written, out);
    state_ = state;
    return;
  }
  for (ToolCall& call : calls) out.tool_calls.push_back(std::move(call));
}

void ChatOutputParser::Drain(bool at_end, ChatDelta& out) {
  while (true) {
    absl::string_view text = pending_;
    if (format_ == ChatFormat::kPlain) {
      Emit(text, out);
      pending_.clear();
      return;
    }
    if (state_ == State::kHarmonyHeader) {
      const size_t end = text.find(kHarmonyMessage);
      if (end == absl::string_view::npos) {
        if (at_end) {
          // Text that never became a message: content unless it is only
          // header markup.
          if (!absl::StrContains(text, "<|")) {
            state_ = State::kContent;
            Emit(text, out);
          }
          pending_.clear();
        }
        return;
      }
      EndHarmonyHeader(text.substr(0, end));
      pending_.erase(0, end + kHarmonyMessage.size());
      continue;
    }
    if (state_ == State::kToolCalls) {
      Found found;
      absl::string_view begin_marker;
      if (format_ == ChatFormat::kThinkTags) {
        found = FindFirst(text, {kToolCallEnd});
        begin_marker = kToolCallBegin;
      } else if (format_ == ChatFormat::kDeepSeekV3) {
        found = FindFirst(text, {kDsCallsEnd});
        begin_marker = kDsCallsBegin;
      } else {
        found = FindFirst(text, {kHarmonyEnds[0], kHarmonyEnds[1],
                                 kHarmonyEnds[2], kHarmonyEnds[3]});
      }
      if (found.pos == absl::string_view::npos && !at_end) return;
      const size_t end =
          found.pos == absl::string_view::npos ? text.size() : found.pos;
      const std::string written =
          absl::StrCat(begin_marker, text.substr(0, end), found.marker);
      EndToolCalls(text.substr(0, end), written, out);
      pending_.erase(0, found.pos == absl::string_view::npos
                            ? text.size()
                            : end + found.marker.size());
      state_ = format_ == ChatFormat::kHarmony ? State::kHarmonyHeader
                                               : State::kContent;
      if (found.pos == absl::string_view::npos) return;
      continue;
    }

    // Content or reasoning: find the next marker that changes state.
    std::vector<absl::string_view> markers;
    if (format_ == ChatFormat::kHarmony) {
      markers.assign(std::begin(kHarmonyEnds), std::end(kHarmonyEnds));
    } else if (state_ == State::kReasoning) {
      markers = {kThinkEnd};
    } else {
      markers = {kThinkBegin};
      if (parse_tool_calls_) {
        markers.push_back(format_ == ChatFormat::kDeepSeekV3 ? kDsCallsBegin
                                                             : kToolCallBegin);
      }
    }
    Found found;
    size_t partial = 0;
    for (absl::string_view m : markers) {
      const size_t pos = text.find(m);
      if (pos < found.pos) found = {pos, m};
      partial = std::max(partial, PartialMarker(text, {m}));
    }
    if (found.pos == absl::string_view::npos) {
      if (at_end) {
        // Layout whitespace after the last marker is not output.
        if (!absl::StripAsciiWhitespace(text).empty()) Emit(text, out);
        pending_.clear();
        return;
      }
      // Hold back a possible marker start and trailing whitespace (which
      // belongs to the layout around a marker, if one follows).
      size_t keep = text.size() - partial;
      while (keep > 0 && IsSpace(text[keep - 1])) --keep;
      Emit(text.substr(0, keep), out);
      pending_.erase(0, keep);
      return;
    }
    absl::string_view before = text.substr(0, found.pos);
    while (!before.empty() && IsSpace(before.back())) before.remove_suffix(1);
    Emit(before, out);
    const std::string marker(found.marker);
    pending_.erase(0, found.pos + marker.size());
    if (format_ == ChatFormat::kHarmony) {
      state_ = State::kHarmonyHeader;
    } else if (marker == kThinkBegin) {
      state_ = State::kReasoning;
      skip_newlines_ = true;
    } else if (marker == kThinkEnd) {
      state_ = State::kContent;
      skip_newlines_ = true;
    } else {
      state_ = State::kToolCalls;
    }
  }
}

}  // namespace ringmoe::serving

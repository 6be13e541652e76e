#include "engine/tokenizer/chat_template.h"

#include <ctime>
#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/file.h"
#include "base/large_stack.h"
#include "base/status_macros.h"

namespace ringmoe::tokenizer {
namespace {

using OrderedJson = nlohmann::ordered_json;

// transformers' SPECIAL_TOKENS_ATTRIBUTES.
constexpr const char* kSpecialTokenNames[] = {
    "bos_token", "eos_token", "unk_token",  "sep_token",
    "pad_token", "cls_token", "mask_token", "additional_special_tokens"};

// A special token as written in tokenizer_config.json: a string, or an
// AddedToken object {"content": ...}; nullopt for null or anything else.
std::optional<std::string> TokenContent(const OrderedJson& token) {
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") &&
      token["content"].is_string()) {
    return token["content"].get<std::string>();
  }
  return std::nullopt;
}

// transformers' special_tokens_map: the tokens that are set, as strings.
absl::StatusOr<OrderedJson> NormalizeSpecialTokens(const OrderedJson& config) {
  OrderedJson tokens = OrderedJson::object();
  if (config.is_null()) return tokens;
  if (!config.is_object()) {
    return absl::InvalidArgumentError("special tokens must be a JSON object");
  }
  for (const auto& [name, value] : config.items()) {
    if (value.is_array()) {
      OrderedJson list = OrderedJson::array();
      for (const OrderedJson& token : value) {
        if (std::optional<std::string> content = TokenContent(token)) {
          list.push_back(*content);
        }
      }
      if (!list.empty()) tokens[name] = std::move(list);
    } else if (std::optional<std::string> content = TokenContent(value)) {
      tokens[name] = *content;
    }
  }
  return tokens;
}

// Every render failure is the request's (its messages, tools or kwargs
// drove the template there), so all are INVALID_ARGUMENT, sandbox limits
// included; a raised message stays exactly as the template wrote it.
absl::Status ChatError(const absl::Status& status) {
  return absl::InvalidArgumentError(status.message());
}

absl::StatusOr<jinja::Value> ToValue(const OrderedJson& json,
                                     absl::string_view what) {
  absl::StatusOr<jinja::Value> value = jinja::Value::FromJson(json);
  if (!value.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template: ", what, ": ", value.status().message()));
  }
  return value;
}

jinja::Value StrftimeNow(std::optional<absl::CivilSecond> pinned) {
  return jinja::MakeNativeFunction(
      "strftime_now",
      [pinned](const jinja::CallArgs& args) -> absl::StatusOr<jinja::Value> {
        if (args.positional.size() != 1 || !args.keyword.empty() ||
            !args.positional[0].is_string()) {
          return absl::InvalidArgumentError(
              "strftime_now() takes one string argument, the format");
        }
        absl::CivilSecond time;
        int micros = 0;
        if (pinned.has_value()) {
          time = *pinned;
        } else {
          const absl::Time now = absl::Now();
          const absl::TimeZone zone = absl::LocalTimeZone();
          time = absl::ToCivilSecond(now, zone);
          micros = static_cast<int>(
              absl::ToInt64Microseconds(now - absl::FromCivil(time, zone)));
        }
        const std::string& format = args.positional[0].as_string();
        if (format.size() > 4096) {
          return absl::InvalidArgumentError(
              "strftime_now() format longer than 4096 bytes");
        }
        return jinja::Value::String(PythonStrftime(format, time, micros));
      });
}

jinja::Value RaiseException() {
  return jinja::MakeNativeFunction(
      "raise_exception",
      [](const jinja::CallArgs& args) -> absl::StatusOr<jinja::Value> {
        std::string message;
        if (!args.positional.empty()) message = jinja::Str(args.positional[0]);
        return jinja::RaisedError(message);
      });
}

}  // namespace

std::string PythonStrftime(const std::string& format, absl::CivilSecond time,
                           int microseconds) {
  // Python handles %f, %z and %Z itself for naive datetimes and hands the
  // rest to the C library's strftime.
  std::string c_format;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char spec = format[i + 1];
      ++i;
      if (spec == 'f') {
        absl::StrAppend(&c_format, absl::StrFormat("%06d", microseconds));
      } else if (spec == 'z' || spec == 'Z') {
        // Empty for a naive time.
      } else {
        c_format.push_back('%');
        c_format.push_back(spec);
      }
    } else {
      c_format.push_back(format[i]);
    }
  }
  std::tm tm = {};
  tm.tm_year = static_cast<int>(time.year() - 1900);
  tm.tm_mon = time.month() - 1;
  tm.tm_mday = time.day();
  tm.tm_hour = time.hour();
  tm.tm_min = time.minute();
  tm.tm_sec = time.second();
  tm.tm_wday = (static_cast<int>(absl::GetWeekday(time)) + 1) % 7;
  tm.tm_yday = absl::GetYearDay(time) - 1;
  tm.tm_isdst = -1;
  // strftime returns 0 both for "no room" and for an empty result; a
  // sentinel character tells them apart.
  c_format.push_back('.');
  std::vector<char> buffer(c_format.size() * 4 + 64);
  while (true) {
    const size_t n =
        std::strftime(buffer.data(), buffer.size(), c_format.c_str(), &tm);
    if (n > 0) return std::string(buffer.data(), n - 1);
    buffer.resize(buffer.size() * 2);
  }
}

absl::StatusOr<ChatTemplate> ChatTemplate::Load(
    const std::string& tokenizer_dir, const std::string& template_file) {
  namespace fs = std::filesystem;
  std::error_code error;
  OrderedJson config = OrderedJson::object();
  const std::string config_path =
      tokenizer_dir.empty() ? std::string()
                            : tokenizer_dir + "/tokenizer_config.json";
  if (!config_path.empty() && fs::exists(config_path, error)) {
    ASSIGN_OR_RETURN(std::string text, ReadFileToString(config_path));
    config = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(config_path, ": not a JSON object"));
    }
  }
  OrderedJson special = OrderedJson::object();
  for (const char* name : kSpecialTokenNames) {
    if (config.contains(name)) special[name] = config[name];
  }

  std::string source;
  if (!template_file.empty()) {
    ASSIGN_OR_RETURN(source, ReadFileToString(template_file));
  } else if (const std::string jinja_path =
                 tokenizer_dir + "/chat_template.jinja";
             !tokenizer_dir.empty() && fs::exists(jinja_path, error)) {
    ASSIGN_OR_RETURN(source, ReadFileToString(jinja_path));
  } else if (config.contains("chat_template") &&
             config["chat_template"].is_string()) {
    source = config["chat_template"].get<std::string>();
  } else if (config.contains("chat_template") &&
             config["chat_template"].is_array()) {
    std::vector<std::string> names;
    for (const OrderedJson& entry : config["chat_template"]) {
      if (!entry.is_object() || !entry.contains("name") ||
          !entry["name"].is_string() || !entry.contains("template") ||
          !entry["template"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(config_path,
                         ": chat_template list entries must be {\"name\": ..., "
                         "\"template\": ...}"));
      }
      names.push_back(entry["name"].get<std::string>());
      if (names.back() == "default") {
        source = entry["template"].get<std::string>();
      }
    }
    if (source.empty()) {
      return absl::NotFoundError(absl::StrCat(
          config_path,
          ": the chat_template list has no \"default\" entry (it has ",
          absl::StrJoin(names, ", "),
          "); name a template with --chat_template"));
    }
  } else {
    return absl::NotFoundError(absl::StrCat(
        "no chat template in ", tokenizer_dir.empty() ? "\"\"" : tokenizer_dir,
        ": no chat_template.jinja, and tokenizer_config.json has no "
        "chat_template"));
  }
  return FromSource(std::move(source), std::move(special));
}

absl::StatusOr<ChatTemplate> ChatTemplate::FromSource(
    std::string source, nlohmann::ordered_json special_tokens) {
  jinja::ParseOptions options;
  options.name = "chat template";
  ASSIGN_OR_RETURN(jinja::Template parsed,
                   jinja::Template::Parse(source, options));
  ASSIGN_OR_RETURN(OrderedJson tokens, NormalizeSpecialTokens(special_tokens));
  jinja::Variables values;
  for (const auto& [name, token] : tokens.items()) {
    ASSIGN_OR_RETURN(jinja::Value value, ToValue(token, name));
    values.emplace_back(name, std::move(value));
  }
  return ChatTemplate(std::move(source), std::move(parsed), std::move(tokens),
                      std::move(values));
}

absl::StatusOr<std::string> ChatTemplate::Render(
    const ChatTemplateInput& input) const {
  // A render recurses as deep as the template and its data nest (bounded by
  // input.limits.max_depth, about 0.5 MB of stack at the default in an
  // unoptimised build): more than a server's worker threads may have
  // (civetweb's have 100 KB), so it runs on a stack of its own.
  constexpr size_t kRenderStackBytes = 8 << 20;
  absl::StatusOr<std::string> prompt;
  RETURN_IF_ERROR(
      RunWithStack(kRenderStackBytes, [&] { prompt = RenderHere(input); }));
  return prompt;
}

absl::StatusOr<std::string> ChatTemplate::RenderHere(
    const ChatTemplateInput& input) const {
  if (!input.template_kwargs.is_null() && !input.template_kwargs.is_object()) {
    return absl::InvalidArgumentError(
        "chat template: template_kwargs must be an object");
  }
  jinja::Variables variables;
  variables.emplace_back("raise_exception", RaiseException());
  variables.emplace_back("strftime_now", StrftimeNow(input.now));
  ASSIGN_OR_RETURN(jinja::Value messages, ToValue(input.messages, "messages"));
  variables.emplace_back("messages", std::move(messages));
  ASSIGN_OR_RETURN(jinja::Value tools, ToValue(input.tools, "tools"));
  variables.emplace_back("tools", std::move(tools));
  variables.emplace_back("documents", jinja::Value());
  variables.emplace_back("add_generation_prompt",
                         jinja::Value::Bool(input.add_generation_prompt));
  for (const auto& special : special_values_) variables.push_back(special);
  if (input.template_kwargs.is_object()) {
    for (const auto& [name, value] : input.template_kwargs.items()) {
      ASSIGN_OR_RETURN(jinja::Value v, ToValue(value, name));
      variables.emplace_back(name, std::move(v));
    }
  }
  absl::StatusOr<std::string> prompt =
      template_.Render(variables, input.limits);
  if (!prompt.ok()) return ChatError(prompt.status());
  return prompt;
}

}  // namespace ringmoe::tokenizer

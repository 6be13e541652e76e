// Hugging Face chat templates, rendered as transformers' apply_chat_template
// renders them (Python jinja2 in an ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks, loopcontrols, {% generation %}, the tojson
// filter as json.dumps, raise_exception and strftime_now), on the sandboxed
// interpreter of engine/tokenizer/jinja.
#ifndef RINGMOE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_
#define RINGMOE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/civil_time.h"
#include "engine/tokenizer/jinja/jinja.h"
#include "nlohmann/json.hpp"

namespace ringmoe::tokenizer {

struct ChatTemplateInput {
  // Key order and the written form of numbers matter (1.0 renders as 1.0),
  // hence ordered_json.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // A list of tool schemas, or null for None.
  nlohmann::ordered_json tools;
  bool add_generation_prompt = false;
  // Extra template variables (enable_thinking, reasoning_effort, ...): an
  // object, or null for none. They override every other variable.
  nlohmann::ordered_json template_kwargs;
  // The naive local time strftime_now formats; nullopt: the local time now.
  std::optional<absl::CivilSecond> now;
  jinja::RenderOptions limits;
};

// A parsed chat template with the tokenizer's special tokens. Immutable:
// Render may be called from many threads at once.
class ChatTemplate {
 public:
  // The template `template_file` when given, else `tokenizer_dir`'s
  // chat_template.jinja, else tokenizer_config.json's chat_template (a
  // string, or a list of {name, template} whose "default" entry is used).
  // Special tokens (bos_token, eos_token, unk_token, sep_token, pad_token,
  // cls_token, mask_token, additional_special_tokens) come from
  // tokenizer_config.json, as strings or AddedToken objects. NOT_FOUND,
  // naming the directory, when there is no template; parse errors are
  // INVALID_ARGUMENT "chat template line N: ...".
  static absl::StatusOr<ChatTemplate> Load(
      const std::string& tokenizer_dir, const std::string& template_file = "");

  // `special_tokens`: an object of template variable -> string (or
  // AddedToken object, or list of them for additional_special_tokens).
  static absl::StatusOr<ChatTemplate> FromSource(
      std::string source,
      nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object());

  // The prompt. A template's raise_exception(msg) fails with
  // INVALID_ARGUMENT msg exactly; every other failure (bad input, a
  // template error, a sandbox limit) is INVALID_ARGUMENT "chat template
  // line N: ..." or "chat template: ...".
  absl::StatusOr<std::string> Render(const ChatTemplateInput& input) const;

  const std::string& source() const { return source_; }
  // The special tokens as template variables (strings, and a list for
  // additional_special_tokens).
  const nlohmann::ordered_json& special_tokens() const {
    return special_tokens_;
  }

 private:
  // Render on the calling thread's stack.
  absl::StatusOr<std::string> RenderHere(const ChatTemplateInput& input) const;

  ChatTemplate(std::string source, jinja::Template parsed,
               nlohmann::ordered_json special_tokens,
               jinja::Variables special_values)
      : source_(std::move(source)),
        template_(std::move(parsed)),
        special_tokens_(std::move(special_tokens)),
        special_values_(std::move(special_values)) {}

  std::string source_;
  jinja::Template template_;
  nlohmann::ordered_json special_tokens_;
  jinja::Variables special_values_;
};

// Python's datetime.strftime(format) of a naive time (so %z and %Z are
// empty, %f is the microseconds).
std::string PythonStrftime(const std::string& format, absl::CivilSecond time,
                           int microseconds = 0);

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_CHAT_TEMPLATE_H_

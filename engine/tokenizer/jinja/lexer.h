// Splits a template into text and the tokens of its tags, as jinja2's lexer
// does with trim_blocks and lstrip_blocks: whitespace control (`{%-`, `-%}`,
// `{{-`, `-}}`, `{#-`, `-#}`, `{%+`) and raw blocks are applied here, comments
// are dropped, and the text tokens hold exactly the text to output.
#ifndef RINGMOE_ENGINE_TOKENIZER_JINJA_LEXER_H_
#define RINGMOE_ENGINE_TOKENIZER_JINJA_LEXER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringmoe::jinja {

struct Token {
  enum class Type {
    kText,
    kVariableBegin,  // {{
    kVariableEnd,    // }}
    kBlockBegin,     // {%
    kBlockEnd,       // %}
    kName,
    kString,  // `text` holds the decoded value
    kInteger,
    kFloat,
    kOperator,  // `text` holds it: "+", "//", "(", ...
    kEnd,
  };
  Type type;
  std::string text;
  int64_t integer = 0;
  double number = 0;
  int line = 1;
};

// The tokens of `source`, ending with kEnd. Errors: "line N: <problem>".
absl::StatusOr<std::vector<Token>> Lex(absl::string_view source);

}  // namespace ringmoe::jinja

#endif  // RINGMOE_ENGINE_TOKENIZER_JINJA_LEXER_H_

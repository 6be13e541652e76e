// Builds the syntax tree from the lexer's tokens, following jinja2's grammar
// and operator precedence.
#ifndef RINGMOE_ENGINE_TOKENIZER_JINJA_PARSER_H_
#define RINGMOE_ENGINE_TOKENIZER_JINJA_PARSER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/ast.h"
#include "engine/tokenizer/jinja/lexer.h"

namespace ringmoe::jinja {

// The template's statements. Blocks, expressions and their combination nest
// at most `max_nesting` deep (so neither parsing nor rendering recurses
// without bound). Errors: "line N: <problem>".
absl::StatusOr<Body> Parse(const std::vector<Token>& tokens, int max_nesting);

}  // namespace ringmoe::jinja

#endif  // RINGMOE_ENGINE_TOKENIZER_JINJA_PARSER_H_

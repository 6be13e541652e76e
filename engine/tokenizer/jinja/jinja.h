// A sandboxed Jinja interpreter that renders templates as Python jinja2 3.1
// does in the environment Hugging Face transformers builds for chat
// templates: ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True) with the loopcontrols extension, the {% generation %}
// tag, and Python semantics for values (str() and repr() of dicts, lists and
// floats, integer vs float arithmetic, slicing by code point).
//
// Templates come from model repositories and their inputs from requests, so
// both are untrusted: a template reaches nothing but the values it is given
// and the built-in filters, tests and methods; lists and dicts cannot be
// changed; and every render is bounded in output, work, and depth, failing
// with an error that names the limit instead of exhausting memory or stack.
#ifndef RINGMOE_ENGINE_TOKENIZER_JINJA_JINJA_H_
#define RINGMOE_ENGINE_TOKENIZER_JINJA_JINJA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/jinja/value.h"

namespace ringmoe::jinja {

struct ParseOptions {
  // Names the template in error messages: "<name> line 12: unknown filter
  // 'foo'".
  std::string name = "template";
  size_t max_source_bytes = 1 << 20;
  // How deeply blocks and expressions may nest.
  int max_nesting = 100;
};

struct RenderOptions {
  // The rendered text, and any one string the template builds.
  size_t max_output_bytes = 4 << 20;
  // Evaluation steps: every expression, statement and loop iteration is
  // one, and building a list or a string costs its size (elements, or
  // bytes / 16) besides.
  int64_t max_steps = 5'000'000;
  // Macro calls active at once (recursion).
  int max_call_depth = 64;
  // Expressions, statements and macro calls active at once, which is what
  // bounds the native stack a render uses.
  int max_depth = 256;
};

// Variables a render sees, in order (a later one overrides an earlier one).
using Variables = std::vector<std::pair<std::string, Value>>;

struct Program;

class Template {
 public:
  // Parses `source`. Errors are INVALID_ARGUMENT "<name> line N: ...".
  static absl::StatusOr<Template> Parse(absl::string_view source,
                                        const ParseOptions& options = {});

  // Renders with `variables` on top of the built-in globals (range, dict,
  // namespace, joiner). Safe to call from several threads at once.
  // A native function's RaisedError comes back exactly as raised; every
  // other error is INVALID_ARGUMENT "<name> line N: <what failed>".
  absl::StatusOr<std::string> Render(const Variables& variables,
                                     const RenderOptions& options = {}) const;

  const std::string& name() const;

 private:
  explicit Template(std::shared_ptr<const Program> program)
      : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

// The error a native function returns to fail the render with `message`
// exactly (what transformers' raise_exception does).
absl::Status RaisedError(absl::string_view message);
bool IsRaisedError(const absl::Status& status);

}  // namespace ringmoe::jinja

#endif  // RINGMOE_ENGINE_TOKENIZER_JINJA_JINJA_H_

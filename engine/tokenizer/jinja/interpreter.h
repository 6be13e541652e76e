// The tree-walking evaluator behind Template::Render (internal to the jinja
// library). interpreter.cc evaluates statements and expressions;
// builtins.cc holds the filters, tests, methods and globals.
#ifndef RINGMOE_ENGINE_TOKENIZER_JINJA_INTERPRETER_H_
#define RINGMOE_ENGINE_TOKENIZER_JINJA_INTERPRETER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/jinja/ast.h"
#include "engine/tokenizer/jinja/jinja.h"
#include "engine/tokenizer/jinja/value.h"

namespace ringmoe::jinja {

struct Program {
  std::string name;
  Body body;
};

// Variables of one frame: the globals, the template's top level, one loop
// iteration, one macro call. Lookups walk to the parent.
struct Scope {
  explicit Scope(std::shared_ptr<const Scope> parent_scope)
      : parent(std::move(parent_scope)) {}
  const Value* Find(absl::string_view name) const;
  void Set(absl::string_view name, Value value);

  std::shared_ptr<const Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
};
using ScopePtr = std::shared_ptr<Scope>;

// A macro (or a {% call %} block's caller) with the scope it was defined in.
class Macro : public Callable {
 public:
  Macro(const MacroDef* def, std::shared_ptr<const Scope> closure)
      : def_(def), closure_(std::move(closure)) {}
  std::string Repr() const override;
  const MacroDef& def() const { return *def_; }
  const std::shared_ptr<const Scope>& closure() const { return closure_; }

 private:
  const MacroDef* def_;
  std::shared_ptr<const Scope> closure_;
};

// Python-style argument binding for built-ins.
struct Param {
  const char* name;
  bool required = false;
  Value default_value = Value();
};

// Errors of one render. Filters and methods return plain messages; the
// evaluator adds the line of the innermost expression that failed.
absl::Status TypeError(absl::string_view message);

// Namespace attributes never hold namespaces (directly or inside lists and
// dicts), which keeps values acyclic.
absl::Status CheckNoNamespace(const Value& value);

// Whether a filter or test of this name exists (checked when parsing, as
// jinja2 checks when compiling).
bool IsKnownFilter(absl::string_view name);
bool IsKnownTest(absl::string_view name);

class Interpreter {
 public:
  Interpreter(const Program& program, const RenderOptions& options)
      : program_(program), options_(options) {}

  absl::StatusOr<std::string> Render(const Variables& variables);

  // Used by builtins.cc.
  absl::StatusOr<Value> GetAttr(const Value& object, absl::string_view name);
  absl::StatusOr<Value> GetItem(const Value& object, const Value& key);
  absl::StatusOr<Value> Call(const Value& callee, CallArgs args);
  absl::StatusOr<Value> ApplyFilter(absl::string_view name, const Value& input,
                                    const CallArgs& args);
  absl::StatusOr<bool> ApplyTest(absl::string_view name, const Value& input,
                                 const CallArgs& args);
  // The items of an iterable (list and tuple items, dict keys, string
  // characters; nothing for undefined); TypeError otherwise.
  absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
  // Charges `n` steps; errors once max_steps is spent.
  absl::Status Charge(int64_t n);
  // Fails when a built string would exceed max_output_bytes.
  absl::Status CheckString(size_t bytes);
  absl::StatusOr<Value> NewString(std::string s);
  absl::StatusOr<Value> NewList(std::vector<Value> items, bool tuple = false);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::Status Exec(const Body& body, const ScopePtr& scope, std::string* out,
                    Flow* flow);
  absl::Status ExecStmt(const Stmt& stmt, const ScopePtr& scope,
                        std::string* out, Flow* flow);
  absl::Status ExecFor(const Stmt& stmt, const ScopePtr& scope,
                       std::string* out);
  absl::Status ExecSet(const Stmt& stmt, const ScopePtr& scope, Value value);
  absl::Status Unpack(const std::vector<std::string>& targets,
                      const Value& value, Scope* scope);
  absl::StatusOr<Value> CaptureBody(const Body& body, const ScopePtr& scope,
                                    const std::vector<ExprPtr>& filters);
  absl::Status Append(std::string* out, absl::string_view text);

  absl::StatusOr<Value> Eval(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalNode(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalCall(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first,
                                    const ScopePtr& scope);
  absl::StatusOr<Value> EvalCompare(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalSlice(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> EvalLiteral(const Expr& e, const ScopePtr& scope);
  absl::StatusOr<Value> Binary(BinaryOp op, const Value& a, const Value& b);
  absl::StatusOr<Value> CallMacro(const Macro& macro, CallArgs args);

  // builtins.cc
  absl::StatusOr<Value> CallMethod(const Value& self, absl::string_view name,
                                   const CallArgs& args);
  Variables Globals();

  const Program& program_;
  const RenderOptions& options_;
  int64_t steps_ = 0;
  int depth_ = 0;
  int call_depth_ = 0;
  // What Render empties at the end to free cycles through macros.
  std::vector<std::weak_ptr<Scope>> closures_;
  std::vector<std::weak_ptr<Namespace>> namespaces_;
};

// Binds `args` to `params` as Python binds a call of `function`: positional
// first, then keywords; unknown or missing arguments are TypeErrors.
absl::StatusOr<std::vector<Value>> BindArgs(absl::string_view function,
                                            const CallArgs& args,
                                            const std::vector<Param>& params);

// Whether `name` is a method a value of this kind has (a bound method when
// read as an attribute), and whether it is one the sandbox refuses because
// it would change the value.
bool HasMethod(const Value& v, absl::string_view name);
bool IsMutatingMethod(const Value& v, absl::string_view name);

// Python's % formatting of `format` with `args` (a tuple, a dict or one value).
absl::StatusOr<std::string> PercentFormat(absl::string_view format,
                                          const Value& args);

}  // namespace ringmoe::jinja

#endif  // RINGMOE_ENGINE_TOKENIZER_JINJA_INTERPRETER_H_

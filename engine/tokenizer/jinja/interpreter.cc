#include "engine/tokenizer/jinja/interpreter.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/tokenizer/jinja/lexer.h"
#include "engine/tokenizer/jinja/parser.h"

namespace ringmoe::jinja {
namespace {

constexpr absl::string_view kRaisedPayload = "ringmoe.jinja/raised";
constexpr absl::string_view kLocatedPayload = "ringmoe.jinja/located";

bool IsLocated(const absl::Status& status) {
  return status.GetPayload(kLocatedPayload).has_value() ||
         IsRaisedError(status);
}

// Adds "line N: " to an error that has no line yet.
absl::Status Locate(const absl::Status& status, int line) {
  if (IsLocated(status)) return status;
  absl::Status located(status.code(),
                       absl::StrCat("line ", line, ": ", status.message()));
  located.SetPayload(kLocatedPayload, absl::Cord("1"));
  return located;
}

// The error an operation on an undefined value raises.
absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.undefined_message());
}

std::string MissingMessage(const Value& object, const Value& key) {
  if (key.is_string()) {
    return absl::StrCat(StringRepr(ObjectTypeRepr(object)),
                        " has no attribute ", StringRepr(key.as_string()));
  }
  return absl::StrCat(ObjectTypeRepr(object), " has no element ", Repr(key));
}

Value UnsafeUndefined(const Value& object, absl::string_view name) {
  return Value::Undef(absl::StrCat("access to attribute '", name, "' of '",
                                   TypeName(object), "' object is unsafe."));
}

Value MakeBoundMethod(const Value& self, absl::string_view name) {
  return Value::MakeCallable(
      std::make_shared<BoundMethod>(self, std::string(name)));
}

bool CheckedAdd(int64_t a, int64_t b, int64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

absl::Status IntegerOverflow() {
  return TypeError("integer result does not fit in 64 bits");
}

absl::StatusOr<int64_t> PyFloorDiv(int64_t a, int64_t b) {
  if (b == 0) return TypeError("integer division or modulo by zero");
  if (a == std::numeric_limits<int64_t>::min() && b == -1) {
    return IntegerOverflow();
  }
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

absl::StatusOr<int64_t> PyMod(int64_t a, int64_t b) {
  if (b == 0) return TypeError("integer division or modulo by zero");
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double PyFloatMod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0) {
    if ((r < 0) != (b < 0)) r += b;
  } else {
    r = std::copysign(0.0, b);
  }
  return r;
}

absl::Status Unsupported(absl::string_view op, const Value& a, const Value& b) {
  return TypeError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                TypeName(a), "' and '", TypeName(b), "'"));
}

absl::Status CheckExprNames(const Expr* e) {
  if (e == nullptr) return absl::OkStatus();
  if (e->kind == Expr::Kind::kFilter && !IsKnownFilter(e->name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", e->line, ": unknown filter '", e->name, "'"));
  }
  if (e->kind == Expr::Kind::kTest && !IsKnownTest(e->name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", e->line, ": unknown test '", e->name, "'"));
  }
  for (const ExprPtr& operand : e->operands) {
    RETURN_IF_ERROR(CheckExprNames(operand.get()));
  }
  for (const auto& [name, value] : e->keywords) {
    RETURN_IF_ERROR(CheckExprNames(value.get()));
  }
  return absl::OkStatus();
}

// Unknown filters and tests fail the parse, as jinja2 fails the compile.
absl::Status CheckNames(const Body& body) {
  for (const StmtPtr& stmt : body) {
    for (const ExprPtr& e : stmt->exprs)
      RETURN_IF_ERROR(CheckExprNames(e.get()));
    for (const Body& inner : stmt->bodies) RETURN_IF_ERROR(CheckNames(inner));
    if (stmt->macro != nullptr) {
      for (const ExprPtr& e : stmt->macro->defaults) {
        RETURN_IF_ERROR(CheckExprNames(e.get()));
      }
      RETURN_IF_ERROR(CheckNames(stmt->macro->body));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TypeError(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

absl::Status CheckNoNamespace(const Value& value) {
  std::vector<const Value*> stack = {&value};
  while (!stack.empty()) {
    const Value* v = stack.back();
    stack.pop_back();
    if (v->is_namespace()) {
      return TypeError("a namespace attribute cannot hold a namespace");
    }
    if (v->is_list()) {
      for (const Value& item : v->as_list().items) stack.push_back(&item);
    } else if (v->is_dict()) {
      for (const auto& [key, item] : v->as_dict().entries) {
        stack.push_back(&item);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status RaisedError(absl::string_view message) {
  absl::Status status = absl::InvalidArgumentError(message);
  status.SetPayload(kRaisedPayload, absl::Cord("1"));
  return status;
}

bool IsRaisedError(const absl::Status& status) {
  return status.GetPayload(kRaisedPayload).has_value();
}

const Value* Scope::Find(absl::string_view name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
    for (const auto& [key, value] : s->vars) {
      if (key == name) return &value;
    }
  }
  return nullptr;
}

void Scope::Set(absl::string_view name, Value value) {
  for (auto& [key, existing] : vars) {
    if (key == name) {
      existing = std::move(value);
      return;
    }
  }
  vars.emplace_back(std::string(name), std::move(value));
}

std::string Macro::Repr() const {
  return absl::StrCat("<Macro '", def_->name, "'>");
}

absl::Status Interpreter::Charge(int64_t n) {
  steps_ += n;
  if (steps_ <= options_.max_steps) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("the render took more than max_steps (", options_.max_steps,
                   " evaluation steps)"));
}

absl::Status Interpreter::CheckString(size_t bytes) {
  if (bytes > options_.max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("a string of ", bytes, " bytes exceeds max_output_bytes (",
                     options_.max_output_bytes, ")"));
  }
  return Charge(static_cast<int64_t>(bytes / 16));
}

absl::StatusOr<Value> Interpreter::NewString(std::string s) {
  RETURN_IF_ERROR(CheckString(s.size()));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> Interpreter::NewList(std::vector<Value> items,
                                           bool tuple) {
  RETURN_IF_ERROR(Charge(static_cast<int64_t>(items.size())));
  Value list = Value::MakeList(std::move(items), tuple);
  if (list.depth() > kMaxValueDepth) {
    return TypeError(
        absl::StrCat("a value nested deeper than ", kMaxValueDepth, " levels"));
  }
  return list;
}

absl::Status Interpreter::Append(std::string* out, absl::string_view text) {
  if (out->size() + text.size() > options_.max_output_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the output exceeded max_output_bytes (",
                     options_.max_output_bytes, " bytes)"));
  }
  out->append(text.data(), text.size());
  return absl::OkStatus();
}

absl::StatusOr<std::string> Interpreter::Render(const Variables& variables) {
  auto globals = std::make_shared<Scope>(nullptr);
  for (auto& [name, value] : Globals()) globals->Set(name, std::move(value));
  for (const auto& [name, value] : variables) globals->Set(name, value);
  auto root = std::make_shared<Scope>(std::move(globals));
  std::string out;
  Flow flow = Flow::kNormal;
  const absl::Status status = Exec(program_.body, root, &out, &flow);
  // A macro keeps its defining scope alive and that scope (or a namespace)
  // may hold the macro: emptying them breaks such cycles.
  for (const std::weak_ptr<Scope>& weak : closures_) {
    if (ScopePtr scope = weak.lock()) scope->vars.clear();
  }
  for (const std::weak_ptr<Namespace>& weak : namespaces_) {
    if (NamespacePtr ns = weak.lock()) ns->attrs.clear();
  }
  if (!status.ok()) return status;
  return out;
}

absl::Status Interpreter::Exec(const Body& body, const ScopePtr& scope,
                               std::string* out, Flow* flow) {
  for (const StmtPtr& stmt : body) {
    RETURN_IF_ERROR(ExecStmt(*stmt, scope, out, flow));
    if (*flow != Flow::kNormal) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecStmt(const Stmt& stmt, const ScopePtr& scope,
                                   std::string* out, Flow* flow) {
  RETURN_IF_ERROR(Locate(Charge(1), stmt.line));
  if (++depth_ > options_.max_depth) {
    --depth_;
    return Locate(absl::ResourceExhaustedError(
                      absl::StrCat("the render nested deeper than max_depth (",
                                   options_.max_depth, ")")),
                  stmt.line);
  }
  struct Unnest {
    int* depth;
    ~Unnest() { --*depth; }
  } unnest{&depth_};
  absl::Status status;
  switch (stmt.kind) {
    case Stmt::Kind::kText:
      status = Append(out, stmt.text);
      break;
    case Stmt::Kind::kOutput: {
      ASSIGN_OR_RETURN(Value v, Eval(*stmt.exprs[0], scope));
      if (v.is_string()) {
        status = Append(out, v.as_string());
      } else {
        status = Append(out, Str(v));
      }
      break;
    }
    case Stmt::Kind::kIf: {
      for (size_t i = 0; i < stmt.exprs.size(); ++i) {
        ASSIGN_OR_RETURN(Value cond, Eval(*stmt.exprs[i], scope));
        if (Truthy(cond)) return Exec(stmt.bodies[i], scope, out, flow);
      }
      if (stmt.bodies.size() > stmt.exprs.size()) {
        return Exec(stmt.bodies.back(), scope, out, flow);
      }
      break;
    }
    case Stmt::Kind::kFor:
      status = ExecFor(stmt, scope, out);
      break;
    case Stmt::Kind::kSet: {
      ASSIGN_OR_RETURN(Value v, Eval(*stmt.exprs[0], scope));
      status = ExecSet(stmt, scope, std::move(v));
      break;
    }
    case Stmt::Kind::kSetBlock: {
      ASSIGN_OR_RETURN(Value v, CaptureBody(stmt.bodies[0], scope, stmt.exprs));
      status = ExecSet(stmt, scope, std::move(v));
      break;
    }
    case Stmt::Kind::kMacro:
      closures_.push_back(scope);
      scope->Set(stmt.macro->name, Value::MakeCallable(std::make_shared<Macro>(
                                       stmt.macro.get(), scope)));
      break;
    case Stmt::Kind::kCallBlock: {
      const Expr& call = *stmt.exprs[0];
      ASSIGN_OR_RETURN(Value callee, Eval(*call.operands[0], scope));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(call, 1, scope));
      closures_.push_back(scope);
      args.keyword.emplace_back(
          "caller", Value::MakeCallable(
                        std::make_shared<Macro>(stmt.macro.get(), scope)));
      ASSIGN_OR_RETURN(Value v, Call(callee, std::move(args)));
      status = Append(out, Str(v));
      break;
    }
    case Stmt::Kind::kFilterBlock: {
      ASSIGN_OR_RETURN(Value v, CaptureBody(stmt.bodies[0], scope, stmt.exprs));
      status = Append(out, Str(v));
      break;
    }
    case Stmt::Kind::kWith: {
      auto inner = std::make_shared<Scope>(scope);
      for (size_t i = 0; i < stmt.targets.size(); ++i) {
        ASSIGN_OR_RETURN(Value v, Eval(*stmt.exprs[i], scope));
        inner->Set(stmt.targets[i], std::move(v));
      }
      return Exec(stmt.bodies[0], inner, out, flow);
    }
    case Stmt::Kind::kBreak:
      *flow = Flow::kBreak;
      break;
    case Stmt::Kind::kContinue:
      *flow = Flow::kContinue;
      break;
    case Stmt::Kind::kScope:
      return Exec(stmt.bodies[0], scope, out, flow);
  }
  return Locate(status, stmt.line);
}

absl::StatusOr<Value> Interpreter::CaptureBody(
    const Body& body, const ScopePtr& scope,
    const std::vector<ExprPtr>& filters) {
  std::string text;
  Flow flow = Flow::kNormal;
  RETURN_IF_ERROR(Exec(body, std::make_shared<Scope>(scope), &text, &flow));
  Value v = Value::String(std::move(text));
  for (const ExprPtr& filter : filters) {
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(*filter, 1, scope));
    absl::StatusOr<Value> next = ApplyFilter(filter->name, v, args);
    if (!next.ok()) return Locate(next.status(), filter->line);
    v = *std::move(next);
  }
  return v;
}

absl::Status Interpreter::ExecSet(const Stmt& stmt, const ScopePtr& scope,
                                  Value value) {
  if (!stmt.attr.empty()) {
    const Value* target = scope->Find(stmt.targets[0]);
    if (target == nullptr || !target->is_namespace()) {
      return TypeError("cannot assign attribute on non-namespace object");
    }
    RETURN_IF_ERROR(CheckNoNamespace(value));
    target->as_namespace().Set(stmt.attr, std::move(value));
    return absl::OkStatus();
  }
  if (!stmt.tuple_target) {
    scope->Set(stmt.targets[0], std::move(value));
    return absl::OkStatus();
  }
  return Unpack(stmt.targets, value, scope.get());
}

absl::Status Interpreter::Unpack(const std::vector<std::string>& targets,
                                 const Value& value, Scope* scope) {
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(value));
  if (items.size() != targets.size()) {
    return TypeError(
        items.size() < targets.size()
            ? absl::StrCat("not enough values to unpack (expected ",
                           targets.size(), ", got ", items.size(), ")")
            : absl::StrCat("too many values to unpack (expected ",
                           targets.size(), ")"));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    scope->Set(targets[i], std::move(items[i]));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecFor(const Stmt& stmt, const ScopePtr& scope,
                                  std::string* out) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*stmt.exprs[0], scope));
  ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(iterable));
  const auto bind = [&](Scope* s, const Value& item) -> absl::Status {
    if (!stmt.tuple_target) {
      s->Set(stmt.targets[0], item);
      return absl::OkStatus();
    }
    return Unpack(stmt.targets, item, s);
  };
  if (stmt.exprs[1] != nullptr) {
    // The inline `if` filters before the loop counts anything.
    std::vector<Value> kept;
    for (Value& item : items) {
      auto inner = std::make_shared<Scope>(scope);
      RETURN_IF_ERROR(bind(inner.get(), item));
      ASSIGN_OR_RETURN(Value keep, Eval(*stmt.exprs[1], inner));
      if (Truthy(keep)) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }

  // jinja2 runs the else block unless the last iteration that ran finished
  // normally: so after an empty loop, and also after a break or continue in
  // the last iteration.
  bool run_else = true;
  const int64_t length = static_cast<int64_t>(items.size());
  static const Value kNoPrevious = Value::Undef("there is no previous item");
  static const Value kNoNext = Value::Undef("there is no next item");
  for (int64_t i = 0; i < length; ++i) {
    RETURN_IF_ERROR(Charge(1));
    // Each iteration is a fresh frame over the enclosing one, so a `set`
    // in the body is gone after the loop (and in the next iteration), as in
    // jinja2.
    auto inner = std::make_shared<Scope>(scope);
    RETURN_IF_ERROR(bind(inner.get(), items[i]));
    auto cycle = [i](const CallArgs& args) -> absl::StatusOr<Value> {
      if (args.positional.empty()) {
        return TypeError("no items for cycling given");
      }
      return args.positional[i % args.positional.size()];
    };
    std::vector<std::pair<Value, Value>> loop = {
        {Value::String("index"), Value::Int(i + 1)},
        {Value::String("index0"), Value::Int(i)},
        {Value::String("revindex"), Value::Int(length - i)},
        {Value::String("revindex0"), Value::Int(length - i - 1)},
        {Value::String("first"), Value::Bool(i == 0)},
        {Value::String("last"), Value::Bool(i == length - 1)},
        {Value::String("length"), Value::Int(length)},
        {Value::String("depth"), Value::Int(1)},
        {Value::String("depth0"), Value::Int(0)},
        {Value::String("previtem"), i > 0 ? items[i - 1] : kNoPrevious},
        {Value::String("nextitem"), i + 1 < length ? items[i + 1] : kNoNext},
        {Value::String("cycle"), MakeNativeFunction("cycle", cycle)},
    };
    inner->Set("loop", Value::MakeDict(std::move(loop)));
    Flow flow = Flow::kNormal;
    RETURN_IF_ERROR(Exec(stmt.bodies[0], inner, out, &flow));
    if (flow == Flow::kBreak) break;
    if (flow == Flow::kNormal) run_else = false;
  }
  if (run_else) {
    Flow flow = Flow::kNormal;
    return Exec(stmt.bodies[1], std::make_shared<Scope>(scope), out, &flow);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Value>> Interpreter::Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>();
    case Value::Kind::kList:
      return v.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.as_dict().entries.size());
      for (const auto& [key, value] : v.as_dict().entries) keys.push_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      RETURN_IF_ERROR(Charge(static_cast<int64_t>(s.size())));
      for (char32_t c : ToCodePoints(s)) {
        chars.push_back(Value::String(FromCodePoints(std::u32string(1, c))));
      }
      return chars;
    }
    default:
      return TypeError(
          absl::StrCat("'", TypeName(v), "' object is not iterable"));
  }
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& e, const ScopePtr& scope) {
  if (++depth_ > options_.max_depth) {
    --depth_;
    return Locate(absl::ResourceExhaustedError(
                      absl::StrCat("the render nested deeper than max_depth (",
                                   options_.max_depth, ")")),
                  e.line);
  }
  const absl::Status charged = Charge(1);
  absl::StatusOr<Value> result =
      charged.ok() ? EvalNode(e, scope) : absl::StatusOr<Value>(charged);
  --depth_;
  if (!result.ok()) return Locate(result.status(), e.line);
  return result;
}

absl::StatusOr<Value> Interpreter::EvalNode(const Expr& e,
                                            const ScopePtr& scope) {
  switch (e.kind) {
    case Expr::Kind::kConst:
      return e.value;
    case Expr::Kind::kName: {
      const Value* v = scope->Find(e.name);
      if (v != nullptr) return *v;
      return Value::Undef(absl::StrCat(StringRepr(e.name), " is undefined"));
    }
    case Expr::Kind::kAttr: {
      ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0], scope));
      return GetAttr(object, e.name);
    }
    case Expr::Kind::kItem: {
      ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0], scope));
      ASSIGN_OR_RETURN(Value key, Eval(*e.operands[1], scope));
      return GetItem(object, key);
    }
    case Expr::Kind::kSlice:
      return EvalSlice(e, scope);
    case Expr::Kind::kCall:
      return EvalCall(e, scope);
    case Expr::Kind::kFilter: {
      ASSIGN_OR_RETURN(Value input, Eval(*e.operands[0], scope));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
      return ApplyFilter(e.name, input, args);
    }
    case Expr::Kind::kTest: {
      ASSIGN_OR_RETURN(Value input, Eval(*e.operands[0], scope));
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
      ASSIGN_OR_RETURN(bool result, ApplyTest(e.name, input, args));
      return Value::Bool(result != e.negated);
    }
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.operands[0], scope));
      if (v.is_undefined()) return UndefinedError(v);
      const bool neg = e.kind == Expr::Kind::kNeg;
      if (v.is_float()) return Value::Float(neg ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        const int64_t i = v.as_integer();
        if (!neg) return Value::Int(i);
        if (i == std::numeric_limits<int64_t>::min()) return IntegerOverflow();
        return Value::Int(-i);
      }
      return TypeError(absl::StrCat("bad operand type for unary ",
                                    neg ? "-" : "+", ": '", TypeName(v), "'"));
    }
    case Expr::Kind::kNot: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.operands[0], scope));
      return Value::Bool(!Truthy(v));
    }
    case Expr::Kind::kBinary: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.operands[0], scope));
      ASSIGN_OR_RETURN(Value b, Eval(*e.operands[1], scope));
      return Binary(e.op, a, b);
    }
    case Expr::Kind::kConcat: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.operands[0], scope));
      ASSIGN_OR_RETURN(Value b, Eval(*e.operands[1], scope));
      std::string s = Str(a);
      AppendStr(b, &s);
      return NewString(std::move(s));
    }
    case Expr::Kind::kCompare:
      return EvalCompare(e, scope);
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      ASSIGN_OR_RETURN(Value a, Eval(*e.operands[0], scope));
      if (Truthy(a) == (e.kind == Expr::Kind::kOr)) return a;
      return Eval(*e.operands[1], scope);
    }
    case Expr::Kind::kCondExpr: {
      ASSIGN_OR_RETURN(Value cond, Eval(*e.operands[0], scope));
      if (Truthy(cond)) return Eval(*e.operands[1], scope);
      if (e.operands[2] != nullptr) return Eval(*e.operands[2], scope);
      return Value::Undef(
          absl::StrCat("the inline if-expression on line ", e.line,
                       " evaluated to false and no else section was defined."));
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
    case Expr::Kind::kDict:
      return EvalLiteral(e, scope);
  }
  return TypeError("unknown expression");
}

absl::StatusOr<Value> Interpreter::EvalLiteral(const Expr& e,
                                               const ScopePtr& scope) {
  std::vector<Value> values;
  values.reserve(e.operands.size());
  for (const ExprPtr& operand : e.operands) {
    ASSIGN_OR_RETURN(Value v, Eval(*operand, scope));
    values.push_back(std::move(v));
  }
  if (e.kind != Expr::Kind::kDict) {
    return NewList(std::move(values), e.kind == Expr::Kind::kTuple);
  }
  std::vector<std::pair<Value, Value>> entries;
  for (size_t i = 0; i + 1 < values.size(); i += 2) {
    const Value& key = values[i];
    if (key.is_list() || key.is_dict() || key.is_undefined() ||
        key.is_namespace()) {
      if (key.is_undefined()) return UndefinedError(key);
      return TypeError(absl::StrCat("unhashable type: '", TypeName(key), "'"));
    }
    bool replaced = false;
    for (auto& [k, v] : entries) {
      if (Equal(k, key)) {
        v = values[i + 1];
        replaced = true;
      }
    }
    if (!replaced) entries.emplace_back(key, values[i + 1]);
  }
  RETURN_IF_ERROR(Charge(static_cast<int64_t>(entries.size())));
  Value dict = Value::MakeDict(std::move(entries));
  if (dict.depth() > kMaxValueDepth) {
    return TypeError(
        absl::StrCat("a value nested deeper than ", kMaxValueDepth, " levels"));
  }
  return dict;
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& e,
                                               const ScopePtr& scope) {
  ASSIGN_OR_RETURN(Value left, Eval(*e.operands[0], scope));
  for (size_t i = 0; i < e.compare_ops.size(); ++i) {
    ASSIGN_OR_RETURN(Value right, Eval(*e.operands[i + 1], scope));
    bool result = false;
    const CompareOp op = e.compare_ops[i];
    switch (op) {
      case CompareOp::kEq:
        result = Equal(left, right);
        break;
      case CompareOp::kNe:
        result = !Equal(left, right);
        break;
      case CompareOp::kIn:
      case CompareOp::kNotIn: {
        ASSIGN_OR_RETURN(bool in, ApplyTest("in", left, CallArgs{{right}, {}}));
        result = in == (op == CompareOp::kIn);
        break;
      }
      default: {
        if (left.is_undefined()) return UndefinedError(left);
        if (right.is_undefined()) return UndefinedError(right);
        const bool swap = op == CompareOp::kGt || op == CompareOp::kLe;
        absl::StatusOr<bool> less =
            swap ? Less(right, left) : Less(left, right);
        if (!less.ok()) {
          static constexpr const char* kNames[] = {
              "==", "!=", "<", "<=", ">", ">=", "in", "not in"};
          return TypeError(
              absl::StrCat("'", kNames[static_cast<int>(op)],
                           "' not supported between instances of '",
                           TypeName(left), "' and '", TypeName(right), "'"));
        }
        // a <= b is not (b < a); a >= b is not (a < b).
        result =
            (op == CompareOp::kLt || op == CompareOp::kGt) ? *less : !*less;
        break;
      }
    }
    if (!result) return Value::Bool(false);
    left = std::move(right);
  }
  return Value::Bool(true);
}

absl::StatusOr<Value> Interpreter::EvalSlice(const Expr& e,
                                             const ScopePtr& scope) {
  if (e.operands[0] == nullptr)
    return TypeError("a slice cannot be a key here");
  ASSIGN_OR_RETURN(Value object, Eval(*e.operands[0], scope));
  int64_t bounds[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int i = 0; i < 3; ++i) {
    if (e.operands[i + 1] == nullptr) continue;
    ASSIGN_OR_RETURN(Value v, Eval(*e.operands[i + 1], scope));
    if (v.is_none()) continue;
    if (v.is_undefined()) return UndefinedError(v);
    if (!v.is_int() && !v.is_bool()) {
      return TypeError("slice indices must be integers or None");
    }
    bounds[i] = v.as_integer();
    given[i] = true;
  }
  if (object.is_undefined()) return UndefinedError(object);
  const int64_t step = bounds[2];
  if (step == 0) return TypeError("slice step cannot be zero");
  std::u32string chars;
  int64_t length = 0;
  if (object.is_string()) {
    chars = ToCodePoints(object.as_string());
    length = static_cast<int64_t>(chars.size());
  } else if (object.is_list()) {
    length = static_cast<int64_t>(object.as_list().items.size());
  } else {
    return Value::Undef(
        absl::StrCat(ObjectTypeRepr(object), " has no element slice"));
  }
  // Python's slice.indices().
  const int64_t lower = step > 0 ? 0 : -1;
  const int64_t upper = step > 0 ? length : length - 1;
  const auto clamp = [&](int64_t v) {
    if (v < 0) return std::max(v + length, lower);
    return std::min(v, upper);
  };
  const int64_t start =
      given[0] ? clamp(bounds[0]) : (step > 0 ? lower : upper);
  const int64_t stop = given[1] ? clamp(bounds[1]) : (step > 0 ? upper : lower);
  std::vector<int64_t> indexes;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    indexes.push_back(i);
  }
  RETURN_IF_ERROR(Charge(static_cast<int64_t>(indexes.size())));
  if (object.is_string()) {
    std::u32string out;
    for (int64_t i : indexes) out.push_back(chars[i]);
    return NewString(FromCodePoints(out));
  }
  std::vector<Value> items;
  items.reserve(indexes.size());
  for (int64_t i : indexes) items.push_back(object.as_list().items[i]);
  return NewList(std::move(items), object.as_list().tuple);
}

absl::StatusOr<CallArgs> Interpreter::EvalArgs(const Expr& e, size_t first,
                                               const ScopePtr& scope) {
  CallArgs args;
  for (size_t i = first; i < e.operands.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, Eval(*e.operands[i], scope));
    args.positional.push_back(std::move(v));
  }
  for (const auto& [name, expr] : e.keywords) {
    ASSIGN_OR_RETURN(Value v, Eval(*expr, scope));
    args.keyword.emplace_back(name, std::move(v));
  }
  return args;
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e,
                                            const ScopePtr& scope) {
  const Expr& callee = *e.operands[0];
  if (callee.kind == Expr::Kind::kAttr) {
    // obj.method(...) without building a bound method first.
    ASSIGN_OR_RETURN(Value object, Eval(*callee.operands[0], scope));
    if ((object.is_string() || object.is_list() || object.is_dict()) &&
        HasMethod(object, callee.name)) {
      ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
      return CallMethod(object, callee.name, args);
    }
    ASSIGN_OR_RETURN(Value function, GetAttr(object, callee.name));
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
    return Call(function, std::move(args));
  }
  ASSIGN_OR_RETURN(Value function, Eval(callee, scope));
  ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, 1, scope));
  return Call(function, std::move(args));
}

absl::StatusOr<Value> Interpreter::Call(const Value& callee, CallArgs args) {
  if (callee.is_undefined()) return UndefinedError(callee);
  if (!callee.is_callable()) {
    return TypeError(
        absl::StrCat("'", TypeName(callee), "' object is not callable"));
  }
  const Callable& c = callee.as_callable();
  if (const auto* macro = dynamic_cast<const Macro*>(&c)) {
    return CallMacro(*macro, std::move(args));
  }
  if (const auto* method = dynamic_cast<const BoundMethod*>(&c)) {
    return CallMethod(method->self(), method->name(), args);
  }
  if (const auto* native = dynamic_cast<const NativeFunction*>(&c)) {
    return native->Call(args);
  }
  return TypeError("object is not callable");
}

absl::StatusOr<Value> Interpreter::CallMacro(const Macro& macro,
                                             CallArgs args) {
  const MacroDef& def = macro.def();
  if (call_depth_ >= options_.max_call_depth) {
    return absl::ResourceExhaustedError(
        absl::StrCat("macro calls nested deeper than max_call_depth (",
                     options_.max_call_depth, ")"));
  }
  auto scope = std::make_shared<Scope>(macro.closure());
  const size_t n = def.params.size();
  std::vector<bool> bound(n, false);
  std::vector<Value> varargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < n) {
      scope->Set(def.params[i], std::move(args.positional[i]));
      bound[i] = true;
    } else if (def.uses_varargs) {
      varargs.push_back(std::move(args.positional[i]));
    } else {
      return TypeError(absl::StrCat(
          "macro '", def.name, "' takes not more than ", n, " argument(s)"));
    }
  }
  std::vector<std::pair<Value, Value>> kwargs;
  bool has_caller = false;
  for (auto& [name, value] : args.keyword) {
    const auto it = std::find(def.params.begin(), def.params.end(), name);
    if (it != def.params.end()) {
      const size_t i = it - def.params.begin();
      if (bound[i]) {
        return TypeError(absl::StrCat("macro '", def.name,
                                      "' got multiple values for argument '",
                                      name, "'"));
      }
      scope->Set(name, std::move(value));
      bound[i] = true;
    } else if (name == "caller" && def.uses_caller) {
      scope->Set("caller", std::move(value));
      has_caller = true;
    } else if (def.uses_kwargs) {
      kwargs.emplace_back(Value::String(name), std::move(value));
    } else {
      return TypeError(absl::StrCat(
          "macro '", def.name, "' takes no keyword argument '", name, "'"));
    }
  }
  ++call_depth_;
  struct Uncall {
    int* depth;
    ~Uncall() { --*depth; }
  } uncall{&call_depth_};
  // Defaults are evaluated in the call's frame, so they see earlier
  // parameters.
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    if (def.defaults[i] != nullptr) {
      ASSIGN_OR_RETURN(Value v, Eval(*def.defaults[i], scope));
      scope->Set(def.params[i], std::move(v));
    } else {
      scope->Set(def.params[i], Value::Undef(absl::StrCat(
                                    "parameter ", StringRepr(def.params[i]),
                                    " was not provided")));
    }
  }
  if (def.uses_varargs) {
    ASSIGN_OR_RETURN(Value v, NewList(std::move(varargs), /*tuple=*/true));
    scope->Set("varargs", std::move(v));
  }
  if (def.uses_kwargs) scope->Set("kwargs", Value::MakeDict(std::move(kwargs)));
  if (def.uses_caller && !has_caller) {
    scope->Set("caller", Value::Undef("No caller defined"));
  }
  std::string out;
  Flow flow = Flow::kNormal;
  RETURN_IF_ERROR(Exec(def.body, scope, &out, &flow));
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Interpreter::GetAttr(const Value& object,
                                           absl::string_view name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      return UndefinedError(object);
    case Value::Kind::kDict: {
      // jinja2 tries the attribute first: d.items is the method even when
      // the dict has an 'items' key.
      if (HasMethod(object, name)) return MakeBoundMethod(object, name);
      if (IsMutatingMethod(object, name) || absl::StartsWith(name, "__")) {
        return UnsafeUndefined(object, name);
      }
      if (const Value* v = object.as_dict().Find(name)) return *v;
      break;
    }
    case Value::Kind::kNamespace:
      if (const Value* v = object.as_namespace().Find(name)) return *v;
      break;
    case Value::Kind::kString:
    case Value::Kind::kList:
      if (HasMethod(object, name)) return MakeBoundMethod(object, name);
      if (IsMutatingMethod(object, name) || absl::StartsWith(name, "__")) {
        return UnsafeUndefined(object, name);
      }
      break;
    default:
      if (absl::StartsWith(name, "__")) return UnsafeUndefined(object, name);
      break;
  }
  return Value::Undef(MissingMessage(object, Value::String(std::string(name))));
}

absl::StatusOr<Value> Interpreter::GetItem(const Value& object,
                                           const Value& key) {
  if (object.is_undefined()) return UndefinedError(object);
  if (key.is_undefined() && !object.is_dict()) return UndefinedError(key);
  switch (object.kind()) {
    case Value::Kind::kDict:
      if (const Value* v = object.as_dict().Find(key)) return *v;
      break;
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (key.is_int() || key.is_bool()) {
        int64_t i = key.as_integer();
        if (object.is_list()) {
          const auto& items = object.as_list().items;
          const int64_t n = static_cast<int64_t>(items.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return items[i];
        } else {
          const std::string& s = object.as_string();
          std::u32string chars = ToCodePoints(s);
          const int64_t n = static_cast<int64_t>(chars.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) {
            return Value::String(FromCodePoints(chars.substr(i, 1)));
          }
        }
        return Value::Undef(MissingMessage(object, key));
      }
      break;
    default:
      break;
  }
  // jinja2's getitem falls back to the attribute for string keys.
  if (key.is_string()) return GetAttr(object, key.as_string());
  return Value::Undef(MissingMessage(object, key));
}

absl::StatusOr<Value> Interpreter::Binary(BinaryOp op, const Value& a,
                                          const Value& b) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  static constexpr const char* kSymbols[] = {"+",  "-", "*", "/",
                                             "//", "%", "**"};
  const char* symbol = kSymbols[static_cast<int>(op)];
  if (a.is_number() && b.is_number()) {
    const bool ints = !a.is_float() && !b.is_float();
    if (ints) {
      const int64_t x = a.as_integer(), y = b.as_integer();
      int64_t r = 0;
      switch (op) {
        case BinaryOp::kAdd:
          if (!CheckedAdd(x, y, &r)) return IntegerOverflow();
          return Value::Int(r);
        case BinaryOp::kSub:
          if (__builtin_sub_overflow(x, y, &r)) return IntegerOverflow();
          return Value::Int(r);
        case BinaryOp::kMul:
          if (__builtin_mul_overflow(x, y, &r)) return IntegerOverflow();
          return Value::Int(r);
        case BinaryOp::kDiv:
          if (y == 0) return TypeError("division by zero");
          return Value::Float(static_cast<double>(x) / static_cast<double>(y));
        case BinaryOp::kFloorDiv: {
          ASSIGN_OR_RETURN(int64_t q, PyFloorDiv(x, y));
          return Value::Int(q);
        }
        case BinaryOp::kMod: {
          ASSIGN_OR_RETURN(int64_t m, PyMod(x, y));
          return Value::Int(m);
        }
        case BinaryOp::kPow: {
          if (y < 0) {
            if (x == 0) {
              return TypeError("0.0 cannot be raised to a negative power");
            }
            return Value::Float(
                std::pow(static_cast<double>(x), static_cast<double>(y)));
          }
          int64_t result = 1, base = x, exp = y;
          while (exp > 0) {
            if (exp & 1) {
              if (__builtin_mul_overflow(result, base, &result)) {
                return IntegerOverflow();
              }
            }
            exp >>= 1;
            if (exp > 0 && __builtin_mul_overflow(base, base, &base)) {
              return IntegerOverflow();
            }
          }
          return Value::Int(result);
        }
      }
    }
    const double x = a.as_double(), y = b.as_double();
    switch (op) {
      case BinaryOp::kAdd:
        return Value::Float(x + y);
      case BinaryOp::kSub:
        return Value::Float(x - y);
      case BinaryOp::kMul:
        return Value::Float(x * y);
      case BinaryOp::kDiv:
        if (y == 0) return TypeError("float division by zero");
        return Value::Float(x / y);
      case BinaryOp::kFloorDiv:
        if (y == 0) return TypeError("float floor division by zero");
        return Value::Float(std::floor(x / y));
      case BinaryOp::kMod:
        if (y == 0) return TypeError("float modulo");
        return Value::Float(PyFloatMod(x, y));
      case BinaryOp::kPow:
        if (x == 0 && y < 0) {
          return TypeError("0.0 cannot be raised to a negative power");
        }
        return Value::Float(std::pow(x, y));
    }
  }
  if (op == BinaryOp::kAdd) {
    if (a.is_string() && b.is_string()) {
      RETURN_IF_ERROR(CheckString(a.as_string().size() + b.as_string().size()));
      return Value::String(absl::StrCat(a.as_string(), b.as_string()));
    }
    if (a.is_list() && b.is_list() && a.as_list().tuple == b.as_list().tuple) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(),
                   b.as_list().items.end());
      return NewList(std::move(items), a.as_list().tuple);
    }
    if (a.is_string() || a.is_list()) {
      return TypeError(absl::StrCat("can only concatenate ", TypeName(a),
                                    " (not \"", TypeName(b), "\") to ",
                                    TypeName(a)));
    }
  }
  if (op == BinaryOp::kMul) {
    const Value* seq = (a.is_string() || a.is_list()) ? &a : &b;
    const Value* count = seq == &a ? &b : &a;
    if ((seq->is_string() || seq->is_list()) &&
        (count->is_int() || count->is_bool())) {
      const int64_t n = std::max<int64_t>(0, count->as_integer());
      if (seq->is_string()) {
        const std::string& s = seq->as_string();
        if (!s.empty() && n > static_cast<int64_t>(options_.max_output_bytes)) {
          return CheckString(options_.max_output_bytes + 1);
        }
        RETURN_IF_ERROR(CheckString(s.size() * static_cast<size_t>(n)));
        std::string out;
        out.reserve(s.size() * n);
        for (int64_t i = 0; i < n; ++i) out.append(s);
        return Value::String(std::move(out));
      }
      const auto& items = seq->as_list().items;
      if (!items.empty()) {
        RETURN_IF_ERROR(Charge(n > options_.max_steps ? options_.max_steps + 1
                                                      : n * items.size()));
      }
      std::vector<Value> out;
      for (int64_t i = 0; i < n && !items.empty(); ++i) {
        out.insert(out.end(), items.begin(), items.end());
      }
      return NewList(std::move(out), seq->as_list().tuple);
    }
  }
  if (op == BinaryOp::kMod && a.is_string()) {
    ASSIGN_OR_RETURN(std::string s, PercentFormat(a.as_string(), b));
    return NewString(std::move(s));
  }
  return Unsupported(symbol, a, b);
}

absl::StatusOr<Template> Template::Parse(absl::string_view source,
                                         const ParseOptions& options) {
  const auto fail = [&](const absl::Status& status) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.name, absl::StartsWith(status.message(), "line ") ? " " : ": ",
        status.message()));
  };
  if (source.size() > options.max_source_bytes) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("the template is ", source.size(),
                     " bytes, more than max_source_bytes (",
                     options.max_source_bytes, ")")));
  }
  absl::StatusOr<std::vector<Token>> tokens = Lex(source);
  if (!tokens.ok()) return fail(tokens.status());
  absl::StatusOr<Body> body = jinja::Parse(*tokens, options.max_nesting);
  if (!body.ok()) return fail(body.status());
  if (absl::Status names = CheckNames(*body); !names.ok()) return fail(names);
  auto program = std::make_shared<Program>();
  program->name = options.name;
  program->body = *std::move(body);
  return Template(std::move(program));
}

absl::StatusOr<std::string> Template::Render(
    const Variables& variables, const RenderOptions& options) const {
  absl::StatusOr<std::string> out =
      Interpreter(*program_, options).Render(variables);
  if (out.ok() || IsRaisedError(out.status())) return out;
  const absl::string_view message = out.status().message();
  return absl::Status(
      out.status().code(),
      absl::StrCat(program_->name,
                   absl::StartsWith(message, "line ") ? " " : ": ", message));
}

const std::string& Template::name() const { return program_->name; }

}  // namespace ringmoe::jinja

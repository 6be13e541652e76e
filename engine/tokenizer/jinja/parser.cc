#include "engine/tokenizer/jinja/parser.h"

#include <initializer_list>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace ringmoe::jinja {
namespace {

using Type = Token::Type;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, int max_nesting)
      : tokens_(tokens), max_nesting_(max_nesting) {}

  absl::StatusOr<Body> Run() {
    Body body;
    std::string end_tag;
    RETURN_IF_ERROR(ParseBody({}, "", 0, &body, &end_tag));
    return body;
  }

 private:
  // Counts nesting while a parse function is active.
  class Nest {
   public:
    explicit Nest(Parser* parser) : parser_(parser) { ++parser_->depth_; }
    ~Nest() { --parser_->depth_; }
    absl::Status Check() const {
      if (parser_->depth_ <= parser_->max_nesting_) return absl::OkStatus();
      return parser_->Error(absl::StrCat("the template nests deeper than ",
                                         parser_->max_nesting_,
                                         " levels (blocks and expressions)"));
    }

   private:
    Parser* parser_;
  };

  const Token& Current() const { return tokens_[pos_]; }
  const Token& Peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  void Next() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }
  bool IsOp(absl::string_view op) const {
    return Current().type == Type::kOperator && Current().text == op;
  }
  bool IsName(absl::string_view name) const {
    return Current().type == Type::kName && Current().text == name;
  }
  bool SkipOp(absl::string_view op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(absl::string_view name) {
    if (!IsName(name)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& token) {
    switch (token.type) {
      case Type::kText:
        return "template text";
      case Type::kVariableBegin:
        return "'{{'";
      case Type::kVariableEnd:
        return "end of print statement '}}'";
      case Type::kBlockBegin:
        return "'{%'";
      case Type::kBlockEnd:
        return "end of statement block '%}'";
      case Type::kString:
        return "string";
      case Type::kInteger:
        return "integer";
      case Type::kFloat:
        return "float";
      case Type::kEnd:
        return "end of template";
      case Type::kName:
      case Type::kOperator:
        return absl::StrCat("'", token.text, "'");
    }
    return "token";
  }

  absl::Status Error(absl::string_view message) const {
    return ErrorAt(Current().line, message);
  }
  static absl::Status ErrorAt(int line, absl::string_view message) {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", line, ": ", message));
  }
  absl::Status Unexpected(absl::string_view wanted) const {
    return Error(
        absl::StrCat("expected ", wanted, ", got ", Describe(Current())));
  }
  absl::Status ExpectOp(absl::string_view op) {
    if (!SkipOp(op)) return Unexpected(absl::StrCat("'", op, "'"));
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Current().type != Type::kBlockEnd) {
      return Unexpected("end of statement block '%}'");
    }
    Next();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Current().type != Type::kName) return Unexpected("a name");
    std::string name = Current().text;
    Next();
    return name;
  }

  static ExprPtr MakeExpr(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // Statements until a block tag named in `end_tags` (consumed up to and
  // including its name; *end_tag receives it), or the end of the template
  // when end_tags is empty. `opener` names the enclosing block for errors.
  absl::Status ParseBody(std::initializer_list<absl::string_view> end_tags,
                         absl::string_view opener, int open_line, Body* body,
                         std::string* end_tag) {
    while (true) {
      const Token& token = Current();
      switch (token.type) {
        case Type::kEnd:
          if (end_tags.size() == 0) return absl::OkStatus();
          {
            std::vector<std::string> wanted;
            for (absl::string_view end : end_tags) {
              wanted.push_back(absl::StrCat("{% ", end, " %}"));
            }
            return ErrorAt(
                open_line,
                absl::StrCat("unexpected end of template: the '", opener,
                             "' here needs ", absl::StrJoin(wanted, " or ")));
          }
        case Type::kText: {
          auto stmt = std::make_unique<Stmt>();
          stmt->kind = Stmt::Kind::kText;
          stmt->line = token.line;
          stmt->text = token.text;
          body->push_back(std::move(stmt));
          Next();
          break;
        }
        case Type::kVariableBegin: {
          auto stmt = std::make_unique<Stmt>();
          stmt->kind = Stmt::Kind::kOutput;
          stmt->line = token.line;
          Next();
          ASSIGN_OR_RETURN(ExprPtr expr, ParseTuple(true, {}, false));
          stmt->exprs.push_back(std::move(expr));
          if (Current().type != Type::kVariableEnd) {
            return Unexpected("end of print statement '}}'");
          }
          Next();
          body->push_back(std::move(stmt));
          break;
        }
        case Type::kBlockBegin: {
          const Token& name = Peek();
          if (name.type == Type::kName) {
            for (absl::string_view end : end_tags) {
              if (name.text == end) {
                *end_tag = name.text;
                Next();
                Next();
                return absl::OkStatus();
              }
            }
          }
          Next();
          ASSIGN_OR_RETURN(StmtPtr stmt, ParseStatement(end_tags, opener));
          if (stmt != nullptr) body->push_back(std::move(stmt));
          break;
        }
        default:
          return Unexpected("template text or a tag");
      }
    }
  }

  absl::StatusOr<StmtPtr> ParseStatement(
      std::initializer_list<absl::string_view> end_tags,
      absl::string_view opener) {
    Nest nest(this);
    RETURN_IF_ERROR(nest.Check());
    if (Current().type != Type::kName) return Unexpected("a tag name");
    const std::string tag = Current().text;
    const int line = Current().line;
    auto stmt = std::make_unique<Stmt>();
    stmt->line = line;
    Next();
    if (tag == "if") {
      stmt->kind = Stmt::Kind::kIf;
      while (true) {
        ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(false, {}, false));
        stmt->exprs.push_back(std::move(cond));
        RETURN_IF_ERROR(ExpectBlockEnd());
        Body body;
        std::string end;
        RETURN_IF_ERROR(
            ParseBody({"elif", "else", "endif"}, "if", line, &body, &end));
        stmt->bodies.push_back(std::move(body));
        if (end == "elif") continue;
        if (end == "else") {
          RETURN_IF_ERROR(ExpectBlockEnd());
          Body else_body;
          RETURN_IF_ERROR(ParseBody({"endif"}, "if", line, &else_body, &end));
          stmt->bodies.push_back(std::move(else_body));
        }
        break;
      }
    } else if (tag == "for") {
      stmt->kind = Stmt::Kind::kFor;
      RETURN_IF_ERROR(ParseTargets(stmt.get(), /*allow_attr=*/false));
      if (!SkipName("in")) return Unexpected("'in'");
      ASSIGN_OR_RETURN(ExprPtr iter,
                       ParseTuple(false, {"recursive", "if"}, false));
      stmt->exprs.push_back(std::move(iter));
      ExprPtr filter;
      if (SkipName("if")) {
        ASSIGN_OR_RETURN(filter, ParseExpression(true));
      }
      stmt->exprs.push_back(std::move(filter));
      if (IsName("recursive")) {
        return Error("recursive loops are not supported");
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      ++loop_depth_;
      Body body, else_body;
      std::string end;
      RETURN_IF_ERROR(ParseBody({"endfor", "else"}, "for", line, &body, &end));
      --loop_depth_;
      if (end == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        RETURN_IF_ERROR(ParseBody({"endfor"}, "for", line, &else_body, &end));
      }
      stmt->bodies.push_back(std::move(body));
      stmt->bodies.push_back(std::move(else_body));
    } else if (tag == "set") {
      RETURN_IF_ERROR(ParseTargets(stmt.get(), /*allow_attr=*/true));
      if (SkipOp("=")) {
        stmt->kind = Stmt::Kind::kSet;
        ASSIGN_OR_RETURN(ExprPtr value, ParseTuple(true, {}, false));
        stmt->exprs.push_back(std::move(value));
      } else {
        stmt->kind = Stmt::Kind::kSetBlock;
        if (stmt->tuple_target) return Unexpected("'='");
        while (SkipOp("|")) {
          ASSIGN_OR_RETURN(ExprPtr filter, ParseFilter(nullptr));
          stmt->exprs.push_back(std::move(filter));
        }
        Body body;
        std::string end;
        RETURN_IF_ERROR(ExpectBlockEnd());
        RETURN_IF_ERROR(ParseBody({"endset"}, "set", line, &body, &end));
        stmt->bodies.push_back(std::move(body));
      }
    } else if (tag == "macro") {
      stmt->kind = Stmt::Kind::kMacro;
      stmt->macro = std::make_unique<MacroDef>();
      ASSIGN_OR_RETURN(stmt->macro->name, ExpectName());
      RETURN_IF_ERROR(
          ParseMacroBody(stmt->macro.get(), "endmacro", true, line));
    } else if (tag == "call") {
      stmt->kind = Stmt::Kind::kCallBlock;
      stmt->macro = std::make_unique<MacroDef>();
      stmt->macro->name = "caller";
      if (IsOp("(")) RETURN_IF_ERROR(ParseParams(stmt->macro.get()));
      ASSIGN_OR_RETURN(ExprPtr call, ParseExpression(true));
      if (call->kind != Expr::Kind::kCall) {
        return ErrorAt(line, "expected a call after {% call %}");
      }
      stmt->exprs.push_back(std::move(call));
      RETURN_IF_ERROR(
          ParseMacroBody(stmt->macro.get(), "endcall", false, line));
    } else if (tag == "filter") {
      stmt->kind = Stmt::Kind::kFilterBlock;
      do {
        ASSIGN_OR_RETURN(ExprPtr filter, ParseFilter(nullptr));
        stmt->exprs.push_back(std::move(filter));
      } while (SkipOp("|"));
      RETURN_IF_ERROR(ExpectBlockEnd());
      Body body;
      std::string end;
      RETURN_IF_ERROR(ParseBody({"endfilter"}, "filter", line, &body, &end));
      stmt->bodies.push_back(std::move(body));
    } else if (tag == "with") {
      stmt->kind = Stmt::Kind::kWith;
      while (Current().type != Type::kBlockEnd) {
        if (!stmt->targets.empty()) RETURN_IF_ERROR(ExpectOp(","));
        ASSIGN_OR_RETURN(std::string name, ExpectName());
        RETURN_IF_ERROR(ExpectOp("="));
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        stmt->targets.push_back(std::move(name));
        stmt->exprs.push_back(std::move(value));
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      Body body;
      std::string end;
      RETURN_IF_ERROR(ParseBody({"endwith"}, "with", line, &body, &end));
      stmt->bodies.push_back(std::move(body));
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) {
        return ErrorAt(line, absl::StrCat("'", tag, "' outside of a loop"));
      }
      stmt->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    } else if (tag == "generation") {
      stmt->kind = Stmt::Kind::kScope;
      RETURN_IF_ERROR(ExpectBlockEnd());
      Body body;
      std::string end;
      RETURN_IF_ERROR(
          ParseBody({"endgeneration"}, "generation", line, &body, &end));
      stmt->bodies.push_back(std::move(body));
    } else {
      std::string message = absl::StrCat("unknown tag '", tag, "'");
      if (end_tags.size() > 0) {
        std::vector<std::string> wanted;
        for (absl::string_view end : end_tags) {
          wanted.push_back(absl::StrCat("'", end, "'"));
        }
        absl::StrAppend(&message, " (the innermost open block is '", opener,
                        "', closed by ", absl::StrJoin(wanted, " or "), ")");
      }
      return ErrorAt(line, message);
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    return stmt;
  }

  // A for/set target: `a`, `a, b`, `(a, b)` or (set only) `ns.attr`.
  absl::Status ParseTargets(Stmt* stmt, bool allow_attr) {
    const bool parenthesized = SkipOp("(");
    ASSIGN_OR_RETURN(std::string first, ExpectName());
    stmt->targets.push_back(std::move(first));
    if (allow_attr && !parenthesized && IsOp(".")) {
      Next();
      ASSIGN_OR_RETURN(stmt->attr, ExpectName());
      return absl::OkStatus();
    }
    while (SkipOp(",")) {
      stmt->tuple_target = true;
      if (Current().type != Type::kName) break;  // a trailing comma
      stmt->targets.push_back(Current().text);
      Next();
    }
    if (parenthesized) {
      stmt->tuple_target = true;
      RETURN_IF_ERROR(ExpectOp(")"));
    }
    return absl::OkStatus();
  }

  absl::Status ParseParams(MacroDef* macro) {
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (!macro->params.empty()) RETURN_IF_ERROR(ExpectOp(","));
      if (IsOp(")")) break;
      ASSIGN_OR_RETURN(std::string name, ExpectName());
      ExprPtr default_value;
      if (SkipOp("=")) {
        ASSIGN_OR_RETURN(default_value, ParseExpression(true));
      } else if (!macro->defaults.empty() &&
                 macro->defaults.back() != nullptr) {
        return Error(
            "a parameter without a default follows one with a default");
      }
      macro->params.push_back(std::move(name));
      macro->defaults.push_back(std::move(default_value));
    }
    Next();
    return absl::OkStatus();
  }

  absl::Status ParseMacroBody(MacroDef* macro, absl::string_view end_tag,
                              bool params, int line) {
    if (params) RETURN_IF_ERROR(ParseParams(macro));
    RETURN_IF_ERROR(ExpectBlockEnd());
    macros_.push_back(macro);
    // A loop around a macro does not make break legal inside it.
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    std::string end;
    const std::string opener = params ? "macro" : "call";
    const absl::Status status =
        ParseBody({end_tag}, opener, line, &macro->body, &end);
    loop_depth_ = saved_loop_depth;
    macros_.pop_back();
    return status;
  }

  // Expressions (jinja2's precedence, loosest first).

  absl::StatusOr<ExprPtr> ParseExpression(bool with_condexpr) {
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  // `a, b` makes a tuple; a single expression stays itself. Ends at '}}',
  // '%}', ')' or a name in `end_names`.
  absl::StatusOr<ExprPtr> ParseTuple(
      bool with_condexpr, std::initializer_list<absl::string_view> end_names,
      bool explicit_parentheses) {
    const int line = Current().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) RETURN_IF_ERROR(ExpectOp(","));
      const Token& token = Current();
      bool end = token.type == Type::kVariableEnd ||
                 token.type == Type::kBlockEnd ||
                 (token.type == Type::kOperator && token.text == ")");
      for (absl::string_view name : end_names) end |= IsName(name);
      if (end) break;
      ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(with_condexpr));
      items.push_back(std::move(item));
      if (!IsOp(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) return Unexpected("an expression");
    }
    ExprPtr tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->operands = std::move(items);
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseCondExpr() {
    Nest nest(this);
    RETURN_IF_ERROR(nest.Check());
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      const int line = Current().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr otherwise;
      if (SkipName("else")) {
        ASSIGN_OR_RETURN(otherwise, ParseCondExpr());
      }
      ExprPtr node = MakeExpr(Expr::Kind::kCondExpr, line);
      node->operands.push_back(std::move(cond));
      node->operands.push_back(std::move(expr));
      node->operands.push_back(std::move(otherwise));
      expr = std::move(node);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const int line = Current().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = Binary(Expr::Kind::kOr, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const int line = Current().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = Binary(Expr::Kind::kAnd, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      Nest nest(this);
      RETURN_IF_ERROR(nest.Check());
      const int line = Current().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      ExprPtr node = MakeExpr(Expr::Kind::kNot, line);
      node->operands.push_back(std::move(operand));
      return node;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    const int line = Current().line;
    ASSIGN_OR_RETURN(ExprPtr first, ParseMath1());
    ExprPtr node;
    while (true) {
      CompareOp op;
      if (IsOp("==")) {
        op = CompareOp::kEq;
      } else if (IsOp("!=")) {
        op = CompareOp::kNe;
      } else if (IsOp("<")) {
        op = CompareOp::kLt;
      } else if (IsOp("<=")) {
        op = CompareOp::kLe;
      } else if (IsOp(">")) {
        op = CompareOp::kGt;
      } else if (IsOp(">=")) {
        op = CompareOp::kGe;
      } else if (IsName("in")) {
        op = CompareOp::kIn;
      } else if (IsName("not") && Peek().type == Type::kName &&
                 Peek().text == "in") {
        op = CompareOp::kNotIn;
        Next();
      } else {
        break;
      }
      Next();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseMath1());
      if (node == nullptr) {
        node = MakeExpr(Expr::Kind::kCompare, line);
        node->operands.push_back(std::move(first));
      }
      node->compare_ops.push_back(op);
      node->operands.push_back(std::move(operand));
    }
    return node != nullptr ? std::move(node) : std::move(first);
  }

  static ExprPtr Binary(Expr::Kind kind, int line, ExprPtr left,
                        ExprPtr right) {
    ExprPtr node = MakeExpr(kind, line);
    node->operands.push_back(std::move(left));
    node->operands.push_back(std::move(right));
    return node;
  }

  static ExprPtr Arith(BinaryOp op, int line, ExprPtr left, ExprPtr right) {
    ExprPtr node =
        Binary(Expr::Kind::kBinary, line, std::move(left), std::move(right));
    node->op = op;
    return node;
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const BinaryOp op = IsOp("+") ? BinaryOp::kAdd : BinaryOp::kSub;
      const int line = Current().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = Arith(op, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      const int line = Current().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      left =
          Binary(Expr::Kind::kConcat, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (true) {
      BinaryOp op;
      if (IsOp("*")) {
        op = BinaryOp::kMul;
      } else if (IsOp("/")) {
        op = BinaryOp::kDiv;
      } else if (IsOp("//")) {
        op = BinaryOp::kFloorDiv;
      } else if (IsOp("%")) {
        op = BinaryOp::kMod;
      } else {
        return left;
      }
      const int line = Current().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      left = Arith(op, line, std::move(left), std::move(right));
    }
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const int line = Current().line;
      Next();
      ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      left = Arith(BinaryOp::kPow, line, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    Nest nest(this);
    RETURN_IF_ERROR(nest.Check());
    const int line = Current().line;
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Expr::Kind kind = IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos;
      Next();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node = MakeExpr(kind, line);
      node->operands.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilterExpr(std::move(node)));
    }
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& token = Current();
    const int line = token.line;
    switch (token.type) {
      case Type::kName: {
        const std::string& name = token.text;
        ExprPtr node;
        if (name == "true" || name == "True" || name == "false" ||
            name == "False") {
          node = MakeExpr(Expr::Kind::kConst, line);
          node->value = Value::Bool(name == "true" || name == "True");
        } else if (name == "none" || name == "None") {
          node = MakeExpr(Expr::Kind::kConst, line);
        } else {
          node = MakeExpr(Expr::Kind::kName, line);
          node->name = name;
          for (MacroDef* macro : macros_) {
            macro->uses_varargs |= name == "varargs";
            macro->uses_kwargs |= name == "kwargs";
            macro->uses_caller |= name == "caller";
          }
        }
        Next();
        return node;
      }
      case Type::kString: {
        std::string text;
        while (Current().type == Type::kString) {
          text += Current().text;
          Next();
        }
        ExprPtr node = MakeExpr(Expr::Kind::kConst, line);
        node->value = Value::String(std::move(text));
        return node;
      }
      case Type::kInteger:
      case Type::kFloat: {
        ExprPtr node = MakeExpr(Expr::Kind::kConst, line);
        node->value = token.type == Type::kInteger ? Value::Int(token.integer)
                                                   : Value::Float(token.number);
        Next();
        return node;
      }
      case Type::kOperator:
        if (token.text == "(") {
          Next();
          ASSIGN_OR_RETURN(ExprPtr node, ParseTuple(true, {}, true));
          RETURN_IF_ERROR(ExpectOp(")"));
          return node;
        }
        if (token.text == "[") {
          Next();
          ExprPtr node = MakeExpr(Expr::Kind::kList, line);
          while (!IsOp("]")) {
            if (!node->operands.empty()) RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("]")) break;
            ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
            node->operands.push_back(std::move(item));
          }
          Next();
          return node;
        }
        if (token.text == "{") {
          Next();
          ExprPtr node = MakeExpr(Expr::Kind::kDict, line);
          while (!IsOp("}")) {
            if (!node->operands.empty()) RETURN_IF_ERROR(ExpectOp(","));
            if (IsOp("}")) break;
            ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
            RETURN_IF_ERROR(ExpectOp(":"));
            ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
            node->operands.push_back(std::move(key));
            node->operands.push_back(std::move(value));
          }
          Next();
          return node;
        }
        break;
      default:
        break;
    }
    return Unexpected("an expression");
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const int line = Current().line;
      if (IsOp(".")) {
        Next();
        if (Current().type == Type::kName) {
          ExprPtr attr = MakeExpr(Expr::Kind::kAttr, line);
          attr->name = Current().text;
          attr->operands.push_back(std::move(node));
          node = std::move(attr);
        } else if (Current().type == Type::kInteger) {
          ExprPtr index = MakeExpr(Expr::Kind::kConst, line);
          index->value = Value::Int(Current().integer);
          node = Binary(Expr::Kind::kItem, line, std::move(node),
                        std::move(index));
        } else {
          return Unexpected("an attribute name");
        }
        Next();
      } else if (IsOp("[")) {
        Next();
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), line));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr node, int line) {
    std::vector<ExprPtr> args;
    while (!IsOp("]")) {
      if (!args.empty()) RETURN_IF_ERROR(ExpectOp(","));
      ASSIGN_OR_RETURN(ExprPtr arg, ParseSubscribed());
      args.push_back(std::move(arg));
    }
    Next();
    if (args.empty()) return ErrorAt(line, "expected a subscript");
    if (args.size() == 1 && args[0]->kind == Expr::Kind::kSlice) {
      args[0]->operands[0] = std::move(node);
      return std::move(args[0]);
    }
    ExprPtr key;
    if (args.size() == 1) {
      key = std::move(args[0]);
    } else {
      key = MakeExpr(Expr::Kind::kTuple, line);
      key->operands = std::move(args);
    }
    return Binary(Expr::Kind::kItem, line, std::move(node), std::move(key));
  }

  // An index or a slice `start:stop:step` (each part optional). A slice's
  // operands[0] is left for the subscripted object.
  absl::StatusOr<ExprPtr> ParseSubscribed() {
    const int line = Current().line;
    ExprPtr start;
    if (!SkipOp(":")) {
      ASSIGN_OR_RETURN(start, ParseExpression(true));
      if (!SkipOp(":")) return start;
    }
    ExprPtr slice = MakeExpr(Expr::Kind::kSlice, line);
    slice->operands.resize(4);
    slice->operands[1] = std::move(start);
    if (!IsOp(":") && !IsOp("]") && !IsOp(",")) {
      ASSIGN_OR_RETURN(slice->operands[2], ParseExpression(true));
    }
    if (SkipOp(":")) {
      if (!IsOp("]") && !IsOp(",")) {
        ASSIGN_OR_RETURN(slice->operands[3], ParseExpression(true));
      }
    }
    return slice;
  }

  // `(args, name=value)`; fills node->operands (after what is there) and
  // node->keywords.
  absl::Status ParseCallArgs(Expr* node) {
    RETURN_IF_ERROR(ExpectOp("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) RETURN_IF_ERROR(ExpectOp(","));
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) {
        return Error("*args and **kwargs in calls are not supported");
      }
      if (Current().type == Type::kName && Peek().type == Type::kOperator &&
          Peek().text == "=") {
        std::string name = Current().text;
        Next();
        Next();
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        node->keywords.emplace_back(std::move(name), std::move(value));
      } else {
        if (!node->keywords.empty()) {
          return Error("a positional argument follows a keyword argument");
        }
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        node->operands.push_back(std::move(value));
      }
    }
    Next();
    return absl::OkStatus();
  }

  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee) {
    ExprPtr node = MakeExpr(Expr::Kind::kCall, Current().line);
    node->operands.push_back(std::move(callee));
    RETURN_IF_ERROR(ParseCallArgs(node.get()));
    return node;
  }

  absl::StatusOr<ExprPtr> ParseFilterExpr(ExprPtr node) {
    while (true) {
      if (IsOp("|")) {
        Next();
        ASSIGN_OR_RETURN(node, ParseFilter(std::move(node)));
      } else if (IsName("is")) {
        Next();
        ASSIGN_OR_RETURN(node, ParseTest(std::move(node)));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node)));
      } else {
        return node;
      }
    }
  }

  // After '|': name(args). `input` is null in {% filter %} and {% set %}
  // blocks.
  absl::StatusOr<ExprPtr> ParseFilter(ExprPtr input) {
    ExprPtr node = MakeExpr(Expr::Kind::kFilter, Current().line);
    ASSIGN_OR_RETURN(node->name, ExpectName());
    while (SkipOp(".")) {
      ASSIGN_OR_RETURN(std::string part, ExpectName());
      absl::StrAppend(&node->name, ".", part);
    }
    node->operands.push_back(std::move(input));
    if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(node.get()));
    return node;
  }

  // After 'is': [not] name, then (args) or one bare argument.
  absl::StatusOr<ExprPtr> ParseTest(ExprPtr value) {
    ExprPtr node = MakeExpr(Expr::Kind::kTest, Current().line);
    node->negated = SkipName("not");
    ASSIGN_OR_RETURN(node->name, ExpectName());
    while (SkipOp(".")) {
      ASSIGN_OR_RETURN(std::string part, ExpectName());
      absl::StrAppend(&node->name, ".", part);
    }
    node->operands.push_back(std::move(value));
    const Token& token = Current();
    if (IsOp("(")) {
      RETURN_IF_ERROR(ParseCallArgs(node.get()));
    } else if ((token.type == Type::kName || token.type == Type::kString ||
                token.type == Type::kInteger || token.type == Type::kFloat ||
                IsOp("[") || IsOp("{")) &&
               !IsName("else") && !IsName("or") && !IsName("and")) {
      if (IsName("is")) return Error("tests cannot be chained with 'is'");
      ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
      ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
      node->operands.push_back(std::move(arg));
    }
    return node;
  }

  const std::vector<Token>& tokens_;
  const int max_nesting_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  std::vector<MacroDef*> macros_;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens, int max_nesting) {
  return Parser(tokens, max_nesting).Run();
}

}  // namespace ringmoe::jinja

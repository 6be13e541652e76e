// The syntax tree of a parsed template. Immutable once parsed; renders share
// it across threads.
#ifndef RINGMOE_ENGINE_TOKENIZER_JINJA_AST_H_
#define RINGMOE_ENGINE_TOKENIZER_JINJA_AST_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/jinja/value.h"

namespace ringmoe::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  enum class Kind {
    kConst,    // value
    kName,     // name
    kAttr,     // operands[0].name
    kItem,     // operands[0][operands[1]]
    kSlice,    // operands[0][operands[1]:operands[2]:operands[3]], each
               // bound may be null
    kCall,     // operands[0](operands[1..], keywords)
    kFilter,   // operands[0] | name(operands[1..], keywords); operands[0]
               // is null inside {% filter %} blocks
    kTest,     // operands[0] is [not] name(operands[1..], keywords)
    kNeg,      // -operands[0]
    kPos,      // +operands[0]
    kNot,      // not operands[0]
    kBinary,   // operands[0] op operands[1]
    kConcat,   // operands[0] ~ operands[1]
    kCompare,  // operands[0] compare_ops[0] operands[1] ...
    kAnd,
    kOr,
    kCondExpr,  // operands[1] if operands[0] else operands[2] (may be null)
    kList,
    kTuple,
    kDict,  // operands: key, value, key, value, ...
  };
  Kind kind;
  int line = 0;
  Value value;
  std::string name;
  bool negated = false;  // `is not`
  BinaryOp op = BinaryOp::kAdd;
  std::vector<CompareOp> compare_ops;
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// A macro's signature (also a {% call %} block's caller signature).
struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // one per param; null when it has none
  Body body;
  // Whether the body reads these names: only then does a macro accept extra
  // positional / keyword arguments, or receive `caller`, as in jinja2.
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ exprs[0] }}
    kIf,           // exprs: conditions; bodies: one per condition, then else
    kFor,          // targets in exprs[0] [if exprs[1]]; bodies: body, else
    kSet,          // targets (or targets[0].attr) = exprs[0]
    kSetBlock,     // {% set targets[0][.attr] %}bodies[0]; exprs: filters
    kMacro,        // macro
    kCallBlock,    // {% call(macro params) exprs[0] %}macro body
    kFilterBlock,  // exprs: filters applied in order to bodies[0]
    kWith,         // targets[i] = exprs[i]; bodies[0]
    kBreak,
    kContinue,
    kScope,  // bodies[0] as is ({% generation %})
  };
  Kind kind;
  int line = 0;
  std::string text;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  std::vector<std::string> targets;
  bool tuple_target = false;
  std::string attr;  // {% set ns.attr = ... %}
  std::unique_ptr<MacroDef> macro;
};

}  // namespace ringmoe::jinja

#endif  // RINGMOE_ENGINE_TOKENIZER_JINJA_AST_H_

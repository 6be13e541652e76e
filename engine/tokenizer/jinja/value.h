// The values a Jinja template computes with, modelled on the Python objects
// that jinja2 sees when transformers renders a chat template: None, bool, int,
// float, str, list, tuple, dict, jinja2's Undefined and Namespace, and
// callables. Strings are UTF-8; lengths, indexes and slices count code points,
// as Python does.
#ifndef RINGMOE_ENGINE_TOKENIZER_JINJA_VALUE_H_
#define RINGMOE_ENGINE_TOKENIZER_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace ringmoe::jinja {

class Value;
struct List;
struct Dict;
struct Namespace;
class Callable;

// jinja2's Undefined: falsy, renders as "", iterates as empty, and fails with
// `message` ("'x' is undefined", "'dict object' has no attribute 'y'") when
// used in a way Python would need a real object for.
struct Undefined {
  std::shared_ptr<const std::string> message;
};

using ListPtr = std::shared_ptr<const List>;
using DictPtr = std::shared_ptr<const Dict>;
using NamespacePtr = std::shared_ptr<Namespace>;
using CallablePtr = std::shared_ptr<const Callable>;
using StringPtr = std::shared_ptr<const std::string>;

class Value {
 public:
  // The order of the alternatives of `data_`.
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable,
  };

  // None.
  Value() : data_(nullptr) {}
  static Value Undef(std::string message);
  static Value Bool(bool b) { return Value(Data(b)); }
  static Value Int(int64_t i) { return Value(Data(i)); }
  static Value Float(double f) { return Value(Data(f)); }
  static Value String(std::string s);
  static Value String(StringPtr s) { return Value(Data(std::move(s))); }
  static Value MakeList(std::vector<Value> items, bool tuple = false);
  static Value MakeDict(std::vector<std::pair<Value, Value>> entries);
  static Value MakeNamespace(NamespacePtr ns) {
    return Value(Data(std::move(ns)));
  }
  static Value MakeCallable(CallablePtr c) { return Value(Data(std::move(c))); }

  // A JSON document as Python's json.loads gives it (objects keep their key
  // order; integers stay int, numbers written with '.' or 'e' are float).
  // Fails when it nests deeper than kMaxValueDepth.
  static absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& json);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // int, float or bool (Python's bool is an int).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const { return std::get<int64_t>(data_); }
  double as_float() const { return std::get<double>(data_); }
  // Numbers as double (bool and int widen).
  double as_double() const;
  // bool or int as int64.
  int64_t as_integer() const { return is_bool() ? as_bool() : as_int(); }
  const std::string& as_string() const { return *std::get<StringPtr>(data_); }
  const StringPtr& string_ptr() const { return std::get<StringPtr>(data_); }
  const List& as_list() const { return *std::get<ListPtr>(data_); }
  const Dict& as_dict() const { return *std::get<DictPtr>(data_); }
  Namespace& as_namespace() const { return *std::get<NamespacePtr>(data_); }
  const Callable& as_callable() const { return *std::get<CallablePtr>(data_); }
  const std::string& undefined_message() const {
    return *std::get<Undefined>(data_).message;
  }
  // For `sameas`: whether both are the same object (or equal constants).
  bool SameAs(const Value& other) const;
  // Nesting of lists and dicts: 0 for scalars, 1 for a namespace (whose
  // attributes never hold namespaces, see Namespace).
  int depth() const;

 private:
  using Data =
      std::variant<Undefined, std::nullptr_t, bool, int64_t, double, StringPtr,
                   ListPtr, DictPtr, NamespacePtr, CallablePtr>;
  explicit Value(Data data) : data_(std::move(data)) {}
  Data data_;
};

// How deeply lists, tuples and dicts may nest (JSON input and what templates
// build); deeper values are refused, so walking one never exhausts the stack.
inline constexpr int kMaxValueDepth = 256;

struct List {
  std::vector<Value> items;
  bool tuple = false;  // repr as (a, b) instead of [a, b]
  int depth = 1;       // 1 + the deepest element's depth
};

// A Python dict: insertion order, keys compared as Python compares them.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;
  int depth = 1;
  // The value of `key`, or nullptr.
  const Value* Find(const Value& key) const;
  const Value* Find(absl::string_view key) const;
};

// jinja2's namespace(): the one mutable object a template can change. Its
// attributes never hold a namespace (the interpreter refuses that), so values
// form no cycles and stay shallow.
struct Namespace {
  std::vector<std::pair<std::string, Value>> attrs;
  const Value* Find(absl::string_view name) const;
  void Set(absl::string_view name, Value value);
};

// Positional and keyword arguments of a call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Anything a template can call. The interpreter knows how to call macros and
// bound methods itself; other callables are native functions.
class Callable {
 public:
  using NativeFn = std::function<absl::StatusOr<Value>(const CallArgs&)>;
  virtual ~Callable() = default;
  // "<Macro 'x'>" style text for str().
  virtual std::string Repr() const = 0;
};

// A function implemented in C++ (globals such as range() and namespace(), or
// what the embedding adds: raise_exception, strftime_now).
class NativeFunction : public Callable {
 public:
  NativeFunction(std::string name, NativeFn fn)
      : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string Repr() const override;
  const std::string& name() const { return name_; }
  absl::StatusOr<Value> Call(const CallArgs& args) const { return fn_(args); }

 private:
  std::string name_;
  NativeFn fn_;
};

Value MakeNativeFunction(std::string name, Callable::NativeFn fn);

// A method looked up on a value (`s.split`, `d.items`), called later.
class BoundMethod : public Callable {
 public:
  BoundMethod(Value self, std::string name)
      : self_(std::move(self)), name_(std::move(name)) {}
  std::string Repr() const override;
  const Value& self() const { return self_; }
  const std::string& name() const { return name_; }

 private:
  Value self_;
  std::string name_;
};

// Python's truthiness.
bool Truthy(const Value& v);

// Python's type name ("str", "int", "NoneType", "dict", ...), as TypeErrors
// name types.
std::string TypeName(const Value& v);

// jinja2's object_type_repr: "dict object", "None", ... (undefined messages).
std::string ObjectTypeRepr(const Value& v);

// Python's == (1 == 1.0 == True; dicts compare without order).
bool Equal(const Value& a, const Value& b);

// Python's <; TypeError text when the types do not order.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

// Python's str() and repr(). Undefined prints as "" (jinja2), floats as
// Python's shortest round-trip repr (1.0, 1e-05, 1e+16).
std::string Str(const Value& v);
std::string Repr(const Value& v);
void AppendStr(const Value& v, std::string* out);
std::string FloatRepr(double d);
std::string StringRepr(absl::string_view s);

struct JsonOptions {
  bool ensure_ascii = false;
  // Python's indent: none, a number of spaces or a string.
  bool has_indent = false;
  std::string indent;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// Python's json.dumps(v, ...) with `options`; TypeError-style errors for
// values JSON cannot hold (Undefined, namespaces, callables).
absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options);

// Code points of UTF-8 text (invalid bytes become U+FFFD) and back.
std::u32string ToCodePoints(absl::string_view s);
std::string FromCodePoints(std::u32string_view cps);
// Number of code points.
size_t CodePointCount(absl::string_view s);
// Python's str.isspace for one code point.
bool IsPySpace(char32_t c);

}  // namespace ringmoe::jinja

#endif  // RINGMOE_ENGINE_TOKENIZER_JINJA_VALUE_H_

#include "engine/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/tokenizer/utf8.h"
#include "unicode/uchar.h"

namespace ringmoe::jinja {
namespace {

bool IsPrintable(char32_t c) {
  if (c == ' ') return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_SURROGATE:
    case U_PRIVATE_USE_CHAR:
    case U_UNASSIGNED:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
    case U_SPACE_SEPARATOR:
      return false;
    default:
      return true;
  }
}

int ChildDepth(const Value& v) { return v.depth(); }

absl::Status NotSerializable(const Value& v) {
  std::string type = TypeName(v);
  if (v.is_undefined()) type = "Undefined";
  if (v.is_namespace()) type = "Namespace";
  return absl::InvalidArgumentError(
      absl::StrCat("Object of type ", type, " is not JSON serializable"));
}

void AppendJsonString(absl::string_view s, bool ensure_ascii,
                      std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    switch (c) {
      case '"':
        out->append("\\\"");
        ++i;
        continue;
      case '\\':
        out->append("\\\\");
        ++i;
        continue;
      case '\n':
        out->append("\\n");
        ++i;
        continue;
      case '\r':
        out->append("\\r");
        ++i;
        continue;
      case '\t':
        out->append("\\t");
        ++i;
        continue;
      case '\b':
        out->append("\\b");
        ++i;
        continue;
      case '\f':
        out->append("\\f");
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      absl::StrAppendFormat(out, "\\u%04x", c);
      ++i;
      continue;
    }
    if (c < 0x80 || !ensure_ascii) {
      out->push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    size_t length = tokenizer::Utf8SequenceLength(s, i);
    char32_t cp = 0xFFFD;
    if (length == 0) {
      length = 1;
    } else {
      cp = tokenizer::DecodeUtf8At(s, i, length);
    }
    i += length;
    if (cp >= 0x10000) {
      const char32_t v = cp - 0x10000;
      absl::StrAppendFormat(out, "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                            0xDC00 + (v & 0x3FF));
    } else {
      absl::StrAppendFormat(out, "\\u%04x", static_cast<uint32_t>(cp));
    }
  }
  out->push_back('"');
}

absl::Status AppendJson(const Value& v, const JsonOptions& options, int level,
                        std::string* out);

void AppendNewlineIndent(const JsonOptions& options, int level,
                         std::string* out) {
  out->push_back('\n');
  for (int i = 0; i < level; ++i) out->append(options.indent);
}

absl::StatusOr<std::string> JsonKey(const Value& key, bool ensure_ascii) {
  std::string out;
  switch (key.kind()) {
    case Value::Kind::kString:
      AppendJsonString(key.as_string(), ensure_ascii, &out);
      return out;
    case Value::Kind::kInt:
      return absl::StrCat("\"", key.as_int(), "\"");
    case Value::Kind::kFloat: {
      const double d = key.as_float();
      if (std::isnan(d)) return std::string("\"NaN\"");
      if (std::isinf(d))
        return std::string(d > 0 ? "\"Infinity\"" : "\"-Infinity\"");
      return absl::StrCat("\"", FloatRepr(d), "\"");
    }
    case Value::Kind::kBool:
      return std::string(key.as_bool() ? "\"true\"" : "\"false\"");
    case Value::Kind::kNone:
      return std::string("\"null\"");
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "keys must be str, int, float, bool or None, not ", TypeName(key)));
  }
}

absl::Status AppendJson(const Value& v, const JsonOptions& options, int level,
                        std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kNone:
      out->append("null");
      return absl::OkStatus();
    case Value::Kind::kBool:
      out->append(v.as_bool() ? "true" : "false");
      return absl::OkStatus();
    case Value::Kind::kInt:
      absl::StrAppend(out, v.as_int());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d)) {
        out->append("NaN");
      } else if (std::isinf(d)) {
        out->append(d > 0 ? "Infinity" : "-Infinity");
      } else {
        out->append(FloatRepr(d));
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(v.as_string(), options.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      const std::vector<Value>& items = v.as_list().items;
      if (items.empty()) {
        out->append("[]");
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out->append(options.item_separator);
        if (options.has_indent) AppendNewlineIndent(options, level + 1, out);
        const absl::Status status =
            AppendJson(items[i], options, level + 1, out);
        if (!status.ok()) return status;
      }
      if (options.has_indent) AppendNewlineIndent(options, level, out);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& entry : v.as_dict().entries) entries.push_back(&entry);
      if (entries.empty()) {
        out->append("{}");
        return absl::OkStatus();
      }
      if (options.sort_keys) {
        absl::Status error;
        std::stable_sort(entries.begin(), entries.end(),
                         [&](const auto* a, const auto* b) {
                           absl::StatusOr<bool> less = Less(a->first, b->first);
                           if (!less.ok()) {
                             error = less.status();
                             return false;
                           }
                           return *less;
                         });
        if (!error.ok()) return error;
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out->append(options.item_separator);
        if (options.has_indent) AppendNewlineIndent(options, level + 1, out);
        absl::StatusOr<std::string> key =
            JsonKey(entries[i]->first, options.ensure_ascii);
        if (!key.ok()) return key.status();
        out->append(*key);
        out->append(options.key_separator);
        const absl::Status status =
            AppendJson(entries[i]->second, options, level + 1, out);
        if (!status.ok()) return status;
      }
      if (options.has_indent) AppendNewlineIndent(options, level, out);
      out->push_back('}');
      return absl::OkStatus();
    }
    default:
      return NotSerializable(v);
  }
}

void AppendRepr(const Value& v, std::string* out);

void AppendSequence(const std::vector<Value>& items, bool tuple,
                    std::string* out) {
  out->push_back(tuple ? '(' : '[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out->append(", ");
    AppendRepr(items[i], out);
  }
  if (tuple && items.size() == 1) out->push_back(',');
  out->push_back(tuple ? ')' : ']');
}

void AppendDict(const Dict& dict, std::string* out) {
  out->push_back('{');
  for (size_t i = 0; i < dict.entries.size(); ++i) {
    if (i > 0) out->append(", ");
    AppendRepr(dict.entries[i].first, out);
    out->append(": ");
    AppendRepr(dict.entries[i].second, out);
  }
  out->push_back('}');
}

void AppendRepr(const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kString:
      out->append(StringRepr(v.as_string()));
      return;
    case Value::Kind::kUndefined:
      out->append("Undefined");
      return;
    default:
      AppendStr(v, out);
  }
}

}  // namespace

Value Value::Undef(std::string message) {
  return Value(
      Data(Undefined{std::make_shared<const std::string>(std::move(message))}));
}

Value Value::String(std::string s) {
  return Value(
      Data(StringPtr(std::make_shared<const std::string>(std::move(s)))));
}

Value Value::MakeList(std::vector<Value> items, bool tuple) {
  auto list = std::make_shared<List>();
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, ChildDepth(item));
  list->items = std::move(items);
  list->tuple = tuple;
  list->depth = depth + 1;
  return Value(Data(ListPtr(std::move(list))));
}

Value Value::MakeDict(std::vector<std::pair<Value, Value>> entries) {
  auto dict = std::make_shared<Dict>();
  int depth = 0;
  for (const auto& [key, value] : entries) {
    depth = std::max({depth, ChildDepth(key), ChildDepth(value)});
  }
  dict->entries = std::move(entries);
  dict->depth = depth + 1;
  return Value(Data(DictPtr(std::move(dict))));
}

absl::StatusOr<Value> Value::FromJson(const nlohmann::ordered_json& json) {
  // Iterative depth check first, so that the recursive build below is safe.
  std::vector<std::pair<const nlohmann::ordered_json*, int>> stack = {
      {&json, 1}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (!node->is_structured()) continue;
    if (depth > kMaxValueDepth) {
      return absl::InvalidArgumentError(absl::StrCat(
          "JSON nested more than ", kMaxValueDepth, " levels deep"));
    }
    for (const auto& child : *node) stack.push_back({&child, depth + 1});
  }
  struct Builder {
    static Value Build(const nlohmann::ordered_json& j) {
      switch (j.type()) {
        case nlohmann::ordered_json::value_t::null:
          return Value();
        case nlohmann::ordered_json::value_t::boolean:
          return Value::Bool(j.get<bool>());
        case nlohmann::ordered_json::value_t::number_integer:
          return Value::Int(j.get<int64_t>());
        case nlohmann::ordered_json::value_t::number_unsigned: {
          const uint64_t u = j.get<uint64_t>();
          // Beyond int64 (Python would keep the exact int): the nearest
          // float is the closest this interpreter gets.
          if (u > static_cast<uint64_t>(INT64_MAX)) {
            return Value::Float(static_cast<double>(u));
          }
          return Value::Int(static_cast<int64_t>(u));
        }
        case nlohmann::ordered_json::value_t::number_float:
          return Value::Float(j.get<double>());
        case nlohmann::ordered_json::value_t::string:
          return Value::String(j.get<std::string>());
        case nlohmann::ordered_json::value_t::array: {
          std::vector<Value> items;
          items.reserve(j.size());
          for (const auto& item : j) items.push_back(Build(item));
          return Value::MakeList(std::move(items));
        }
        case nlohmann::ordered_json::value_t::object: {
          std::vector<std::pair<Value, Value>> entries;
          entries.reserve(j.size());
          for (const auto& [key, item] : j.items()) {
            entries.emplace_back(Value::String(key), Build(item));
          }
          return Value::MakeDict(std::move(entries));
        }
        default:
          return Value();
      }
    }
  };
  return Builder::Build(json);
}

double Value::as_double() const {
  switch (kind()) {
    case Kind::kBool:
      return as_bool() ? 1 : 0;
    case Kind::kInt:
      return static_cast<double>(as_int());
    default:
      return as_float();
  }
}

int Value::depth() const {
  switch (kind()) {
    case Kind::kList:
      return as_list().depth;
    case Kind::kDict:
      return as_dict().depth;
    case Kind::kNamespace:
      return 1;
    default:
      return 0;
  }
}

bool Value::SameAs(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return as_bool() == other.as_bool();
    case Kind::kInt:
      return as_int() == other.as_int();
    case Kind::kFloat:
      return as_float() == other.as_float();
    case Kind::kString:
      return string_ptr() == other.string_ptr();
    case Kind::kList:
      return &as_list() == &other.as_list();
    case Kind::kDict:
      return &as_dict() == &other.as_dict();
    case Kind::kNamespace:
      return &as_namespace() == &other.as_namespace();
    case Kind::kCallable:
      return &as_callable() == &other.as_callable();
  }
  return false;
}

const Value* Dict::Find(const Value& key) const {
  if (key.is_string()) return Find(absl::string_view(key.as_string()));
  for (const auto& [k, v] : entries) {
    if (Equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* Dict::Find(absl::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

const Value* Namespace::Find(absl::string_view name) const {
  for (const auto& [k, v] : attrs) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Namespace::Set(absl::string_view name, Value value) {
  for (auto& [k, v] : attrs) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  attrs.emplace_back(std::string(name), std::move(value));
}

std::string NativeFunction::Repr() const {
  return absl::StrCat("<built-in function ", name_, ">");
}

Value MakeNativeFunction(std::string name, Callable::NativeFn fn) {
  return Value::MakeCallable(
      std::make_shared<NativeFunction>(std::move(name), std::move(fn)));
}

std::string BoundMethod::Repr() const {
  return absl::StrCat("<built-in method ", name_, " of ", TypeName(self_),
                      " object>");
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.as_bool();
    case Value::Kind::kInt:
      return v.as_int() != 0;
    case Value::Kind::kFloat:
      return v.as_float() != 0;
    case Value::Kind::kString:
      return !v.as_string().empty();
    case Value::Kind::kList:
      return !v.as_list().items.empty();
    case Value::Kind::kDict:
      return !v.as_dict().entries.empty();
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.as_list().tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

std::string ObjectTypeRepr(const Value& v) {
  if (v.is_none()) return "None";
  if (v.is_namespace()) return "jinja2.utils.Namespace object";
  return TypeName(v) + " object";
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_integer() == b.as_integer();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!Equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, value] : x.entries) {
        const Value* other = y.Find(key);
        if (other == nullptr || !Equal(value, *other)) return false;
      }
      return true;
    }
    default:
      return a.SameAs(b);
  }
}

absl::StatusOr<bool> Less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_integer() < b.as_integer();
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order.
    return a.as_string() < b.as_string();
  }
  if (a.is_list() && b.is_list() && a.as_list().tuple == b.as_list().tuple) {
    const std::vector<Value>& x = a.as_list().items;
    const std::vector<Value>& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'<' not supported between instances of '", TypeName(a),
                   "' and '", TypeName(b), "'"));
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // The shortest digits that round-trip, as Python's repr chooses them.
  char buf[64];
  const auto result =
      std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  const std::string sci(buf, result.ptr);
  std::string out;
  size_t pos = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    pos = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = pos; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  const int exponent = std::stoi(sci.substr(e + 1));
  const int decpt = exponent + 1;  // digits are 0.DIGITS * 10^decpt
  const int ndigits = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (ndigits > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    absl::StrAppendFormat(&out, "e%c%02d", exponent < 0 ? '-' : '+',
                          std::abs(exponent));
  } else if (decpt <= 0) {
    out.append("0.");
    out.append(-decpt, '0');
    out.append(digits);
  } else if (decpt >= ndigits) {
    out.append(digits);
    out.append(decpt - ndigits, '0');
    out.append(".0");
  } else {
    out.append(digits, 0, decpt);
    out.push_back('.');
    out.append(digits, decpt, std::string::npos);
  }
  return out;
}

std::string StringRepr(absl::string_view s) {
  const bool has_single = s.find('\'') != absl::string_view::npos;
  const bool has_double = s.find('"') != absl::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    size_t length = tokenizer::Utf8SequenceLength(s, i);
    char32_t c = 0xFFFD;
    if (length == 0) {
      length = 1;
    } else {
      c = tokenizer::DecodeUtf8At(s, i, length);
    }
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (c == '\t') {
      out.append("\\t");
    } else if (!IsPrintable(c)) {
      if (c < 0x100) {
        absl::StrAppendFormat(&out, "\\x%02x", static_cast<uint32_t>(c));
      } else if (c < 0x10000) {
        absl::StrAppendFormat(&out, "\\u%04x", static_cast<uint32_t>(c));
      } else {
        absl::StrAppendFormat(&out, "\\U%08x", static_cast<uint32_t>(c));
      }
    } else {
      out.append(s.data() + i, length);
    }
    i += length;
  }
  out.push_back(quote);
  return out;
}

void AppendStr(const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return;
    case Value::Kind::kNone:
      out->append("None");
      return;
    case Value::Kind::kBool:
      out->append(v.as_bool() ? "True" : "False");
      return;
    case Value::Kind::kInt:
      absl::StrAppend(out, v.as_int());
      return;
    case Value::Kind::kFloat:
      out->append(FloatRepr(v.as_float()));
      return;
    case Value::Kind::kString:
      out->append(v.as_string());
      return;
    case Value::Kind::kList:
      AppendSequence(v.as_list().items, v.as_list().tuple, out);
      return;
    case Value::Kind::kDict:
      AppendDict(v.as_dict(), out);
      return;
    case Value::Kind::kNamespace: {
      out->append("<Namespace {");
      const auto& attrs = v.as_namespace().attrs;
      for (size_t i = 0; i < attrs.size(); ++i) {
        if (i > 0) out->append(", ");
        out->append(StringRepr(attrs[i].first));
        out->append(": ");
        AppendRepr(attrs[i].second, out);
      }
      out->append("}>");
      return;
    }
    case Value::Kind::kCallable:
      out->append(v.as_callable().Repr());
      return;
  }
}

std::string Str(const Value& v) {
  if (v.is_string()) return v.as_string();
  std::string out;
  AppendStr(v, &out);
  return out;
}

std::string Repr(const Value& v) {
  std::string out;
  AppendRepr(v, &out);
  return out;
}

absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  const absl::Status status = AppendJson(v, options, 0, &out);
  if (!status.ok()) return status;
  return out;
}

std::u32string ToCodePoints(absl::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t length = tokenizer::Utf8SequenceLength(s, i);
    if (length == 0) {
      out.push_back(0xFFFD);
      ++i;
    } else {
      out.push_back(tokenizer::DecodeUtf8At(s, i, length));
      i += length;
    }
  }
  return out;
}

std::string FromCodePoints(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t c : cps) tokenizer::AppendUtf8(c, &out);
  return out;
}

size_t CodePointCount(absl::string_view s) {
  size_t count = 0;
  for (char c : s) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

bool IsPySpace(char32_t c) {
  switch (c) {
    case '\t':
    case '\n':
    case '\v':
    case '\f':
    case '\r':
    case 0x1C:
    case 0x1D:
    case 0x1E:
    case 0x1F:
    case ' ':
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

}  // namespace ringmoe::jinja

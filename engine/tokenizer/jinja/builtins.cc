// jinja2's built-in filters, tests and globals, transformers' tojson, and the
// Python methods of str, dict and list that templates call, each with
// Python's semantics.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "engine/tokenizer/jinja/interpreter.h"
#include "unicode/ucasemap.h"
#include "unicode/uchar.h"
#include "unicode/ustring.h"

namespace ringmoe::jinja {
namespace {

using Args = std::vector<Value>;

// Case mapping of whole strings, with Unicode's full mappings (Python's
// str.upper() turns "ß" into "SS").
std::string MapCase(absl::string_view s, bool upper) {
  bool ascii = true;
  for (char c : s) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) {
    std::string out(s);
    for (char& c : out) {
      c = upper ? absl::ascii_toupper(c) : absl::ascii_tolower(c);
    }
    return out;
  }
  UErrorCode error = U_ZERO_ERROR;
  int32_t length16 = 0;
  u_strFromUTF8(nullptr, 0, &length16, s.data(), static_cast<int32_t>(s.size()),
                &error);
  error = U_ZERO_ERROR;
  std::u16string in(length16, u'\0');
  u_strFromUTF8WithSub(in.data(), length16, nullptr, s.data(),
                       static_cast<int32_t>(s.size()), 0xFFFD, nullptr, &error);
  std::u16string mapped(in.size() * 3 + 4, u'\0');
  error = U_ZERO_ERROR;
  const int32_t n =
      upper ? u_strToUpper(mapped.data(), static_cast<int32_t>(mapped.size()),
                           in.data(), length16, "", &error)
            : u_strToLower(mapped.data(), static_cast<int32_t>(mapped.size()),
                           in.data(), length16, "", &error);
  if (U_FAILURE(error)) return std::string(s);
  std::string out(static_cast<size_t>(n) * 3 + 4, '\0');
  int32_t out_length = 0;
  error = U_ZERO_ERROR;
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &out_length,
              mapped.data(), n, &error);
  out.resize(out_length);
  return out;
}

std::string Upper(absl::string_view s) { return MapCase(s, true); }
std::string Lower(absl::string_view s) { return MapCase(s, false); }

std::string CodePointString(char32_t c) {
  return FromCodePoints(std::u32string(1, c));
}

// Unicode's full title-case mapping of one character ("ß" gives "Ss").
std::string TitleChar(char32_t c) {
  UErrorCode error = U_ZERO_ERROR;
  // A whole-string title-caser needs no break iterator (so no ICU data).
  static UCaseMap* const kCaseMap = [] {
    UErrorCode e = U_ZERO_ERROR;
    return ucasemap_open(
        "", U_TITLECASE_WHOLE_STRING | U_TITLECASE_NO_BREAK_ADJUSTMENT, &e);
  }();
  const std::string in = CodePointString(c);
  char out[32];
  const int32_t n =
      kCaseMap == nullptr
          ? -1
          : ucasemap_utf8ToTitle(kCaseMap, out, sizeof(out), in.data(),
                                 static_cast<int32_t>(in.size()), &error);
  if (n < 0 || U_FAILURE(error)) {
    return CodePointString(static_cast<char32_t>(u_totitle(c)));
  }
  return std::string(out, n);
}

// Python's str.capitalize(): the first character in title case, the rest in
// lower case.
std::string Capitalize(absl::string_view s) {
  std::u32string cps = ToCodePoints(s);
  if (cps.empty()) return "";
  return TitleChar(cps[0]) +
         Lower(FromCodePoints(std::u32string_view(cps).substr(1)));
}

bool IsCased(char32_t c) {
  return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED);
}

// Python's str.title().
std::string PyTitle(absl::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t c : ToCodePoints(s)) {
    const std::string one = CodePointString(c);
    out += previous_cased ? Lower(one) : TitleChar(c);
    previous_cased = IsCased(c);
  }
  return out;
}

// jinja2's title filter: each word (split at whitespace, '-', and opening
// brackets) gets an upper-case first character and lower-case rest.
std::string JinjaTitle(absl::string_view s) {
  const auto is_break = [](char32_t c) {
    return IsPySpace(c) || c == '-' || c == '(' || c == '{' || c == '[' ||
           c == '<';
  };
  std::u32string cps = ToCodePoints(s);
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    const bool breaks = is_break(cps[i]);
    while (j < cps.size() && is_break(cps[j]) == breaks) ++j;
    std::u32string_view item(cps.data() + i, j - i);
    if (breaks) {
      out += FromCodePoints(item);
    } else {
      out += Upper(FromCodePoints(item.substr(0, 1)));
      out += Lower(FromCodePoints(item.substr(1)));
    }
    i = j;
  }
  return out;
}

// Python's str.strip/lstrip/rstrip: whitespace, or exactly the characters
// of `chars` when it is a string.
absl::StatusOr<std::string> Strip(absl::string_view s, const Value& chars,
                                  bool left, bool right) {
  std::u32string set;
  const bool whitespace = chars.is_none() || chars.is_undefined();
  if (!whitespace) {
    if (!chars.is_string()) {
      return TypeError(
          absl::StrCat("strip arg must be None or str, not ", TypeName(chars)));
    }
    set = ToCodePoints(chars.as_string());
  }
  const auto strip = [&](char32_t c) {
    return whitespace ? IsPySpace(c) : set.find(c) != std::u32string::npos;
  };
  std::u32string cps = ToCodePoints(s);
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip(cps[end - 1])) --end;
  }
  return FromCodePoints(std::u32string_view(cps).substr(begin, end - begin));
}

// Python's str.split / str.rsplit.
absl::StatusOr<std::vector<std::string>> Split(absl::string_view s,
                                               const Value& sep,
                                               int64_t maxsplit,
                                               bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_none()) {
    std::u32string cps = ToCodePoints(s);
    if (from_right) std::reverse(cps.begin(), cps.end());
    size_t i = 0;
    const size_t n = cps.size();
    while (true) {
      while (i < n && IsPySpace(cps[i])) ++i;
      if (i >= n) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
        parts.push_back(FromCodePoints(std::u32string_view(cps).substr(i)));
        break;
      }
      size_t j = i;
      while (j < n && !IsPySpace(cps[j])) ++j;
      parts.push_back(
          FromCodePoints(std::u32string_view(cps).substr(i, j - i)));
      i = j;
    }
    if (from_right) {
      for (std::string& part : parts) {
        std::u32string p = ToCodePoints(part);
        std::reverse(p.begin(), p.end());
        part = FromCodePoints(p);
      }
      std::reverse(parts.begin(), parts.end());
    }
    return parts;
  }
  if (!sep.is_string()) {
    return TypeError(absl::StrCat("must be str or None, not ", TypeName(sep)));
  }
  const std::string& separator = sep.as_string();
  if (separator.empty()) return TypeError("empty separator");
  if (!from_right) {
    size_t start = 0;
    while (true) {
      const size_t found = s.find(separator, start);
      if (found == absl::string_view::npos ||
          (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)) {
        parts.emplace_back(s.substr(start));
        break;
      }
      parts.emplace_back(s.substr(start, found - start));
      start = found + separator.size();
    }
    return parts;
  }
  size_t end = s.size();
  while (true) {
    const size_t found = end < separator.size()
                             ? absl::string_view::npos
                             : s.rfind(separator, end - separator.size());
    if (found == absl::string_view::npos ||
        (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)) {
      parts.emplace_back(s.substr(0, end));
      break;
    }
    parts.emplace_back(
        s.substr(found + separator.size(), end - found - separator.size()));
    end = found;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C ||
         c == 0x1D || c == 0x1E || c == 0x85 || c == 0x2028 || c == 0x2029;
}

// Python's str.splitlines(keepends).
std::vector<std::string> SplitLines(absl::string_view s, bool keepends) {
  std::vector<std::string> lines;
  std::u32string cps = ToCodePoints(s);
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    while (j < cps.size() && !IsLineBreak(cps[j])) ++j;
    size_t end = j;
    if (j < cps.size()) {
      end = j + 1;
      if (cps[j] == '\r' && j + 1 < cps.size() && cps[j + 1] == '\n') ++end;
    }
    lines.push_back(FromCodePoints(
        std::u32string_view(cps).substr(i, (keepends ? end : j) - i)));
    i = end;
  }
  return lines;
}

// Python's str.replace(old, new, count).
std::string Replace(absl::string_view s, absl::string_view old,
                    absl::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {
    std::u32string cps = ToCodePoints(s);
    int64_t done = 0;
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out.append(replacement.data(), replacement.size());
        ++done;
      }
      if (i < cps.size()) out += CodePointString(cps[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = s.find(old, start);
    if (found == absl::string_view::npos) break;
    out.append(s.data() + start, found - start);
    out.append(replacement.data(), replacement.size());
    start = found + old.size();
    ++done;
  }
  out.append(s.data() + start, s.size() - start);
  return out;
}

// Python's optional `start`/`end` arguments of str methods, on code points.
absl::StatusOr<std::pair<size_t, size_t>> StringRange(size_t length,
                                                      const Value& start,
                                                      const Value& end) {
  const auto index = [&](const Value& v,
                         int64_t fallback) -> absl::StatusOr<int64_t> {
    if (v.is_none() || v.is_undefined()) return fallback;
    if (!v.is_int() && !v.is_bool()) {
      return TypeError("slice indices must be integers or None");
    }
    int64_t i = v.as_integer();
    const int64_t n = static_cast<int64_t>(length);
    if (i < 0) i = std::max<int64_t>(0, i + n);
    return std::min(i, n);
  };
  ASSIGN_OR_RETURN(int64_t b, index(start, 0));
  ASSIGN_OR_RETURN(int64_t e, index(end, static_cast<int64_t>(length)));
  return std::make_pair(static_cast<size_t>(b),
                        static_cast<size_t>(std::max(b, e)));
}

absl::StatusOr<int64_t> ToInt(const Value& v, absl::string_view what) {
  if (v.is_int() || v.is_bool()) return v.as_integer();
  return TypeError(
      absl::StrCat(what, " must be an integer, not ", TypeName(v)));
}

absl::StatusOr<std::string> ToStr(const Value& v, absl::string_view what) {
  if (v.is_string()) return v.as_string();
  return TypeError(absl::StrCat(what, " must be str, not ", TypeName(v)));
}

// Python's int(str) / float(str).
std::optional<int64_t> ParseInt(absl::string_view text, int base) {
  std::string digits;
  text = absl::StripAsciiWhitespace(text);
  bool negative = false;
  if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
    negative = text[0] == '-';
    text.remove_prefix(1);
  }
  if (base == 16 &&
      (absl::StartsWith(text, "0x") || absl::StartsWith(text, "0X"))) {
    text.remove_prefix(2);
  }
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '_' && i > 0 && i + 1 < text.size() && text[i - 1] != '_') {
      continue;
    }
    digits.push_back(text[i]);
  }
  if (digits.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long value = std::strtoll(digits.c_str(), &end, base);
  if (*end != '\0' || errno == ERANGE || !absl::ascii_isalnum(digits[0])) {
    return std::nullopt;
  }
  return negative ? -value : value;
}

std::optional<double> ParseFloat(absl::string_view text) {
  std::string s(absl::StripAsciiWhitespace(text));
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(s.c_str(), &end);
  if (*end != '\0') return std::nullopt;
  // strtod accepts hex floats, which Python's float() does not.
  if (s.find_first_of("xX") != std::string::npos) return std::nullopt;
  return value;
}

double RoundHalfEven(double value, int64_t precision) {
  if (precision >= 0) {
    // printf rounds the exact binary value half-to-even, as Python's
    // round() does.
    const std::string text = absl::StrFormat(
        "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), value);
    return std::strtod(text.c_str(), nullptr);
  }
  const double scale = std::pow(10.0, static_cast<double>(-precision));
  return std::nearbyint(value / scale) * scale;
}

std::string HtmlEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// Python's str.center/ljust/rjust.
std::string Pad(absl::string_view s, int64_t width, char32_t fill,
                int align /* -1 left, 0 center, 1 right */) {
  const int64_t length = static_cast<int64_t>(CodePointCount(s));
  if (width <= length) return std::string(s);
  const int64_t margin = width - length;
  int64_t left = 0;
  if (align == 0) {
    left = margin / 2 + (margin & width & 1);
  } else if (align > 0) {
    left = margin;
  }
  const std::string pad = CodePointString(fill);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += pad;
  out.append(s.data(), s.size());
  for (int64_t i = 0; i < margin - left; ++i) out += pad;
  return out;
}

Value Tuple(std::vector<Value> items) {
  return Value::MakeList(std::move(items), /*tuple=*/true);
}

const absl::flat_hash_map<std::string, int>& StringMethods() {
  static const auto* methods = new absl::flat_hash_map<std::string, int>{
      {"capitalize", 0}, {"center", 0},     {"count", 0},     {"endswith", 0},
      {"find", 0},       {"format", 0},     {"index", 0},     {"isalnum", 0},
      {"isalpha", 0},    {"isdigit", 0},    {"islower", 0},   {"isspace", 0},
      {"isupper", 0},    {"join", 0},       {"ljust", 0},     {"lower", 0},
      {"lstrip", 0},     {"replace", 0},    {"rfind", 0},     {"rindex", 0},
      {"rjust", 0},      {"rsplit", 0},     {"rstrip", 0},    {"split", 0},
      {"splitlines", 0}, {"startswith", 0}, {"strip", 0},     {"title", 0},
      {"upper", 0},      {"zfill", 0},      {"partition", 0}, {"rpartition", 0},
  };
  return *methods;
}

bool IsOneOf(absl::string_view name,
             std::initializer_list<absl::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Python's islower/isupper: some cased character, and all of them in that
// case.
bool CaseTest(absl::string_view s, bool lower) {
  bool cased = false;
  for (char32_t c : ToCodePoints(s)) {
    const UChar32 u = static_cast<UChar32>(c);
    if (lower ? (u_isupper(u) || u_istitle(u))
              : (u_islower(u) || u_istitle(u))) {
      return false;
    }
    cased |= lower ? u_islower(u) : u_isupper(u);
  }
  return cased;
}

}  // namespace

bool HasMethod(const Value& v, absl::string_view name) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return StringMethods().contains(name);
    case Value::Kind::kDict:
      return IsOneOf(name, {"items", "keys", "values", "get", "copy"});
    case Value::Kind::kList:
      return IsOneOf(name, {"count", "index", "copy"});
    default:
      return false;
  }
}

bool IsMutatingMethod(const Value& v, absl::string_view name) {
  if (v.is_dict()) {
    return IsOneOf(name, {"clear", "pop", "popitem", "setdefault", "update"});
  }
  if (v.is_list()) {
    return IsOneOf(name, {"append", "clear", "extend", "insert", "pop",
                          "remove", "reverse", "sort"});
  }
  return false;
}

absl::StatusOr<std::vector<Value>> BindArgs(absl::string_view function,
                                            const CallArgs& args,
                                            const std::vector<Param>& params) {
  if (args.positional.size() > params.size()) {
    return TypeError(absl::StrCat(function, "() takes at most ", params.size(),
                                  " argument(s) (", args.positional.size(),
                                  " given)"));
  }
  std::vector<Value> bound(params.size());
  std::vector<bool> set(params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    bound[i] = args.positional[i];
    set[i] = true;
  }
  for (const auto& [name, value] : args.keyword) {
    size_t i = 0;
    while (i < params.size() && name != params[i].name) ++i;
    if (i == params.size()) {
      return TypeError(absl::StrCat(
          function, "() got an unexpected keyword argument '", name, "'"));
    }
    if (set[i]) {
      return TypeError(absl::StrCat(
          function, "() got multiple values for argument '", name, "'"));
    }
    bound[i] = value;
    set[i] = true;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (set[i]) continue;
    if (params[i].required) {
      return TypeError(absl::StrCat(function, "() missing required argument '",
                                    params[i].name, "'"));
    }
    bound[i] = params[i].default_value;
  }
  return bound;
}

absl::StatusOr<std::string> PercentFormat(absl::string_view format,
                                          const Value& args) {
  std::vector<Value> values;
  const Dict* mapping = nullptr;
  if (args.is_list() && args.as_list().tuple) {
    values = args.as_list().items;
  } else {
    if (args.is_dict()) mapping = &args.as_dict();
    values.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) return TypeError("incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == absl::string_view::npos) {
        return TypeError("incomplete format key");
      }
      if (mapping == nullptr) return TypeError("format requires a mapping");
      value = mapping->Find(format.substr(i + 1, close - i - 1));
      if (value == nullptr) {
        return TypeError(absl::StrCat(
            "KeyError: ", StringRepr(format.substr(i + 1, close - i - 1))));
      }
      used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && absl::string_view("-+ #0").find(format[i]) !=
                                    absl::string_view::npos) {
      flags.push_back(format[i++]);
    }
    std::string width, precision;
    while (i < format.size() && absl::ascii_isdigit(format[i])) {
      width.push_back(format[i++]);
    }
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = "0";
      while (i < format.size() && absl::ascii_isdigit(format[i])) {
        precision.push_back(format[i++]);
      }
    }
    if (i >= format.size()) return TypeError("incomplete format");
    const char type = format[i];
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (value == nullptr) {
      if (next >= values.size()) {
        return TypeError("not enough arguments for format string");
      }
      value = &values[next++];
    }
    std::string spec = "%" + flags + width;
    if (!precision.empty()) spec += "." + precision;
    std::string text;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        text = type == 's' ? Str(*value) : Repr(*value);
        if (!precision.empty()) {
          text = FromCodePoints(
              ToCodePoints(text).substr(0, std::stoul(precision)));
        }
        const int64_t w = width.empty() ? 0 : std::stoll(width);
        text = Pad(text, w, ' ', flags.find('-') != std::string::npos ? -1 : 1);
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        if (!value->is_number()) {
          return TypeError(absl::StrCat("%", std::string(1, type),
                                        " format: a real number is required, "
                                        "not ",
                                        TypeName(*value)));
        }
        const long long n = value->is_float()
                                ? static_cast<long long>(value->as_float())
                                : static_cast<long long>(value->as_integer());
        const char conversion = type == 'i' || type == 'u' ? 'd' : type;
        char buf[128];
        std::snprintf(buf, sizeof(buf), (spec + "ll" + conversion).c_str(), n);
        text = buf;
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!value->is_number()) {
          return TypeError(
              absl::StrCat("must be real number, not ", TypeName(*value)));
        }
        char buf[512];
        std::snprintf(buf, sizeof(buf), (spec + type).c_str(),
                      value->as_double());
        text = buf;
        break;
      }
      case 'c':
        if (value->is_string() && CodePointCount(value->as_string()) == 1) {
          text = value->as_string();
        } else if (value->is_int()) {
          text = CodePointString(static_cast<char32_t>(value->as_int()));
        } else {
          return TypeError("%c requires int or char");
        }
        break;
      default:
        return TypeError(absl::StrCat("unsupported format character '",
                                      std::string(1, type), "'"));
    }
    out += text;
  }
  if (!used_mapping && mapping == nullptr && next < values.size()) {
    return TypeError("not all arguments converted during string formatting");
  }
  return out;
}

absl::StatusOr<Value> Interpreter::CallMethod(const Value& self,
                                              absl::string_view name,
                                              const CallArgs& args) {
  const auto bind = [&](const std::vector<Param>& params) {
    return BindArgs(name, args, params);
  };
  if (self.is_dict()) {
    const Dict& dict = self.as_dict();
    if (name == "get") {
      ASSIGN_OR_RETURN(Args a, bind({{"key", true}, {"default"}}));
      if (const Value* v = dict.Find(a[0])) return *v;
      return a[1];
    }
    RETURN_IF_ERROR(bind({}).status());
    if (name == "copy") return self;
    std::vector<Value> out;
    for (const auto& [key, value] : dict.entries) {
      if (name == "items") {
        out.push_back(Tuple({key, value}));
      } else {
        out.push_back(name == "keys" ? key : value);
      }
    }
    return NewList(std::move(out));
  }
  if (self.is_list()) {
    const std::vector<Value>& items = self.as_list().items;
    if (name == "copy") {
      RETURN_IF_ERROR(bind({}).status());
      return self;
    }
    ASSIGN_OR_RETURN(Args a, bind({{"value", true}}));
    int64_t count = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!Equal(items[i], a[0])) continue;
      if (name == "index") return Value::Int(static_cast<int64_t>(i));
      ++count;
    }
    if (name == "index") {
      return TypeError(absl::StrCat(Repr(a[0]), " is not in list"));
    }
    return Value::Int(count);
  }
  const std::string& s = self.as_string();
  if (IsOneOf(name, {"upper", "lower", "title", "capitalize", "isalnum",
                     "isalpha", "isdigit", "islower", "isspace", "isupper"})) {
    RETURN_IF_ERROR(bind({}).status());
    if (name == "upper") return NewString(Upper(s));
    if (name == "lower") return NewString(Lower(s));
    if (name == "title") return NewString(PyTitle(s));
    if (name == "capitalize") return NewString(Capitalize(s));
    if (name == "islower") return Value::Bool(CaseTest(s, true));
    if (name == "isupper") return Value::Bool(CaseTest(s, false));
    std::u32string cps = ToCodePoints(s);
    bool all = !cps.empty();
    for (char32_t c : cps) {
      const UChar32 u = static_cast<UChar32>(c);
      if (name == "isalnum") all &= u_isalnum(u) != 0;
      if (name == "isalpha") all &= u_isalpha(u) != 0;
      if (name == "isdigit") all &= u_isdigit(u) != 0;
      if (name == "isspace") all &= IsPySpace(c);
    }
    return Value::Bool(all);
  }
  if (IsOneOf(name, {"strip", "lstrip", "rstrip"})) {
    ASSIGN_OR_RETURN(Args a, bind({{"chars"}}));
    ASSIGN_OR_RETURN(std::string out,
                     Strip(s, a[0], name != "rstrip", name != "lstrip"));
    return NewString(std::move(out));
  }
  if (name == "split" || name == "rsplit") {
    ASSIGN_OR_RETURN(Args a,
                     bind({{"sep"}, {"maxsplit", false, Value::Int(-1)}}));
    ASSIGN_OR_RETURN(int64_t maxsplit, ToInt(a[1], "maxsplit"));
    ASSIGN_OR_RETURN(std::vector<std::string> parts,
                     Split(s, a[0], maxsplit, name == "rsplit"));
    std::vector<Value> out;
    for (std::string& part : parts)
      out.push_back(Value::String(std::move(part)));
    return NewList(std::move(out));
  }
  if (name == "splitlines") {
    ASSIGN_OR_RETURN(Args a, bind({{"keepends", false, Value::Bool(false)}}));
    std::vector<Value> out;
    for (std::string& line : SplitLines(s, Truthy(a[0]))) {
      out.push_back(Value::String(std::move(line)));
    }
    return NewList(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    ASSIGN_OR_RETURN(Args a, bind({{"prefix", true}, {"start"}, {"end"}}));
    std::vector<Value> candidates;
    if (a[0].is_list() && a[0].as_list().tuple) {
      candidates = a[0].as_list().items;
    } else {
      candidates.push_back(a[0]);
    }
    std::string text = s;
    if (!a[1].is_none() || !a[2].is_none()) {
      std::u32string cps = ToCodePoints(s);
      ASSIGN_OR_RETURN(auto range, StringRange(cps.size(), a[1], a[2]));
      text = FromCodePoints(std::u32string_view(cps).substr(
          range.first, range.second - range.first));
    }
    for (const Value& candidate : candidates) {
      if (!candidate.is_string()) {
        return TypeError(
            absl::StrCat(name, " first arg must be str or a tuple of str, not ",
                         TypeName(candidate)));
      }
      const bool match = name == "startswith"
                             ? absl::StartsWith(text, candidate.as_string())
                             : absl::EndsWith(text, candidate.as_string());
      if (match) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (IsOneOf(name, {"find", "rfind", "index", "rindex", "count"})) {
    ASSIGN_OR_RETURN(Args a, bind({{"sub", true}, {"start"}, {"end"}}));
    ASSIGN_OR_RETURN(std::string sub, ToStr(a[0], "substring"));
    std::u32string cps = ToCodePoints(s);
    std::u32string needle = ToCodePoints(sub);
    ASSIGN_OR_RETURN(auto range, StringRange(cps.size(), a[1], a[2]));
    std::u32string_view hay = std::u32string_view(cps).substr(
        range.first, range.second - range.first);
    if (name == "count") {
      if (needle.empty())
        return Value::Int(static_cast<int64_t>(hay.size() + 1));
      int64_t count = 0;
      for (size_t p = hay.find(needle); p != std::u32string_view::npos;
           p = hay.find(needle, p + needle.size())) {
        ++count;
      }
      return Value::Int(count);
    }
    const size_t found = (name == "find" || name == "index")
                             ? hay.find(needle)
                             : hay.rfind(needle);
    if (found == std::u32string_view::npos) {
      if (name == "index" || name == "rindex") {
        return TypeError("substring not found");
      }
      return Value::Int(-1);
    }
    return Value::Int(static_cast<int64_t>(found + range.first));
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(
        Args a,
        bind({{"old", true}, {"new", true}, {"count", false, Value::Int(-1)}}));
    ASSIGN_OR_RETURN(std::string old_text, ToStr(a[0], "replace() argument 1"));
    ASSIGN_OR_RETURN(std::string new_text, ToStr(a[1], "replace() argument 2"));
    ASSIGN_OR_RETURN(int64_t count, ToInt(a[2], "count"));
    if (!old_text.empty() && !new_text.empty()) {
      // Bound the result before building it.
      size_t occurrences = 0;
      for (size_t p = s.find(old_text); p != std::string::npos;
           p = s.find(old_text, p + old_text.size())) {
        ++occurrences;
      }
      RETURN_IF_ERROR(CheckString(s.size() + occurrences * new_text.size()));
    } else if (old_text.empty()) {
      RETURN_IF_ERROR(
          CheckString(s.size() + (CodePointCount(s) + 1) * new_text.size()));
    }
    return NewString(Replace(s, old_text, new_text, count));
  }
  if (name == "join") {
    ASSIGN_OR_RETURN(Args a, bind({{"iterable", true}}));
    ASSIGN_OR_RETURN(std::vector<Value> items, Iterate(a[0]));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return TypeError(absl::StrCat("sequence item ", i,
                                      ": expected str instance, ",
                                      TypeName(items[i]), " found"));
      }
      if (i > 0) out += s;
      out += items[i].as_string();
      RETURN_IF_ERROR(CheckString(out.size()));
    }
    return NewString(std::move(out));
  }
  if (IsOneOf(name, {"center", "ljust", "rjust"})) {
    ASSIGN_OR_RETURN(Args a, bind({{"width", true},
                                   {"fillchar", false, Value::String(" ")}}));
    ASSIGN_OR_RETURN(int64_t width, ToInt(a[0], "width"));
    if (!a[1].is_string() || CodePointCount(a[1].as_string()) != 1) {
      return TypeError("The fill character must be exactly one character long");
    }
    RETURN_IF_ERROR(
        CheckString(static_cast<size_t>(std::max<int64_t>(width, 0))));
    const int align = name == "center" ? 0 : name == "ljust" ? -1 : 1;
    return NewString(Pad(s, width, ToCodePoints(a[1].as_string())[0], align));
  }
  if (name == "zfill") {
    ASSIGN_OR_RETURN(Args a, bind({{"width", true}}));
    ASSIGN_OR_RETURN(int64_t width, ToInt(a[0], "width"));
    RETURN_IF_ERROR(
        CheckString(static_cast<size_t>(std::max<int64_t>(width, 0))));
    const int64_t length = static_cast<int64_t>(CodePointCount(s));
    if (width <= length) return self;
    std::string sign;
    std::string rest = s;
    if (!rest.empty() && (rest[0] == '+' || rest[0] == '-')) {
      sign = rest.substr(0, 1);
      rest = rest.substr(1);
    }
    return NewString(sign + std::string(width - length, '0') + rest);
  }
  if (name == "partition" || name == "rpartition") {
    ASSIGN_OR_RETURN(Args a, bind({{"sep", true}}));
    ASSIGN_OR_RETURN(std::string sep, ToStr(a[0], "separator"));
    if (sep.empty()) return TypeError("empty separator");
    const size_t found = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (found == std::string::npos) {
      return name == "partition"
                 ? Tuple({self, Value::String(""), Value::String("")})
                 : Tuple({Value::String(""), Value::String(""), self});
    }
    return Tuple({Value::String(s.substr(0, found)), Value::String(sep),
                  Value::String(s.substr(found + sep.size()))});
  }
  if (name == "format") {
    // Positional and named fields without conversions or format specs.
    std::string out;
    size_t auto_index = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      const char c = s[i];
      if ((c == '{' || c == '}') && i + 1 < s.size() && s[i + 1] == c) {
        out.push_back(c);
        ++i;
        continue;
      }
      if (c == '}') return TypeError("Single '}' encountered in format string");
      if (c != '{') {
        out.push_back(c);
        continue;
      }
      const size_t close = s.find('}', i);
      if (close == std::string::npos) {
        return TypeError("Single '{' encountered in format string");
      }
      const std::string field = s.substr(i + 1, close - i - 1);
      if (field.find_first_of("!:.[") != std::string::npos) {
        return TypeError(absl::StrCat("format field '{", field,
                                      "}' is not supported (only {}, {0} and "
                                      "{name})"));
      }
      const Value* value = nullptr;
      size_t index = 0;
      if (field.empty()) {
        index = auto_index++;
      } else if (absl::ascii_isdigit(field[0])) {
        index = std::stoul(field);
      } else {
        for (const auto& [key, v] : args.keyword) {
          if (key == field) value = &v;
        }
        if (value == nullptr)
          return TypeError(absl::StrCat("KeyError: '", field, "'"));
      }
      if (value == nullptr) {
        if (index >= args.positional.size()) {
          return TypeError(
              absl::StrCat("Replacement index ", index,
                           " out of range for positional args tuple"));
        }
        value = &args.positional[index];
      }
      AppendStr(*value, &out);
      RETURN_IF_ERROR(CheckString(out.size()));
      i = close;
    }
    return NewString(std::move(out));
  }
  return TypeError(absl::StrCat("'str' object has no method '", name, "'"));
}

namespace {

// What make_attrgetter gives: item lookup along a dotted path, integer parts
// as indexes.
absl::StatusOr<Value> AttributeOf(Interpreter& in, const Value& item,
                                  const Value& attribute) {
  if (!attribute.is_string()) return in.GetItem(item, attribute);
  Value v = item;
  for (absl::string_view part : absl::StrSplit(attribute.as_string(), '.')) {
    int64_t index = 0;
    if (!part.empty() && absl::SimpleAtoi(part, &index) &&
        absl::ascii_isdigit(part[0])) {
      ASSIGN_OR_RETURN(v, in.GetItem(v, Value::Int(index)));
    } else {
      ASSIGN_OR_RETURN(v, in.GetItem(v, Value::String(std::string(part))));
    }
  }
  return v;
}

// The sort key jinja2 uses: strings lower-cased unless case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string())
    return Value::String(Lower(v.as_string()));
  return v;
}

absl::Status SortValues(std::vector<std::pair<Value, Value>>* keyed,
                        bool reverse) {
  absl::Status error;
  std::stable_sort(
      keyed->begin(), keyed->end(), [&](const auto& a, const auto& b) {
        if (!error.ok()) return false;
        absl::StatusOr<bool> less =
            reverse ? Less(b.first, a.first) : Less(a.first, b.first);
        if (!less.ok()) {
          error = less.status();
          return false;
        }
        return *less;
      });
  return error;
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(CodePointCount(v.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(v.as_list().items.size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.as_dict().entries.size());
    default:
      return TypeError(
          absl::StrCat("object of type '", TypeName(v), "' has no len()"));
  }
}

using FilterFn = absl::StatusOr<Value> (*)(Interpreter&, const Value&,
                                           const CallArgs&);

absl::StatusOr<Value> SelectOrReject(Interpreter& in, const Value& input,
                                     const CallArgs& args, bool select,
                                     bool by_attribute) {
  ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(input));
  std::vector<Value> rest = args.positional;
  Value attribute;
  if (by_attribute) {
    if (rest.empty()) return TypeError("missing attribute argument");
    attribute = rest.front();
    rest.erase(rest.begin());
  }
  std::string test;
  if (!rest.empty()) {
    if (!rest.front().is_string())
      return TypeError("the test name must be a string");
    test = rest.front().as_string();
    rest.erase(rest.begin());
  }
  CallArgs test_args{rest, args.keyword};
  std::vector<Value> out;
  for (Value& item : items) {
    Value subject = item;
    if (by_attribute) {
      ASSIGN_OR_RETURN(subject, AttributeOf(in, item, attribute));
    }
    bool passed;
    if (test.empty()) {
      passed = Truthy(subject);
    } else {
      ASSIGN_OR_RETURN(passed, in.ApplyTest(test, subject, test_args));
    }
    if (passed == select) out.push_back(std::move(item));
  }
  return in.NewList(std::move(out));
}

absl::StatusOr<Value> MinMax(Interpreter& in, const Value& input,
                             const CallArgs& args, bool max) {
  ASSIGN_OR_RETURN(
      Args a,
      BindArgs(max ? "max" : "min", args,
               {{"case_sensitive", false, Value::Bool(false)}, {"attribute"}}));
  ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(input));
  if (items.empty()) {
    return Value::Undef("No aggregated item, sequence was empty.");
  }
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value key = items[i];
    if (!a[1].is_none()) {
      ASSIGN_OR_RETURN(key, AttributeOf(in, items[i], a[1]));
    }
    key = SortKey(key, Truthy(a[0]));
    if (i == 0) {
      best_key = key;
      continue;
    }
    ASSIGN_OR_RETURN(bool better,
                     max ? Less(best_key, key) : Less(key, best_key));
    if (better) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

const absl::flat_hash_map<std::string, FilterFn>& Filters() {
  static const auto* filters = new absl::flat_hash_map<std::string, FilterFn>{
      {"abs",
       [](Interpreter&, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         RETURN_IF_ERROR(BindArgs("abs", args, {}).status());
         if (v.is_float()) return Value::Float(std::fabs(v.as_float()));
         if (v.is_int() || v.is_bool()) {
           if (v.as_integer() == std::numeric_limits<int64_t>::min()) {
             return TypeError("integer result does not fit in 64 bits");
           }
           return Value::Int(std::llabs(v.as_integer()));
         }
         if (v.is_undefined()) return TypeError(v.undefined_message());
         return TypeError(
             absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
       }},
      {"attr",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args a, BindArgs("attr", args, {{"name", true}}));
         const std::string name = Str(a[0]);
         if (v.is_namespace()) {
           if (const Value* found = v.as_namespace().Find(name)) return *found;
         } else if (v.is_undefined()) {
           return TypeError(v.undefined_message());
         } else if (v.is_dict() || v.is_list() || v.is_string()) {
           // Attributes only, never items.
           if (HasMethod(v, name) || IsMutatingMethod(v, name)) {
             return in.GetAttr(v, name);
           }
         }
         return Value::Undef(absl::StrCat(StringRepr(ObjectTypeRepr(v)),
                                          " has no attribute ",
                                          StringRepr(name)));
       }},
      {"batch",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(
             Args a,
             BindArgs("batch", args, {{"linecount", true}, {"fill_with"}}));
         ASSIGN_OR_RETURN(int64_t n, ToInt(a[0], "linecount"));
         if (n <= 0) return TypeError("batch size must be positive");
         ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
         std::vector<Value> batches, current;
         for (Value& item : items) {
           current.push_back(std::move(item));
           if (static_cast<int64_t>(current.size()) == n) {
             ASSIGN_OR_RETURN(Value batch, in.NewList(std::move(current)));
             batches.push_back(std::move(batch));
             current.clear();
           }
         }
         if (!current.empty()) {
           if (!a[1].is_none()) {
             while (static_cast<int64_t>(current.size()) < n)
               current.push_back(a[1]);
           }
           ASSIGN_OR_RETURN(Value batch, in.NewList(std::move(current)));
           batches.push_back(std::move(batch));
         }
         return in.NewList(std::move(batches));
       }},
      {"capitalize",
       [](Interpreter& in, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         return in.NewString(Capitalize(Str(v)));
       }},
      {"center",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args a, BindArgs("center", args,
                                           {{"width", false, Value::Int(80)}}));
         ASSIGN_OR_RETURN(int64_t width, ToInt(a[0], "width"));
         RETURN_IF_ERROR(
             in.CheckString(static_cast<size_t>(std::max<int64_t>(width, 0))));
         return in.NewString(Pad(Str(v), width, ' ', 0));
       }},
      {"default",
       [](Interpreter&, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args a,
                          BindArgs("default", args,
                                   {{"default_value", false, Value::String("")},
                                    {"boolean", false, Value::Bool(false)}}));
         if (v.is_undefined() || (Truthy(a[1]) && !Truthy(v))) return a[0];
         return v;
       }},
      {"dictsort",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(
             Args a, BindArgs("dictsort", args,
                              {{"case_sensitive", false, Value::Bool(false)},
                               {"by", false, Value::String("key")},
                               {"reverse", false, Value::Bool(false)}}));
         if (!v.is_dict()) return TypeError("dictsort needs a mapping");
         const std::string by = Str(a[1]);
         if (by != "key" && by != "value") {
           return TypeError("You can only sort by either 'key' or 'value'");
         }
         std::vector<std::pair<Value, Value>> keyed;
         for (const auto& [key, value] : v.as_dict().entries) {
           keyed.emplace_back(SortKey(by == "key" ? key : value, Truthy(a[0])),
                              Tuple({key, value}));
         }
         RETURN_IF_ERROR(SortValues(&keyed, Truthy(a[2])));
         std::vector<Value> out;
         for (auto& [key, pair] : keyed) out.push_back(std::move(pair));
         return in.NewList(std::move(out));
       }},
      {"escape",
       [](Interpreter& in, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         return in.NewString(HtmlEscape(Str(v)));
       }},
      {"first",
       [](Interpreter& in, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
         if (items.empty())
           return Value::Undef("No first item, sequence was empty.");
         return items.front();
       }},
      {"float",
       [](Interpreter&, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(
             Args a,
             BindArgs("float", args, {{"default", false, Value::Float(0.0)}}));
         if (v.is_undefined()) return TypeError(v.undefined_message());
         if (v.is_number()) return Value::Float(v.as_double());
         if (v.is_string()) {
           if (std::optional<double> d = ParseFloat(v.as_string())) {
             return Value::Float(*d);
           }
         }
         return a[0];
       }},
      {"format",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         if (!args.positional.empty() && !args.keyword.empty()) {
           return TypeError(
               "can't handle positional and keyword arguments at the same "
               "time");
         }
         Value format_args = Tuple(args.positional);
         if (!args.keyword.empty()) {
           std::vector<std::pair<Value, Value>> entries;
           for (const auto& [key, value] : args.keyword) {
             entries.emplace_back(Value::String(key), value);
           }
           format_args = Value::MakeDict(std::move(entries));
         }
         ASSIGN_OR_RETURN(std::string out, PercentFormat(Str(v), format_args));
         return in.NewString(std::move(out));
       }},
      {"indent",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args a,
                          BindArgs("indent", args,
                                   {{"width", false, Value::Int(4)},
                                    {"first", false, Value::Bool(false)},
                                    {"blank", false, Value::Bool(false)}}));
         std::string indention;
         if (a[0].is_string()) {
           indention = a[0].as_string();
         } else {
           ASSIGN_OR_RETURN(int64_t width, ToInt(a[0], "width"));
           RETURN_IF_ERROR(in.CheckString(
               static_cast<size_t>(std::max<int64_t>(width, 0))));
           indention = std::string(std::max<int64_t>(width, 0), ' ');
         }
         // jinja2 appends a newline so that splitlines keeps a trailing
         // empty line.
         const std::vector<std::string> lines =
             SplitLines(Str(v) + "\n", false);
         std::string out;
         size_t total = 0;
         for (const std::string& line : lines)
           total += line.size() + indention.size() + 1;
         RETURN_IF_ERROR(in.CheckString(total));
         if (Truthy(a[2])) {
           out = absl::StrJoin(lines, "\n" + indention);
         } else {
           for (size_t i = 0; i < lines.size(); ++i) {
             if (i > 0) {
               out += "\n";
               if (!lines[i].empty()) out += indention;
             }
             out += lines[i];
           }
         }
         if (Truthy(a[1])) out = indention + out;
         return in.NewString(std::move(out));
       }},
      {"int",
       [](Interpreter&, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args a, BindArgs("int", args,
                                           {{"default", false, Value::Int(0)},
                                            {"base", false, Value::Int(10)}}));
         if (v.is_undefined()) return TypeError(v.undefined_message());
         if (v.is_int() || v.is_bool()) return Value::Int(v.as_integer());
         if (v.is_float()) {
           const double d = v.as_float();
           if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) {
             return TypeError("cannot convert float to an integer of 64 bits");
           }
           return Value::Int(static_cast<int64_t>(d));
         }
         if (v.is_string()) {
           ASSIGN_OR_RETURN(int64_t base, ToInt(a[1], "base"));
           if (base >= 2 && base <= 36) {
             if (std::optional<int64_t> i =
                     ParseInt(v.as_string(), static_cast<int>(base))) {
               return Value::Int(*i);
             }
           }
           if (std::optional<double> d = ParseFloat(v.as_string())) {
             if (std::isfinite(*d) && std::fabs(*d) < 9.2e18) {
               return Value::Int(static_cast<int64_t>(*d));
             }
           }
         }
         return a[0];
       }},
      {"items",
       [](Interpreter& in, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         if (v.is_undefined()) return in.NewList({});
         if (!v.is_dict())
           return TypeError("Can only get item pairs from a mapping.");
         std::vector<Value> out;
         for (const auto& [key, value] : v.as_dict().entries) {
           out.push_back(Tuple({key, value}));
         }
         return in.NewList(std::move(out));
       }},
      {"join",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args a, BindArgs("join", args,
                                           {{"d", false, Value::String("")},
                                            {"attribute"}}));
         ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
         const std::string separator = Str(a[0]);
         std::string out;
         for (size_t i = 0; i < items.size(); ++i) {
           if (i > 0) out += separator;
           if (a[1].is_none()) {
             AppendStr(items[i], &out);
           } else {
             ASSIGN_OR_RETURN(Value item, AttributeOf(in, items[i], a[1]));
             AppendStr(item, &out);
           }
           RETURN_IF_ERROR(in.CheckString(out.size()));
         }
         return in.NewString(std::move(out));
       }},
      {"last",
       [](Interpreter& in, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
         if (items.empty())
           return Value::Undef("No last item, sequence was empty.");
         return items.back();
       }},
      {"length",
       [](Interpreter&, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(int64_t n, Length(v));
         return Value::Int(n);
       }},
      {"list",
       [](Interpreter& in, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
         return in.NewList(std::move(items));
       }},
      {"lower",
       [](Interpreter& in, const Value& v, const CallArgs&)
           -> absl::StatusOr<Value> { return in.NewString(Lower(Str(v))); }},
      {"map",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
         std::vector<Value> out;
         const Value* attribute = nullptr;
         const Value* fallback = nullptr;
         for (const auto& [key, value] : args.keyword) {
           if (key == "attribute") attribute = &value;
           if (key == "default") fallback = &value;
         }
         if (attribute != nullptr) {
           for (const Value& item : items) {
             ASSIGN_OR_RETURN(Value mapped, AttributeOf(in, item, *attribute));
             if (mapped.is_undefined() && fallback != nullptr)
               mapped = *fallback;
             out.push_back(std::move(mapped));
           }
           return in.NewList(std::move(out));
         }
         if (args.positional.empty() || !args.positional[0].is_string()) {
           return TypeError("map needs a filter name or attribute=");
         }
         CallArgs filter_args{std::vector<Value>(args.positional.begin() + 1,
                                                 args.positional.end()),
                              args.keyword};
         for (const Value& item : items) {
           ASSIGN_OR_RETURN(Value mapped,
                            in.ApplyFilter(args.positional[0].as_string(), item,
                                           filter_args));
           out.push_back(std::move(mapped));
         }
         return in.NewList(std::move(out));
       }},
      {"max", [](Interpreter& in, const Value& v,
                 const CallArgs& args) { return MinMax(in, v, args, true); }},
      {"min", [](Interpreter& in, const Value& v,
                 const CallArgs& args) { return MinMax(in, v, args, false); }},
      {"reject",
       [](Interpreter& in, const Value& v, const CallArgs& args) {
         return SelectOrReject(in, v, args, false, false);
       }},
      {"rejectattr",
       [](Interpreter& in, const Value& v, const CallArgs& args) {
         return SelectOrReject(in, v, args, false, true);
       }},
      {"replace",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args a,
                          BindArgs("replace", args,
                                   {{"old", true}, {"new", true}, {"count"}}));
         CallArgs method_args{
             {Value::String(Str(a[0])), Value::String(Str(a[1]))}, {}};
         if (!a[2].is_none()) method_args.positional.push_back(a[2]);
         return in.Call(Value::MakeCallable(std::make_shared<BoundMethod>(
                            Value::String(Str(v)), "replace")),
                        std::move(method_args));
       }},
      {"reverse",
       [](Interpreter& in, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         if (v.is_string()) {
           std::u32string cps = ToCodePoints(v.as_string());
           std::reverse(cps.begin(), cps.end());
           return in.NewString(FromCodePoints(cps));
         }
         ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
         std::reverse(items.begin(), items.end());
         return in.NewList(std::move(items));
       }},
      {"round",
       [](Interpreter&, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(
             Args a, BindArgs("round", args,
                              {{"precision", false, Value::Int(0)},
                               {"method", false, Value::String("common")}}));
         ASSIGN_OR_RETURN(int64_t precision, ToInt(a[0], "precision"));
         const std::string method = Str(a[1]);
         if (method != "common" && method != "ceil" && method != "floor") {
           return TypeError("method must be common, ceil or floor");
         }
         if (v.is_undefined()) return TypeError(v.undefined_message());
         if (!v.is_number()) {
           return TypeError(absl::StrCat("type ", TypeName(v),
                                         " doesn't define __round__ method"));
         }
         if (method == "common") {
           if (!v.is_float()) {
             // int.__round__: stays an int, ties to even.
             const int64_t x = v.as_integer();
             if (precision >= 0) return Value::Int(x);
             if (precision < -18) return Value::Int(0);
             int64_t m = 1;
             for (int64_t i = 0; i < -precision; ++i) m *= 10;
             int64_t r = x % m;
             if (r < 0) r += m;
             int64_t q = x - r;
             if (2 * r > m || (2 * r == m && (q / m) % 2 != 0)) q += m;
             return Value::Int(q);
           }
           return Value::Float(RoundHalfEven(v.as_double(), precision));
         }
         const double scale = std::pow(10.0, static_cast<double>(precision));
         const double x = v.as_double() * scale;
         return Value::Float((method == "ceil" ? std::ceil(x) : std::floor(x)) /
                             scale);
       }},
      {"safe",
       [](Interpreter& in, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         if (v.is_string()) return v;
         return in.NewString(Str(v));
       }},
      {"select",
       [](Interpreter& in, const Value& v,
          const CallArgs&
              args) { return SelectOrReject(in, v, args, true, false); }},
      {"selectattr",
       [](Interpreter& in, const Value& v,
          const CallArgs&
              args) { return SelectOrReject(in, v, args, true, true); }},
      {"sort",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(
             Args a, BindArgs("sort", args,
                              {{"reverse", false, Value::Bool(false)},
                               {"case_sensitive", false, Value::Bool(false)},
                               {"attribute"}}));
         ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
         std::vector<std::pair<Value, Value>> keyed;
         for (Value& item : items) {
           Value key = item;
           if (!a[2].is_none()) {
             ASSIGN_OR_RETURN(key, AttributeOf(in, item, a[2]));
           }
           keyed.emplace_back(SortKey(key, Truthy(a[1])), std::move(item));
         }
         RETURN_IF_ERROR(SortValues(&keyed, Truthy(a[0])));
         std::vector<Value> out;
         for (auto& [key, item] : keyed) out.push_back(std::move(item));
         return in.NewList(std::move(out));
       }},
      {"string",
       [](Interpreter& in, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         if (v.is_string()) return v;
         return in.NewString(Str(v));
       }},
      {"sum",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args a, BindArgs("sum", args,
                                           {{"attribute"},
                                            {"start", false, Value::Int(0)}}));
         ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
         Value total = a[1];
         for (const Value& item : items) {
           Value x = item;
           if (!a[0].is_none()) {
             ASSIGN_OR_RETURN(x, AttributeOf(in, item, a[0]));
           }
           if (!x.is_number() || !total.is_number()) {
             return TypeError(
                 absl::StrCat("unsupported operand type(s) for +: '",
                              TypeName(total), "' and '", TypeName(x), "'"));
           }
           if (x.is_float() || total.is_float()) {
             total = Value::Float(total.as_double() + x.as_double());
           } else {
             int64_t r = 0;
             if (__builtin_add_overflow(total.as_integer(), x.as_integer(),
                                        &r)) {
               return TypeError("integer result does not fit in 64 bits");
             }
             total = Value::Int(r);
           }
         }
         return total;
       }},
      {"title",
       [](Interpreter& in, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         return in.NewString(JinjaTitle(Str(v)));
       }},
      {"tojson",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args a,
                          BindArgs("tojson", args,
                                   {{"ensure_ascii", false, Value::Bool(false)},
                                    {"indent"},
                                    {"separators"},
                                    {"sort_keys", false, Value::Bool(false)}}));
         JsonOptions options;
         options.ensure_ascii = Truthy(a[0]);
         options.sort_keys = Truthy(a[3]);
         if (!a[1].is_none()) {
           options.has_indent = true;
           if (a[1].is_string()) {
             options.indent = a[1].as_string();
           } else {
             ASSIGN_OR_RETURN(int64_t width, ToInt(a[1], "indent"));
             RETURN_IF_ERROR(in.CheckString(
                 static_cast<size_t>(std::max<int64_t>(width, 0))));
             options.indent = std::string(std::max<int64_t>(width, 0), ' ');
           }
           options.item_separator = ",";
         }
         if (!a[2].is_none()) {
           if (!a[2].is_list() || a[2].as_list().items.size() != 2 ||
               !a[2].as_list().items[0].is_string() ||
               !a[2].as_list().items[1].is_string()) {
             return TypeError("separators must be a pair of strings");
           }
           options.item_separator = a[2].as_list().items[0].as_string();
           options.key_separator = a[2].as_list().items[1].as_string();
         }
         ASSIGN_OR_RETURN(std::string out, ToJson(v, options));
         return in.NewString(std::move(out));
       }},
      {"trim",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(Args a, BindArgs("trim", args, {{"chars"}}));
         ASSIGN_OR_RETURN(std::string out, Strip(Str(v), a[0], true, true));
         return in.NewString(std::move(out));
       }},
      {"unique",
       [](Interpreter& in, const Value& v,
          const CallArgs& args) -> absl::StatusOr<Value> {
         ASSIGN_OR_RETURN(
             Args a, BindArgs("unique", args,
                              {{"case_sensitive", false, Value::Bool(false)},
                               {"attribute"}}));
         ASSIGN_OR_RETURN(std::vector<Value> items, in.Iterate(v));
         std::vector<Value> out, seen;
         for (Value& item : items) {
           Value key = item;
           if (!a[1].is_none()) {
             ASSIGN_OR_RETURN(key, AttributeOf(in, item, a[1]));
           }
           key = SortKey(key, Truthy(a[0]));
           bool duplicate = false;
           for (const Value& s : seen) duplicate |= Equal(s, key);
           RETURN_IF_ERROR(in.Charge(static_cast<int64_t>(seen.size())));
           if (duplicate) continue;
           seen.push_back(std::move(key));
           out.push_back(std::move(item));
         }
         return in.NewList(std::move(out));
       }},
      {"upper",
       [](Interpreter& in, const Value& v, const CallArgs&)
           -> absl::StatusOr<Value> { return in.NewString(Upper(Str(v))); }},
      {"wordcount",
       [](Interpreter&, const Value& v,
          const CallArgs&) -> absl::StatusOr<Value> {
         int64_t words = 0;
         bool in_word = false;
         for (char32_t c : ToCodePoints(Str(v))) {
           const bool word = c == '_' || u_isalnum(static_cast<UChar32>(c));
           if (word && !in_word) ++words;
           in_word = word;
         }
         return Value::Int(words);
       }},
  };
  return *filters;
}

const absl::flat_hash_map<std::string, std::string>& FilterAliases() {
  static const auto* aliases =
      new absl::flat_hash_map<std::string, std::string>{
          {"d", "default"}, {"e", "escape"}, {"count", "length"}};
  return *aliases;
}

bool DivisibleBy(const Value& v, const Value& n, absl::Status* error) {
  if (!v.is_number() || !n.is_number()) {
    *error = TypeError(absl::StrCat("unsupported operand type(s) for %: '",
                                    TypeName(v), "' and '", TypeName(n), "'"));
    return false;
  }
  if (v.is_float() || n.is_float()) {
    if (n.as_double() == 0) {
      *error = TypeError("float modulo");
      return false;
    }
    return std::fmod(v.as_double(), n.as_double()) == 0;
  }
  if (n.as_integer() == 0) {
    *error = TypeError("integer division or modulo by zero");
    return false;
  }
  if (n.as_integer() == -1) return true;
  return v.as_integer() % n.as_integer() == 0;
}

const std::vector<std::string>& TestNames() {
  static const auto* names = new std::vector<std::string>{
      "boolean",  "callable",    "defined",   "divisibleby", "eq",
      "equalto",  "==",          "escaped",   "even",        "false",
      "filter",   "float",       "ge",        ">=",          "gt",
      ">",        "greaterthan", "in",        "integer",     "iterable",
      "le",       "<=",          "lower",     "lt",          "<",
      "lessthan", "mapping",     "ne",        "!=",          "none",
      "number",   "odd",         "sameas",    "sequence",    "string",
      "test",     "true",        "undefined", "upper"};
  return *names;
}

}  // namespace

bool IsKnownFilter(absl::string_view name) {
  return Filters().contains(name) || FilterAliases().contains(name);
}

bool IsKnownTest(absl::string_view name) {
  const auto& names = TestNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

absl::StatusOr<Value> Interpreter::ApplyFilter(absl::string_view name,
                                               const Value& input,
                                               const CallArgs& args) {
  if (const auto alias = FilterAliases().find(name);
      alias != FilterAliases().end()) {
    name = alias->second;
  }
  const auto it = Filters().find(name);
  if (it == Filters().end()) {
    return TypeError(absl::StrCat("unknown filter '", name, "'"));
  }
  return it->second(*this, input, args);
}

absl::StatusOr<bool> Interpreter::ApplyTest(absl::string_view name,
                                            const Value& v,
                                            const CallArgs& args) {
  const auto one_arg = [&]() -> absl::StatusOr<Value> {
    ASSIGN_OR_RETURN(Args a, BindArgs(name, args, {{"other", true}}));
    return a[0];
  };
  const auto no_args = [&]() { return BindArgs(name, args, {}).status(); };
  if (name == "defined" || name == "undefined") {
    RETURN_IF_ERROR(no_args());
    return v.is_undefined() == (name == "undefined");
  }
  if (name == "none") {
    RETURN_IF_ERROR(no_args());
    return v.is_none();
  }
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  // Undefined iterates (as empty) and has a length and __getitem__.
  if (name == "iterable") {
    return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  }
  if (name == "sequence") {
    return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
  }
  if (name == "lower" || name == "upper") {
    return CaseTest(Str(v), name == "lower");
  }
  if (name == "even" || name == "odd") {
    if (v.is_undefined()) return TypeError(v.undefined_message());
    absl::Status error;
    const bool even = DivisibleBy(v, Value::Int(2), &error);
    RETURN_IF_ERROR(error);
    return even == (name == "even");
  }
  if (name == "divisibleby") {
    ASSIGN_OR_RETURN(Args a, BindArgs(name, args, {{"num", true}}));
    if (v.is_undefined()) return TypeError(v.undefined_message());
    absl::Status error;
    const bool result = DivisibleBy(v, a[0], &error);
    RETURN_IF_ERROR(error);
    return result;
  }
  if (name == "eq" || name == "equalto" || name == "==") {
    ASSIGN_OR_RETURN(Value other, one_arg());
    return Equal(v, other);
  }
  if (name == "ne" || name == "!=") {
    ASSIGN_OR_RETURN(Value other, one_arg());
    return !Equal(v, other);
  }
  if (name == "sameas") {
    ASSIGN_OR_RETURN(Value other, one_arg());
    return v.SameAs(other);
  }
  if (IsOneOf(name, {"lt", "lessthan", "<", "le", "<=", "gt", "greaterthan",
                     ">", "ge", ">="})) {
    ASSIGN_OR_RETURN(Value other, one_arg());
    if (v.is_undefined()) return TypeError(v.undefined_message());
    if (other.is_undefined()) return TypeError(other.undefined_message());
    const bool greater = name[0] == 'g' || name[0] == '>';
    const bool or_equal =
        name == "le" || name == "<=" || name == "ge" || name == ">=";
    ASSIGN_OR_RETURN(bool less, greater ? Less(other, v) : Less(v, other));
    if (or_equal) return less || Equal(v, other);
    return less;
  }
  if (name == "in") {
    ASSIGN_OR_RETURN(Args a, BindArgs(name, args, {{"seq", true}}));
    const Value& seq = a[0];
    switch (seq.kind()) {
      case Value::Kind::kString:
        if (!v.is_string()) {
          if (v.is_undefined()) return TypeError(v.undefined_message());
          return TypeError(absl::StrCat(
              "'in <string>' requires string as left operand, not ",
              TypeName(v)));
        }
        return seq.as_string().find(v.as_string()) != std::string::npos;
      case Value::Kind::kList:
        for (const Value& item : seq.as_list().items) {
          if (Equal(item, v)) return true;
        }
        return false;
      case Value::Kind::kDict:
        if (v.is_list() || v.is_dict()) {
          return TypeError(
              absl::StrCat("unhashable type: '", TypeName(v), "'"));
        }
        return seq.as_dict().Find(v) != nullptr;
      case Value::Kind::kUndefined:
        return false;
      default:
        return TypeError(absl::StrCat("argument of type '", TypeName(seq),
                                      "' is not iterable"));
    }
  }
  if (name == "filter" || name == "test") {
    ASSIGN_OR_RETURN(Args a, BindArgs(name, args, {}));
    if (!v.is_string()) return false;
    return name == "filter" ? IsKnownFilter(v.as_string())
                            : IsKnownTest(v.as_string());
  }
  return TypeError(absl::StrCat("unknown test '", name, "'"));
}

Variables Interpreter::Globals() {
  Variables globals;
  globals.emplace_back(
      "range",
      MakeNativeFunction(
          "range", [this](const CallArgs& args) -> absl::StatusOr<Value> {
            if (!args.keyword.empty())
              return TypeError("range() takes no keyword arguments");
            std::vector<int64_t> bounds;
            for (const Value& v : args.positional) {
              if (v.is_undefined()) return TypeError(v.undefined_message());
              ASSIGN_OR_RETURN(int64_t i, ToInt(v, "range() argument"));
              bounds.push_back(i);
            }
            if (bounds.empty() || bounds.size() > 3) {
              return TypeError("range expected 1 to 3 arguments");
            }
            int64_t start = 0, stop = 0, step = 1;
            if (bounds.size() == 1) {
              stop = bounds[0];
            } else {
              start = bounds[0];
              stop = bounds[1];
              if (bounds.size() == 3) step = bounds[2];
            }
            if (step == 0) return TypeError("range() arg 3 must not be zero");
            const double count =
                std::max(0.0, std::ceil((static_cast<double>(stop) -
                                         static_cast<double>(start)) /
                                        static_cast<double>(step)));
            // The sandbox's limit (jinja2's MAX_RANGE).
            if (count > 100000) {
              return TypeError(
                  "Range too big. The sandbox blocks ranges larger than "
                  "MAX_RANGE "
                  "(100000).");
            }
            std::vector<Value> items;
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
              items.push_back(Value::Int(i));
            }
            return NewList(std::move(items));
          }));
  const auto make_dict = [](const CallArgs& args,
                            absl::string_view what) -> absl::StatusOr<Value> {
    std::vector<std::pair<Value, Value>> entries;
    const auto put = [&](Value key, Value value) {
      for (auto& [k, v] : entries) {
        if (Equal(k, key)) {
          v = std::move(value);
          return;
        }
      }
      entries.emplace_back(std::move(key), std::move(value));
    };
    if (args.positional.size() > 1) {
      return TypeError(absl::StrCat(what, " expected at most 1 argument"));
    }
    if (!args.positional.empty()) {
      const Value& source = args.positional[0];
      if (source.is_dict()) {
        for (const auto& [k, v] : source.as_dict().entries) put(k, v);
      } else if (source.is_list()) {
        for (const Value& pair : source.as_list().items) {
          if (!pair.is_list() || pair.as_list().items.size() != 2) {
            return TypeError(
                absl::StrCat(what, " needs a mapping or a sequence of pairs"));
          }
          put(pair.as_list().items[0], pair.as_list().items[1]);
        }
      } else {
        return TypeError(
            absl::StrCat(what, " needs a mapping or a sequence of pairs"));
      }
    }
    for (const auto& [k, v] : args.keyword) put(Value::String(k), v);
    return Value::MakeDict(std::move(entries));
  };
  globals.emplace_back(
      "dict", MakeNativeFunction("dict", [make_dict](const CallArgs& args) {
        return make_dict(args, "dict");
      }));
  globals.emplace_back(
      "namespace",
      MakeNativeFunction(
          "namespace",
          [this, make_dict](const CallArgs& args) -> absl::StatusOr<Value> {
            ASSIGN_OR_RETURN(Value dict, make_dict(args, "namespace"));
            auto ns = std::make_shared<Namespace>();
            for (const auto& [k, v] : dict.as_dict().entries) {
              if (!k.is_string())
                return TypeError("namespace keys must be strings");
              RETURN_IF_ERROR(CheckNoNamespace(v));
              ns->Set(k.as_string(), v);
            }
            namespaces_.push_back(ns);
            return Value::MakeNamespace(std::move(ns));
          }));
  globals.emplace_back(
      "joiner",
      MakeNativeFunction(
          "joiner", [](const CallArgs& args) -> absl::StatusOr<Value> {
            ASSIGN_OR_RETURN(Args a,
                             BindArgs("joiner", args,
                                      {{"sep", false, Value::String(", ")}}));
            auto used = std::make_shared<bool>(false);
            const std::string separator = Str(a[0]);
            return MakeNativeFunction(
                "joiner", [used, separator](const CallArgs&) {
                  const bool first = !*used;
                  *used = true;
                  return absl::StatusOr<Value>(
                      Value::String(first ? "" : separator));
                });
          }));
  return globals;
}

}  // namespace ringmoe::jinja

#include "engine/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/jinja/value.h"
#include "engine/tokenizer/utf8.h"

namespace ringmoe::jinja {
namespace {

// jinja2 joins the template's lines with "\n" and drops one final newline
// (keep_trailing_newline is off).
std::string NormalizeNewlines(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's str.rstrip() (Unicode whitespace).
absl::string_view RStripSpace(absl::string_view text) {
  while (!text.empty()) {
    size_t start = text.size() - 1;
    while (start > 0 &&
           (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
      --start;
    }
    const size_t length = tokenizer::Utf8SequenceLength(text, start);
    if (length == 0 ||
        !IsPySpace(tokenizer::DecodeUtf8At(text, start, length))) {
      break;
    }
    text.remove_suffix(text.size() - start);
  }
  return text;
}

bool AllSpace(absl::string_view text) {
  if (text.empty()) return false;
  return RStripSpace(text).empty();
}

bool IsNameStart(char c) {
  return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      const size_t tag = FindTag(pos);
      if (tag == std::string::npos) {
        EmitText(pos, src_.substr(pos));
        break;
      }
      const char kind = src_[tag + 1];
      char sign = 0;
      if (tag + 2 < src_.size() &&
          (src_[tag + 2] == '-' || src_[tag + 2] == '+')) {
        sign = src_[tag + 2];
      }
      absl::string_view text(src_.data() + pos, tag - pos);
      if (sign == '-') {
        text = RStripSpace(text);
      } else if (sign != '+' && kind != '{') {
        text = LStripBlock(text, line_starting);
      }
      EmitText(pos, text);
      const size_t body = tag + 2 + (sign != 0 ? 1 : 0);
      absl::StatusOr<size_t> next;
      if (kind == '#') {
        next = SkipComment(tag, body);
      } else if (kind == '%' && IsRaw(body)) {
        next = LexRaw(tag, body);
      } else {
        next = LexTag(tag, body, kind == '%');
      }
      if (!next.ok()) return next.status();
      pos = *next;
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    tokens_.push_back(Token{Token::Type::kEnd, "", 0, 0, LineAt(src_.size())});
    return std::move(tokens_);
  }

 private:
  int LineAt(size_t offset) const {
    return static_cast<int>(
        std::upper_bound(line_starts_.begin(), line_starts_.end(), offset) -
        line_starts_.begin());
  }

  absl::Status Error(size_t offset, absl::string_view message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("line ", LineAt(offset), ": ", message));
  }

  // The earliest "{{", "{%" or "{#" at or after `pos`.
  size_t FindTag(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos;
         i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() &&
          (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // lstrip_blocks: spaces and tabs between a line's start and a block or
  // comment tag go.
  static absl::string_view LStripBlock(absl::string_view text,
                                       bool line_starting) {
    const size_t newline = text.rfind('\n');
    const size_t line_start =
        newline == absl::string_view::npos ? 0 : newline + 1;
    if ((line_start > 0 || line_starting) &&
        AllSpace(text.substr(line_start))) {
      return text.substr(0, line_start);
    }
    return text;
  }

  void EmitText(size_t offset, absl::string_view text) {
    if (text.empty()) return;
    tokens_.push_back(
        Token{Token::Type::kText, std::string(text), 0, 0, LineAt(offset)});
  }

  size_t SkipSpace(size_t pos) const {
    while (pos < src_.size() &&
           absl::ascii_isspace(static_cast<unsigned char>(src_[pos]))) {
      ++pos;
    }
    return pos;
  }

  // After a closing delimiter: "-" strips all following whitespace, no sign
  // takes one newline (trim_blocks) when `trim` is set, "+" keeps everything.
  size_t AfterEnd(size_t pos, char sign, bool trim) const {
    if (sign == '-') return SkipSpace(pos);
    if (sign != '+' && trim && pos < src_.size() && src_[pos] == '\n') {
      return pos + 1;
    }
    return pos;
  }

  absl::StatusOr<size_t> SkipComment(size_t tag, size_t body) {
    const size_t end = src_.find("#}", body);
    if (end == std::string::npos)
      return Error(tag, "missing end of comment tag");
    char sign = 0;
    if (end > body && (src_[end - 1] == '-' || src_[end - 1] == '+')) {
      sign = src_[end - 1];
    }
    return AfterEnd(end + 2, sign, /*trim=*/true);
  }

  // Whether "{% raw %}" (any whitespace control) starts at the tag body.
  bool IsRaw(size_t body) const {
    size_t p = SkipSpace(body);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = SkipSpace(p + 3);
    if (p < src_.size() && src_[p] == '-') ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  absl::StatusOr<size_t> LexRaw(size_t tag, size_t body) {
    size_t p = SkipSpace(SkipSpace(body) + 3);
    char sign = 0;
    if (src_[p] == '-') {
      sign = '-';
      ++p;
    }
    // No trim_blocks after {% raw %}, as in jinja2.
    const size_t start = sign == '-' ? SkipSpace(p + 2) : p + 2;
    const bool line_starting = start > 0 && src_[start - 1] == '\n';
    for (size_t i = src_.find("{%", start); i != std::string::npos;
         i = src_.find("{%", i + 1)) {
      size_t q = i + 2;
      char open_sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) {
        open_sign = src_[q++];
      }
      q = SkipSpace(q);
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q = SkipSpace(q + 6);
      char close_sign = 0;
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) {
        close_sign = src_[q++];
      }
      if (src_.compare(q, 2, "%}") != 0) continue;
      absl::string_view text(src_.data() + start, i - start);
      if (open_sign == '-') {
        text = RStripSpace(text);
      } else if (open_sign != '+') {
        text = LStripBlock(text, line_starting);
      }
      EmitText(start, text);
      return AfterEnd(q + 2, close_sign, /*trim=*/true);
    }
    return Error(tag, "missing {% endraw %} for this {% raw %}");
  }

  absl::StatusOr<size_t> LexTag(size_t tag, size_t pos, bool block) {
    const char close = block ? '%' : '}';
    tokens_.push_back(
        Token{block ? Token::Type::kBlockBegin : Token::Type::kVariableBegin,
              block ? "{%" : "{{", 0, 0, LineAt(tag)});
    std::vector<char> balance;
    while (true) {
      pos = SkipSpace(pos);
      if (pos >= src_.size()) {
        return Error(tag,
                     absl::StrCat("unexpected end of template: missing '",
                                  std::string(1, close), "}' for this tag"));
      }
      if (balance.empty()) {
        char sign = 0;
        size_t p = pos;
        if (src_[p] == '-' || (block && src_[p] == '+')) sign = src_[p++];
        if (p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}') {
          tokens_.push_back(
              Token{block ? Token::Type::kBlockEnd : Token::Type::kVariableEnd,
                    block ? "%}" : "}}", 0, 0, LineAt(pos)});
          return AfterEnd(p + 2, sign, /*trim=*/block);
        }
      }
      const char c = src_[pos];
      const int line = LineAt(pos);
      if (c == '\'' || c == '"') {
        absl::StatusOr<size_t> end = LexString(pos);
        if (!end.ok()) return end.status();
        pos = *end;
      } else if (absl::ascii_isdigit(static_cast<unsigned char>(c))) {
        pos = LexNumber(pos);
      } else if (IsNameStart(c)) {
        size_t end = pos;
        while (end < src_.size() && IsNameChar(src_[end])) ++end;
        tokens_.push_back(
            Token{Token::Type::kName, src_.substr(pos, end - pos), 0, 0, line});
        pos = end;
      } else {
        static constexpr absl::string_view kTwo[] = {
            "//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (absl::string_view two : kTwo) {
          if (src_.compare(pos, 2, two.data(), 2) == 0) op = std::string(two);
        }
        if (op.empty()) {
          if (absl::string_view("+-/*%~[](){}<>=.:|,;").find(c) ==
              absl::string_view::npos) {
            return Error(pos, absl::StrCat("unexpected character '",
                                           std::string(1, c), "'"));
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op[0]);
        } else if (op == ")" || op == "]" || op == "}") {
          const char open = op == ")" ? '(' : op == "]" ? '[' : '{';
          if (balance.empty() || balance.back() != open) {
            return Error(pos, absl::StrCat("unexpected '", op, "'"));
          }
          balance.pop_back();
        }
        tokens_.push_back(Token{Token::Type::kOperator, op, 0, 0, line});
        pos += op.size();
      }
    }
  }

  absl::StatusOr<size_t> LexString(size_t pos) {
    const char quote = src_[pos];
    std::string value;
    size_t i = pos + 1;
    while (true) {
      if (i >= src_.size()) return Error(pos, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size())
        return Error(pos, "unterminated string literal");
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n':
          break;  // a line continuation
        case '\\':
        case '\'':
        case '"':
          value.push_back(e);
          break;
        case 'a':
          value.push_back('\a');
          break;
        case 'b':
          value.push_back('\b');
          break;
        case 'f':
          value.push_back('\f');
          break;
        case 'n':
          value.push_back('\n');
          break;
        case 'r':
          value.push_back('\r');
          break;
        case 't':
          value.push_back('\t');
          break;
        case 'v':
          value.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + digits > src_.size()) {
            return Error(pos, absl::StrCat("truncated \\", std::string(1, e),
                                           " escape in a string literal"));
          }
          uint32_t cp = 0;
          for (size_t k = 0; k < digits; ++k) {
            const char h = src_[i + k];
            if (!absl::ascii_isxdigit(static_cast<unsigned char>(h))) {
              return Error(pos, absl::StrCat("truncated \\", std::string(1, e),
                                             " escape in a string literal"));
            }
            cp = cp * 16 + (absl::ascii_isdigit(static_cast<unsigned char>(h))
                                ? h - '0'
                                : absl::ascii_tolower(h) - 'a' + 10);
          }
          i += digits;
          if (cp > 0x10FFFF) {
            return Error(pos, "illegal Unicode character in a string literal");
          }
          if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
          tokenizer::AppendUtf8(cp, &value);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = e - '0';
            for (int k = 0;
                 k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7';
                 ++k) {
              cp = cp * 8 + (src_[i++] - '0');
            }
            tokenizer::AppendUtf8(cp, &value);
          } else {
            // Python keeps unknown escapes as written.
            value.push_back('\\');
            --i;
          }
      }
    }
    tokens_.push_back(
        Token{Token::Type::kString, std::move(value), 0, 0, LineAt(pos)});
    return i + 1;
  }

  // \d+(_\d+)* from `pos`; returns its end.
  size_t Digits(size_t pos) const {
    const auto digit = [&](size_t i) {
      return i < src_.size() &&
             absl::ascii_isdigit(static_cast<unsigned char>(src_[i]));
    };
    size_t p = pos;
    while (digit(p)) ++p;
    while (src_.compare(p, 1, "_") == 0 && digit(p + 1)) {
      ++p;
      while (digit(p)) ++p;
    }
    return p;
  }

  size_t LexNumber(size_t pos) {
    const int line = LineAt(pos);
    size_t end = Digits(pos);
    bool is_float = false;
    // A float is not lexed right after a '.', so that x.0.1 is two
    // subscripts.
    if (pos == 0 || src_[pos - 1] != '.') {
      size_t p = end;
      if (p + 1 < src_.size() && src_[p] == '.' &&
          absl::ascii_isdigit(static_cast<unsigned char>(src_[p + 1]))) {
        p = Digits(p + 1);
        is_float = true;
      }
      if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
        size_t q = p + 1;
        if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
        if (q < src_.size() &&
            absl::ascii_isdigit(static_cast<unsigned char>(src_[q]))) {
          p = Digits(q);
          is_float = true;
        }
      }
      if (is_float) end = p;
    }
    std::string text;
    for (size_t i = pos; i < end; ++i) {
      if (src_[i] != '_') text.push_back(src_[i]);
    }
    Token token{is_float ? Token::Type::kFloat : Token::Type::kInteger, text, 0,
                0, line};
    if (is_float) {
      token.number = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      const long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) {
        // Python's ints are unbounded; past int64 the nearest float is what
        // this interpreter can offer.
        token.type = Token::Type::kFloat;
        token.number = std::strtod(text.c_str(), nullptr);
      } else {
        token.integer = v;
      }
    }
    tokens_.push_back(std::move(token));
    return end;
  }

  const std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(absl::string_view source) {
  return Lexer(NormalizeNewlines(source)).Run();
}

}  // namespace ringmoe::jinja

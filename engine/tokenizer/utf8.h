#ifndef RINGMOE_ENGINE_TOKENIZER_UTF8_H_
#define RINGMOE_ENGINE_TOKENIZER_UTF8_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace ringmoe::tokenizer {

// Length of the well-formed UTF-8 sequence starting at text[pos], or 0 when
// the bytes there are not one. On 0, *invalid_length (if given) receives the
// length of the maximal invalid subpart (Unicode 15, section 3.9 / WHATWG),
// which is the unit that one U+FFFD replaces.
size_t Utf8SequenceLength(absl::string_view text, size_t pos,
                          size_t* invalid_length = nullptr);

bool IsValidUtf8(absl::string_view text);

// `bytes` as UTF-8, with one U+FFFD per maximal invalid subpart (what Rust's
// String::from_utf8_lossy and WHATWG's TextDecoder produce).
std::string LossyUtf8(absl::string_view bytes);

// Decodes the code point of the well-formed sequence at text[pos].
char32_t DecodeUtf8At(absl::string_view text, size_t pos, size_t length);

void AppendUtf8(char32_t code_point, std::string* out);

inline constexpr absl::string_view kReplacementCharacter = "\xEF\xBF\xBD";

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_UTF8_H_

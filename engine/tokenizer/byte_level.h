#ifndef RINGMOE_ENGINE_TOKENIZER_BYTE_LEVEL_H_
#define RINGMOE_ENGINE_TOKENIZER_BYTE_LEVEL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace ringmoe::tokenizer {

// GPT-2's bytes_to_unicode alphabet, in which byte-level BPE vocabularies are
// written: printable Latin-1 bytes stand for themselves and the other 68 bytes
// map, in byte order, to U+0100, U+0101, ... (so ' ' is 'Ġ', '\n' is 'Ċ').

// Appends `bytes` written in the alphabet.
void AppendByteLevel(absl::string_view bytes, std::string* out);

// Appends the bytes that `token` stands for. Returns false, appending
// nothing, when `token` has a character outside the alphabet (an added token
// such as DeepSeek's "<｜begin▁of▁sentence｜>").
bool AppendFromByteLevel(absl::string_view token, std::string* out);

}  // namespace ringmoe::tokenizer

#endif  // RINGMOE_ENGINE_TOKENIZER_BYTE_LEVEL_H_

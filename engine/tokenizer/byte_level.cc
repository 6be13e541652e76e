#include "engine/tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "engine/tokenizer/utf8.h"

namespace ringmoe::tokenizer {
namespace {

// Every mapped character is below U+0144.
constexpr char32_t kAlphabetEnd = 0x144;

struct Alphabet {
  std::array<std::string, 256> encoded;
  // Byte for each character of the alphabet, -1 for the others.
  std::array<int16_t, kAlphabetEnd> decoded;
};

const Alphabet& GetAlphabet() {
  static const Alphabet* const alphabet = [] {
    auto* a = new Alphabet;
    a->decoded.fill(-1);
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next_extra++;
      AppendUtf8(cp, &a->encoded[b]);
      a->decoded[cp] = static_cast<int16_t>(b);
    }
    return a;
  }();
  return *alphabet;
}

}  // namespace

void AppendByteLevel(absl::string_view bytes, std::string* out) {
  const Alphabet& alphabet = GetAlphabet();
  for (const char c : bytes) {
    out->append(alphabet.encoded[static_cast<uint8_t>(c)]);
  }
}

bool AppendFromByteLevel(absl::string_view token, std::string* out) {
  const Alphabet& alphabet = GetAlphabet();
  const size_t old_size = out->size();
  for (size_t pos = 0; pos < token.size();) {
    const size_t length = Utf8SequenceLength(token, pos);
    const char32_t cp =
        length == 0 ? kAlphabetEnd : DecodeUtf8At(token, pos, length);
    if (cp >= kAlphabetEnd || alphabet.decoded[cp] < 0) {
      out->resize(old_size);
      return false;
    }
    out->push_back(static_cast<char>(alphabet.decoded[cp]));
    pos += length;
  }
  return true;
}

}  // namespace ringmoe::tokenizer

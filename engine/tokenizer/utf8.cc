#include "engine/tokenizer/utf8.h"

#include <cstdint>

namespace ringmoe::tokenizer {

size_t Utf8SequenceLength(absl::string_view text, size_t pos,
                          size_t* invalid_length) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t lead = byte(pos);
  if (lead < 0x80) return 1;
  size_t length = 0;
  // The second byte's range is narrower than 80..BF for some leads: that is
  // what rules out overlong forms, surrogates and code points past U+10FFFF.
  uint8_t second_min = 0x80, second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) second_min = 0xA0;
    if (lead == 0xED) second_max = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) second_min = 0x90;
    if (lead == 0xF4) second_max = 0x8F;
  }
  size_t good = length == 0 ? 0 : 1;
  for (size_t i = 1; i < length && pos + i < text.size(); ++i) {
    const uint8_t b = byte(pos + i);
    const uint8_t min = i == 1 ? second_min : 0x80;
    const uint8_t max = i == 1 ? second_max : 0xBF;
    if (b < min || b > max) break;
    ++good;
  }
  if (length != 0 && good == length) return length;
  if (invalid_length != nullptr) *invalid_length = good == 0 ? 1 : good;
  return 0;
}

bool IsValidUtf8(absl::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = Utf8SequenceLength(text, pos);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

std::string LossyUtf8(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    size_t invalid = 0;
    const size_t length = Utf8SequenceLength(bytes, pos, &invalid);
    if (length != 0) {
      out.append(bytes.data() + pos, length);
      pos += length;
    } else {
      out.append(kReplacementCharacter.data(), kReplacementCharacter.size());
      pos += invalid;
    }
  }
  return out;
}

char32_t DecodeUtf8At(absl::string_view text, size_t pos, size_t length) {
  const auto byte = [&](size_t i) {
    return static_cast<char32_t>(static_cast<uint8_t>(text[pos + i]));
  };
  switch (length) {
    case 1:
      return byte(0);
    case 2:
      return ((byte(0) & 0x1F) << 6) | (byte(1) & 0x3F);
    case 3:
      return ((byte(0) & 0x0F) << 12) | ((byte(1) & 0x3F) << 6) |
             (byte(2) & 0x3F);
    default:
      return ((byte(0) & 0x07) << 18) | ((byte(1) & 0x3F) << 12) |
             ((byte(2) & 0x3F) << 6) | (byte(3) & 0x3F);
  }
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace ringmoe::tokenizer

// libFuzzer target: arbitrary bytes as a tokenizer.json, optionally followed
// by a NUL byte and a tokenizer_config.json; a tokenizer that loads encodes
// and decodes a few fixed strings and ids.
//
// Tokenizer has only a file API (the loader reads tokenizer_config.json
// beside the file), so the input is written to a directory of this process
// first; the cost is two small writes per run. Inputs over 1 MB are skipped
// to keep runs fast: size limits are not what this target looks for.
//
// Checked: no crash or sanitizer report; rejections name the file; encoded
// ids lie in [0, vocab_size); decoded text is valid UTF-8, as promised.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace {

using ::ringmoe::tokenizer::IsValidUtf8;
using ::ringmoe::tokenizer::Tokenizer;

constexpr size_t kMaxInputBytes = 1 << 20;

[[noreturn]] void Fail(const char* what, absl::string_view detail = "") {
  std::fprintf(stderr, "tokenizer fuzzer: %s %.*s\n", what,
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// A private directory, removed when the process exits normally.
const std::string& Directory() {
  static const std::string* dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() /
                           "ringmoe-tokenizer-fuzz-XXXXXX")
                              .string();
    if (mkdtemp(pattern.data()) == nullptr) Fail("cannot create a directory");
    auto* path = new std::string(pattern);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(Directory(), ec);
    });
    return path;
  }();
  return *dir;
}

void Write(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) Fail("cannot write", path);
}

void CheckText(const Tokenizer& tokenizer, std::string_view text) {
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = tokenizer.Encode(text, special);
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) {
        Fail("encoded an id outside the vocabulary");
      }
    }
    for (bool skip : {false, true}) {
      if (!IsValidUtf8(tokenizer.Decode(ids, skip))) {
        Fail("decoded invalid UTF-8");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kMaxInputBytes) return -1;
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string json_path = Directory() + "/tokenizer.json";
  const std::string config_path = Directory() + "/tokenizer_config.json";
  Write(json_path, input.substr(0, nul));
  if (nul == absl::string_view::npos) {
    std::filesystem::remove(config_path);
  } else {
    Write(config_path, input.substr(nul + 1));
  }

  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::FromFile(json_path);
  if (!tokenizer.ok()) {
    if (!absl::StrContains(tokenizer.status().message(), Directory())) {
      Fail("error does not name the file:", tokenizer.status().message());
    }
    return 0;
  }
  const Tokenizer& t = **tokenizer;
  for (std::string_view text :
       {std::string_view(""), std::string_view("Hello, world!"),
        std::string_view(" 12345  a\tb\r\n\n<s></s><|im_start|>"),
        std::string_view("naïve 日本語 🙂 ▁x"),
        std::string_view("\xff\xfe\xc3 broken \xe2\x82")}) {
    CheckText(t, text);
  }
  const int32_t vocab = t.vocab_size();
  const std::vector<int32_t> odd_ids = {0,
                                        1,
                                        2,
                                        vocab - 1,
                                        vocab,
                                        -1,
                                        std::numeric_limits<int32_t>::max(),
                                        std::numeric_limits<int32_t>::min()};
  for (bool skip : {false, true}) {
    if (!IsValidUtf8(t.Decode(odd_ids, skip))) Fail("decoded invalid UTF-8");
  }
  for (int32_t id : odd_ids) {
    const std::string token = t.IdToToken(id);
    if (!token.empty()) t.TokenToId(token);
  }
  return 0;
}

#include "tests/fuzz/replay.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace ringmoe::fuzz {
namespace {

struct Seed {
  std::string name;
  std::string bytes;
};

bool Collect(const std::string& arg, std::vector<Seed>* seeds) {
  std::error_code ec;
  std::vector<std::filesystem::path> paths;
  if (std::filesystem::is_directory(arg, ec)) {
    for (const auto& entry : std::filesystem::directory_iterator(arg, ec)) {
      if (entry.is_regular_file(ec)) paths.push_back(entry.path());
    }
    if (ec) return false;
  } else {
    paths.push_back(arg);
  }
  std::sort(paths.begin(), paths.end());
  for (const auto& path : paths) {
    absl::StatusOr<std::string> bytes = ReadFileToString(path.string());
    if (!bytes.ok()) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return false;
    }
    seeds->push_back({path.filename().string(), *std::move(bytes)});
  }
  return true;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  c = absl::ascii_tolower(c);
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void Run(const std::string& bytes, const std::string& save_path) {
  if (!save_path.empty()) {
    // Written before the call: if the target aborts, this is the input.
    std::ofstream out(save_path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size());
}

}  // namespace

std::vector<std::string> ParseDictionary(absl::string_view text) {
  std::vector<std::string> tokens;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t open = line.find('"');
    if (open == absl::string_view::npos || line.back() != '"' ||
        open + 1 >= line.size()) {
      continue;
    }
    const absl::string_view body =
        line.substr(open + 1, line.size() - open - 2);
    std::string token;
    for (size_t i = 0; i < body.size(); ++i) {
      if (body[i] != '\\' || i + 1 >= body.size()) {
        token += body[i];
      } else if (body[i + 1] == 'x' && i + 3 < body.size() &&
                 HexDigit(body[i + 2]) >= 0 && HexDigit(body[i + 3]) >= 0) {
        token += static_cast<char>(HexDigit(body[i + 2]) * 16 +
                                   HexDigit(body[i + 3]));
        i += 3;
      } else {
        token += body[++i];
      }
    }
    tokens.push_back(std::move(token));
  }
  return tokens;
}

void MutateOnce(std::string& s, const std::vector<std::string>& tokens,
                const std::vector<std::string>& seeds, std::mt19937_64& rng) {
  const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
  switch (rng() % 8) {
    case 0:  // flip a bit
      if (!s.empty()) {
        s[rng() % s.size()] ^= static_cast<char>(1 << (rng() % 8));
      }
      break;
    case 1:  // random byte
      if (!s.empty()) s[rng() % s.size()] = static_cast<char>(rng());
      break;
    case 2:  // erase a range
      if (pos < s.size()) {
        s.erase(pos, 1 + rng() % std::min<size_t>(16, s.size() - pos));
      }
      break;
    case 3:  // duplicate a range
      if (pos < s.size()) s.insert(pos, s.substr(pos, 1 + rng() % 32));
      break;
    case 4:  // insert a dictionary token
      if (!tokens.empty()) s.insert(pos, tokens[rng() % tokens.size()]);
      break;
    case 5: {  // change a digit: numbers are where limits are checked
      std::vector<size_t> digits;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] >= '0' && s[i] <= '9') digits.push_back(i);
      }
      if (!digits.empty()) {
        s[digits[rng() % digits.size()]] = static_cast<char>('0' + rng() % 10);
      }
      break;
    }
    case 6:  // truncate
      s.resize(pos);
      break;
    case 7: {  // splice with a seed
      const std::string& other = seeds[rng() % seeds.size()];
      const size_t cut = other.empty() ? 0 : rng() % other.size();
      s = s.substr(0, pos) + other.substr(cut);
      break;
    }
  }
}

int ReplayMain(int argc, char** argv, const ReplayTarget& target) {
  int64_t mutations = target.mutations;
  uint64_t rng_seed = 20240601;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (absl::StartsWith(arg, "--mutations=")) {
      if (!absl::SimpleAtoi(arg.substr(12), &mutations)) return 2;
    } else if (absl::StartsWith(arg, "--seed=")) {
      if (!absl::SimpleAtoi(arg.substr(7), &rng_seed)) return 2;
    } else {
      paths.emplace_back(arg);
    }
  }
  if (paths.empty()) {
    paths.push_back(absl::StrCat("tests/fuzz/corpus/", target.name));
  }

  std::vector<Seed> seeds;
  for (const std::string& path : paths) {
    if (!Collect(path, &seeds)) return 1;
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds found\n");
    return 1;
  }
  std::vector<std::string> tokens;
  if (absl::StatusOr<std::string> dict =
          ReadFileToString(absl::StrCat("tests/fuzz/", target.name, ".dict"));
      dict.ok()) {
    tokens = ParseDictionary(*dict);
  }

  int failures = 0;
  std::vector<std::string> seed_bytes;
  for (const Seed& seed : seeds) {
    Run(seed.bytes, /*save_path=*/"");
    seed_bytes.push_back(seed.bytes);
    if (!target.accepts) continue;
    const bool ok = target.accepts(seed.bytes);
    if ((absl::StartsWith(seed.name, "valid_") && !ok) ||
        (absl::StartsWith(seed.name, "invalid_") && ok)) {
      std::fprintf(
          stderr, "seed %s: %s\n", seed.name.c_str(),
          ok ? "accepted but named invalid_" : "rejected but named valid_");
      ++failures;
    }
  }

  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const std::string save_path = absl::StrCat(
      dir != nullptr ? dir : "/tmp", "/", target.name, "_fuzz_current_input");
  std::mt19937_64 rng(rng_seed);
  int64_t accepted = 0;
  for (int64_t i = 0; i < mutations; ++i) {
    std::string input;
    if (target.mutate) {
      input = target.mutate(seed_bytes, tokens, rng);
    } else {
      input = seed_bytes[rng() % seed_bytes.size()];
      for (int r = 1 + static_cast<int>(rng() % 4); r > 0; --r) {
        MutateOnce(input, tokens, seed_bytes, rng);
      }
    }
    Run(input, save_path);
    if (target.accepts) accepted += target.accepts(input);
  }
  std::printf("%zu seeds, %lld mutations", seeds.size(),
              static_cast<long long>(mutations));
  if (target.accepts) {
    std::printf(" (%lld accepted)", static_cast<long long>(accepted));
  }
  std::printf(", %d seed failures\n", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace ringmoe::fuzz

// Runs the fuzz target without libFuzzer, so CI (gcc, Bazel) exercises it:
// over the seed corpus, then over deterministic random mutations of it.
//
//   replay [--mutations=N] [--seed=S] [FILE_OR_DIR...]
//
// With no paths it reads tests/fuzz/corpus/safetensors (relative to the
// runfiles root). Seeds named valid_* must parse and invalid_* must not.
// A crash or abort inside the target fails the test; the mutated input is
// written to $TEST_UNDECLARED_OUTPUTS_DIR (or /tmp) first so it can be
// replayed alone.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "engine/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

constexpr char kDefaultCorpus[] = "tests/fuzz/corpus/safetensors";

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
    Seed seed;
    seed.name = path.filename().string();
    absl::StatusOr<std::string> bytes =
        ringmoe::ReadFileToString(path.string());
    if (!bytes.ok()) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      return false;
    }
    seed.bytes = *std::move(bytes);
    seeds->push_back(std::move(seed));
  }
  return true;
}

// Tokens the header grammar cares about; splicing them in reaches deeper
// checks than random bytes would.
const char* const kTokens[] = {
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\u0000",
    "\"dtype\"",
    "\"shape\"",
    "\"data_offsets\"",
    "\"__metadata__\"",
    "\"F32\"",
    "\"BF16\"",
    "\"I32\"",
    "\"U8\"",
    "\"F64\"",
    "\"F8_E4M3\"",
    "null",
    "true",
    "-1",
    "0",
    "1.5",
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "9223372036854775807",
    "1e400",
    " ",
    "\"w\"",
};

uint64_t Interesting(std::mt19937_64& rng, uint64_t size) {
  const uint64_t values[] = {0,
                             1,
                             size,
                             size - 8,
                             size - 7,
                             size - 9,
                             uint64_t{1} << 63,
                             ~uint64_t{0},
                             100ull << 20,
                             (100ull << 20) + 1};
  return values[rng() % std::size(values)];
}

// One random edit of `s`. Edits 5 (the length prefix) and 8 (splicing) only
// make sense on whole files.
void MutateOnce(std::string& s, const std::vector<Seed>& seeds,
                std::mt19937_64& rng, bool whole_file) {
  const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
  switch (rng() % (whole_file ? 9 : 8)) {
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
    case 4:  // insert a grammar token
      s.insert(pos, kTokens[rng() % std::size(kTokens)]);
      break;
    case 5: {  // nudge a digit
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
    case 7: {  // rewrite the length prefix
      if (!whole_file) break;
      if (s.size() < 8) s.resize(8, '\0');
      const uint64_t n = Interesting(rng, s.size());
      std::memcpy(s.data(), &n, sizeof(n));
      break;
    }
    case 8: {  // splice with another seed
      const std::string& other = seeds[rng() % seeds.size()].bytes;
      const size_t cut = other.empty() ? 0 : rng() % other.size();
      s = s.substr(0, pos) + other.substr(cut);
      break;
    }
  }
}

std::string Mutate(const std::vector<Seed>& seeds, std::mt19937_64& rng) {
  std::string s = seeds[rng() % seeds.size()].bytes;
  const int rounds = 1 + static_cast<int>(rng() % 4);
  uint64_t header_size = 0;
  if (s.size() >= 8) std::memcpy(&header_size, s.data(), 8);
  // Half the time edit only the JSON and keep the prefix consistent, so the
  // input gets past the length checks to the header's semantics.
  if (rng() % 2 == 0 && s.size() >= 8 && header_size <= s.size() - 8) {
    std::string header = s.substr(8, header_size);
    for (int r = 0; r < rounds; ++r) {
      MutateOnce(header, seeds, rng, /*whole_file=*/false);
    }
    const uint64_t n = header.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &n, sizeof(n));
    return out + header + s.substr(8 + header_size);
  }
  for (int r = 0; r < rounds; ++r) {
    MutateOnce(s, seeds, rng, /*whole_file=*/true);
  }
  return s;
}

std::string CrashPath() {
  const char* dir = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp",
                      "/safetensors_fuzz_current_input");
}

void Run(const std::string& bytes, bool save) {
  if (save) {
    // Written before the call: if the target aborts, this is the input.
    std::ofstream out(CrashPath(), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()),
                         bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t mutations = 4000;
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
  if (paths.empty()) paths.push_back(kDefaultCorpus);

  std::vector<Seed> seeds;
  for (const std::string& path : paths) {
    if (!Collect(path, &seeds)) return 1;
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds found\n");
    return 1;
  }

  int failures = 0;
  for (const Seed& seed : seeds) {
    Run(seed.bytes, /*save=*/false);
    const bool ok =
        ringmoe::checkpoint::ParseSafetensorsBuffer(seed.bytes, seed.name).ok();
    if ((absl::StartsWith(seed.name, "valid_") && !ok) ||
        (absl::StartsWith(seed.name, "invalid_") && ok)) {
      std::fprintf(
          stderr, "seed %s: %s\n", seed.name.c_str(),
          ok ? "accepted but named invalid_" : "rejected but named valid_");
      ++failures;
    }
  }

  std::mt19937_64 rng(rng_seed);
  int64_t accepted = 0;
  for (int64_t i = 0; i < mutations; ++i) {
    const std::string input = Mutate(seeds, rng);
    Run(input, /*save=*/true);
    accepted += ringmoe::checkpoint::ParseSafetensorsBuffer(input, "m").ok();
  }
  std::printf("%zu seeds, %lld mutations (%lld accepted), %d seed failures\n",
              seeds.size(), static_cast<long long>(mutations),
              static_cast<long long>(accepted), failures);
  return failures == 0 ? 0 : 1;
}

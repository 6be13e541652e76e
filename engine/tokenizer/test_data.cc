#include "engine/tokenizer/test_data.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace ringmoe::tokenizer::testdata {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::abort();
}

std::string RunfilesRoot() {
  for (const char* variable : {"TEST_SRCDIR", "RUNFILES_DIR"}) {
    if (const char* value = std::getenv(variable); value && *value) {
      return value;
    }
  }
  std::error_code error;
  const fs::path exe = fs::read_symlink("/proc/self/exe", error);
  return exe.string() + ".runfiles";
}

}  // namespace

std::vector<std::string> AllNames() {
  return std::vector<std::string>(std::begin(kNames), std::end(kNames));
}

std::string GoldenDir(absl::string_view name) {
  return absl::StrCat(RunfilesRoot(), "/ringmoe/tests/testdata/tokenizers/",
                      name);
}

std::string TokenizerJsonPath(absl::string_view name) {
  std::error_code error;
  if (name != "gpt_oss") {
    const std::string path = GoldenDir(name) + "/tokenizer.json";
    return fs::exists(path, error) ? path : "";
  }
  if (const char* path = std::getenv("RINGMOE_GPT_OSS_TOKENIZER_JSON");
      path && *path) {
    return fs::exists(path, error) ? path : "";
  }
  // The runfiles link to the checkout's files; the shared data directory is
  // the checkout's sibling.
  const fs::path cases = fs::canonical(GoldenDir(name) + "/cases.jsonl", error);
  if (error) return "";
  const fs::path checkout = cases.parent_path()
                                .parent_path()
                                .parent_path()
                                .parent_path()
                                .parent_path();
  const fs::path path = checkout.parent_path() / "shared" / "testdata" /
                        "tokenizers" / "gpt_oss" / "tokenizer.json";
  return fs::exists(path, error) ? path.string() : "";
}

const Tokenizer* GetTokenizer(absl::string_view name) {
  static absl::Mutex mu(absl::kConstInit);
  static auto* loaded =
      new std::map<std::string, std::unique_ptr<Tokenizer>, std::less<>>;
  absl::MutexLock lock(&mu);
  if (const auto it = loaded->find(name); it != loaded->end()) {
    return it->second.get();
  }
  const std::string path = TokenizerJsonPath(name);
  std::unique_ptr<Tokenizer> tokenizer;
  if (!path.empty()) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> result =
        Tokenizer::FromFile(path);
    if (!result.ok()) Die(result.status().ToString());
    tokenizer = *std::move(result);
  }
  return loaded->emplace(std::string(name), std::move(tokenizer))
      .first->second.get();
}

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::ifstream file(path);
  if (!file) Die(absl::StrCat(path, ": cannot open"));
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(file, line)) {
    if (!line.empty()) lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

std::string HexToBytes(absl::string_view hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    int value = 0;
    if (!absl::SimpleHexAtoi(hex.substr(i, 2), &value)) {
      Die(absl::StrCat("bad hex: ", hex));
    }
    bytes.push_back(static_cast<char>(value));
  }
  return bytes;
}

}  // namespace ringmoe::tokenizer::testdata

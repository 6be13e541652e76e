// Replays the tokenizer.json fuzzer (see replay.h).
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/tokenizer/tokenizer.h"
#include "tests/fuzz/replay.h"

int main(int argc, char** argv) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / "tokenizer_replay").string();
  std::filesystem::create_directories(dir);
  ringmoe::fuzz::ReplayTarget target;
  target.name = "tokenizer";
  // Loading a real tokenizer costs milliseconds, not microseconds.
  target.mutations = 1500;
  target.accepts = [&dir](absl::string_view input) {
    const size_t nul = input.find('\0');
    const std::string json = dir + "/tokenizer.json";
    const std::string config = dir + "/tokenizer_config.json";
    std::ofstream(json, std::ios::binary | std::ios::trunc)
        << input.substr(0, nul);
    std::filesystem::remove(config);
    if (nul != absl::string_view::npos) {
      std::ofstream(config, std::ios::binary | std::ios::trunc)
          << input.substr(nul + 1);
    }
    return ringmoe::tokenizer::Tokenizer::FromFile(json).ok();
  };
  return ringmoe::fuzz::ReplayMain(argc, argv, target);
}

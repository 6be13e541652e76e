// Replays the safetensors fuzzer (see replay.h). Mutations know the format:
// half of them edit only the JSON header and rewrite the length prefix to
// match, so inputs get past the length checks to the header's semantics;
// the rest edit the whole file, sometimes writing a boundary value into the
// prefix.
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "engine/checkpoint/safetensors.h"
#include "tests/fuzz/replay.h"

namespace {

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

std::string Mutate(const std::vector<std::string>& seeds,
                   const std::vector<std::string>& tokens,
                   std::mt19937_64& rng) {
  std::string s = seeds[rng() % seeds.size()];
  const int rounds = 1 + static_cast<int>(rng() % 4);
  uint64_t header_size = 0;
  if (s.size() >= 8) std::memcpy(&header_size, s.data(), 8);
  if (rng() % 2 == 0 && s.size() >= 8 && header_size <= s.size() - 8) {
    std::string header = s.substr(8, header_size);
    // Splicing whole files into a header only adds noise: no seeds here.
    for (int r = 0; r < rounds; ++r) {
      ringmoe::fuzz::MutateOnce(header, tokens, {header}, rng);
    }
    const uint64_t n = header.size();
    std::string out(8, '\0');
    std::memcpy(out.data(), &n, sizeof(n));
    return out + header + s.substr(8 + header_size);
  }
  for (int r = 0; r < rounds; ++r) {
    if (rng() % 8 == 0) {
      if (s.size() < 8) s.resize(8, '\0');
      const uint64_t n = Interesting(rng, s.size());
      std::memcpy(s.data(), &n, sizeof(n));
    } else {
      ringmoe::fuzz::MutateOnce(s, tokens, seeds, rng);
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  ringmoe::fuzz::ReplayTarget target;
  target.name = "safetensors";
  target.accepts = [](absl::string_view input) {
    return ringmoe::checkpoint::ParseSafetensorsBuffer(input, "seed").ok();
  };
  target.mutate = Mutate;
  return ringmoe::fuzz::ReplayMain(argc, argv, target);
}

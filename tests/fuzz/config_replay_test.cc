// Replays the config.json fuzzer (see replay.h).
#include "engine/model/config.h"
#include "tests/fuzz/replay.h"

int main(int argc, char** argv) {
  ringmoe::fuzz::ReplayTarget target;
  target.name = "config";
  target.accepts = [](absl::string_view input) {
    return ringmoe::model::ParseModelConfig(input, "seed").ok();
  };
  return ringmoe::fuzz::ReplayMain(argc, argv, target);
}

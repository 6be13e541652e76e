// Replays the KServe request fuzzer (see replay.h).
#include "tests/fuzz/kserve_request_fuzzer.h"
#include "tests/fuzz/replay.h"

int main(int argc, char** argv) {
  ringmoe::fuzz::ReplayTarget target;
  target.name = "kserve_request";
  target.accepts = [](absl::string_view input) {
    return ringmoe::fuzz::ParseKServeInput(input).ok();
  };
  return ringmoe::fuzz::ReplayMain(argc, argv, target);
}

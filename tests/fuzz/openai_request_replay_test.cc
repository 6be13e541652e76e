// Replays the OpenAI request fuzzer (see replay.h).
#include "tests/fuzz/openai_request_fuzzer.h"
#include "tests/fuzz/replay.h"

int main(int argc, char** argv) {
  ringmoe::fuzz::ReplayTarget target;
  target.name = "openai_request";
  target.accepts = [](absl::string_view input) {
    return ringmoe::fuzz::ParseOpenAiInput(input).ok();
  };
  return ringmoe::fuzz::ReplayMain(argc, argv, target);
}

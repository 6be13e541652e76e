// Replays the chat template fuzzer (see replay.h).
#include "tests/fuzz/chat_template_fuzzer.h"
#include "tests/fuzz/replay.h"

int main(int argc, char** argv) {
  ringmoe::fuzz::ReplayTarget target;
  target.name = "chat_template";
  target.accepts = [](absl::string_view input) {
    return ringmoe::fuzz::RenderChatTemplateInput(input).ok();
  };
  return ringmoe::fuzz::ReplayMain(argc, argv, target);
}

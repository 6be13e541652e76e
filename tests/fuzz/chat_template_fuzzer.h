// What the chat template fuzzer does with one input, for its replay test.
#ifndef RINGMOE_TESTS_FUZZ_CHAT_TEMPLATE_FUZZER_H_
#define RINGMOE_TESTS_FUZZ_CHAT_TEMPLATE_FUZZER_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringmoe::fuzz {

// Parses and renders `input` (template, NUL, conversation JSON) under the
// fuzzer's small sandbox limits; aborts where an invariant breaks.
absl::StatusOr<std::string> RenderChatTemplateInput(absl::string_view input);

}  // namespace ringmoe::fuzz

#endif  // RINGMOE_TESTS_FUZZ_CHAT_TEMPLATE_FUZZER_H_

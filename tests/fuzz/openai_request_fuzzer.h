// What the OpenAI request fuzzer does with one input, for its replay test.
#ifndef RINGMOE_TESTS_FUZZ_OPENAI_REQUEST_FUZZER_H_
#define RINGMOE_TESTS_FUZZ_OPENAI_REQUEST_FUZZER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/openai_protocol.h"

namespace ringmoe::fuzz {

// Parses `input` (a selector byte, then the body) as the fuzzer does;
// aborts where an invariant breaks.
absl::StatusOr<server::openai::ApiRequest> ParseOpenAiInput(
    absl::string_view input);

}  // namespace ringmoe::fuzz

#endif  // RINGMOE_TESTS_FUZZ_OPENAI_REQUEST_FUZZER_H_

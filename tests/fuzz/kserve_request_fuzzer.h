// What the KServe request fuzzer does with one input, for its replay test.
#ifndef RINGMOE_TESTS_FUZZ_KSERVE_REQUEST_FUZZER_H_
#define RINGMOE_TESTS_FUZZ_KSERVE_REQUEST_FUZZER_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/kserve_request.h"

namespace ringmoe::fuzz {

// Decodes `input` as a serialized ModelInferRequest and checks it as the
// unary RPC does (and, for coverage, as the streaming RPC does); aborts
// where an invariant breaks. The unary result.
absl::StatusOr<server::InferJob> ParseKServeInput(absl::string_view input);

}  // namespace ringmoe::fuzz

#endif  // RINGMOE_TESTS_FUZZ_KSERVE_REQUEST_FUZZER_H_

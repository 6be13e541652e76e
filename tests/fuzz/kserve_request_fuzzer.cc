// libFuzzer target: bytes as a serialized KServe v2 ModelInferRequest,
// decoded by protobuf and checked by ParseInferRequest as the gRPC service
// does before anything is scheduled.
//
// A text_input request ends in PrepareRequest, which tokenizes the prompt
// with the served engine's tokenizer, so the target loads a real engine:
// tests/testdata/moe-adder (19 MB, loaded once per process, CPU, one
// thread), from the working directory (the runfiles root under Bazel, the
// repository root under tools/fuzz.sh). A fake engine would need a new
// public constructor, and skipping text requests would leave most of the
// parser (parameters, sampling_parameters JSON, tensors) unfuzzed; the cost
// is that the libFuzzer build compiles the engine's sources too.
//
// Checked: no crash or sanitizer report; failures are INVALID_ARGUMENT; an
// accepted request has a non-empty prompt (token rows for logits, each
// non-empty, or prompt ids for text) and names its outputs.
#include "tests/fuzz/kserve_request_fuzzer.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/runtime/engine.h"
#include "engine/serving/request_api.h"
#include "proto/grpc_service.pb.h"
#include "server/kserve_request.h"

namespace {

using ::ringmoe::server::InferJob;

[[noreturn]] void Fail(const char* what, absl::string_view detail = "") {
  std::fprintf(stderr, "kserve request fuzzer: %s %.*s\n", what,
               static_cast<int>(detail.size()), detail.data());
  std::abort();
}

const ringmoe::serving::ServedModel& Model() {
  static const ringmoe::serving::ServedModel* model = [] {
    ringmoe::runtime::EngineOptions options;
    options.model_dir = "tests/testdata/moe-adder";
    options.threads = 1;
    options.kv_cache_tokens = 256;
    absl::StatusOr<std::unique_ptr<ringmoe::runtime::Engine>> engine =
        ringmoe::runtime::Engine::Load(options);
    if (!engine.ok()) Fail("cannot load", engine.status().ToString());
    auto* served = new ringmoe::serving::ServedModel;
    served->name = "adder";
    served->engine = engine->release();
    return served;
  }();
  return *model;
}

absl::StatusOr<InferJob> Check(const inference::ModelInferRequest& request,
                               bool streaming_rpc) {
  absl::StatusOr<InferJob> job =
      ringmoe::server::ParseInferRequest(Model(), request, streaming_rpc);
  if (!job.ok()) {
    if (job.status().code() != absl::StatusCode::kInvalidArgument) {
      Fail("failure not INVALID_ARGUMENT:", job.status().ToString());
    }
    return job;
  }
  if (job->logits) {
    if (job->rows.empty()) Fail("logits request without rows");
    for (const auto& row : job->rows) {
      if (row.empty()) Fail("logits request with an empty row");
    }
  } else if (job->generation.prompt_ids.empty()) {
    Fail("text request with an empty prompt");
  }
  if (job->outputs.empty()) Fail("accepted without outputs");
  return job;
}

}  // namespace

namespace ringmoe::fuzz {

absl::StatusOr<server::InferJob> ParseKServeInput(absl::string_view input) {
  inference::ModelInferRequest request;
  if (!request.ParseFromArray(input.data(), static_cast<int>(input.size()))) {
    return absl::InvalidArgumentError("not a ModelInferRequest");
  }
  Check(request, /*streaming_rpc=*/true).IgnoreError();
  return Check(request, /*streaming_rpc=*/false);
}

}  // namespace ringmoe::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ringmoe::fuzz::ParseKServeInput(
      absl::string_view(reinterpret_cast<const char*>(data), size))
      .IgnoreError();
  return 0;
}

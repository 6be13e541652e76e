// KServe v2 ModelInferRequests checked and decoded, apart from the service
// that runs them: the inputs (input_ids -> logits, or text_input with its
// settings as parameters, input tensors or a vLLM-style
// sampling_parameters JSON), the outputs asked for, and the text prompt
// through the serving core's request API.
#ifndef RINGMOE_SERVER_KSERVE_REQUEST_H_
#define RINGMOE_SERVER_KSERVE_REQUEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/serving/request_api.h"
#include "engine/serving/scheduler.h"
#include "proto/grpc_service.pb.h"

namespace ringmoe::server {

// The one version of the served model.
inline constexpr char kModelVersion[] = "1";

// A ModelInferRequest, checked and decoded.
struct InferJob {
  std::string id;
  bool raw = false;                        // answer in raw_output_contents
  bool streaming_rpc = false;              // ModelStreamInfer
  bool logits = false;                     // input_ids -> logits
  std::vector<std::vector<int32_t>> rows;  // logits: one prompt per row
  serving::Request generation;  // text: prompt and settings, no callback
  bool stream = false;          // send text deltas as they come
  bool empty_final_response = false;
  std::vector<std::string> outputs;  // requested outputs, in order
};

// INVALID_ARGUMENT naming the tensor or parameter at fault.
absl::StatusOr<InferJob> ParseInferRequest(
    const serving::ServedModel& model,
    const inference::ModelInferRequest& request, bool streaming_rpc);

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_KSERVE_REQUEST_H_

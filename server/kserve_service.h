// inference.GRPCInferenceService (KServe v2 / Triton wire protocol) for the
// served model:
//   - `input_ids` INT32/INT64 [batch, seq] -> `logits` FP32 [batch, vocab]
//     at each row's last position (one prefill per row);
//   - `text_input` BYTES [1] -> `text_output` BYTES [1] (and, on request,
//     finish_reason, num_input_tokens, num_output_tokens, output_ids), with
//     sampling settings from request parameters, scalar input tensors
//     (max_tokens, temperature, ...) or a vLLM-style `sampling_parameters`
//     JSON tensor;
//   - ModelStreamInfer streams `text_output` deltas (Triton's decoupled
//     mode): the last response carries triton_final_response = true.
// A thin layer: the scheduler does the work.
#ifndef RINGMOE_SERVER_KSERVE_SERVICE_H_
#define RINGMOE_SERVER_KSERVE_SERVICE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/serving/request_api.h"
#include "engine/serving/scheduler.h"
#include "proto/grpc_service.grpc.pb.h"
#include "server/kserve_request.h"
#include "server/service_util.h"

namespace ringmoe::server {

// ModelStreamInfer is a raw method: its reactor parses each message itself,
// so that one that is not a valid ModelInferRequest is refused in the
// stream (INVALID_ARGUMENT, counted) and the stream goes on; through the
// typed API a bad message looks like the client's half-close and ends the
// stream OK, dropping the requests after it.
using KServeServiceBase =
    inference::GRPCInferenceService::WithCallbackMethod_ServerLive<
        inference::GRPCInferenceService::WithCallbackMethod_ServerReady<
            inference::GRPCInferenceService::WithCallbackMethod_ModelReady<
                inference::GRPCInferenceService::WithCallbackMethod_ServerMetadata<
                    inference::GRPCInferenceService::
                        WithCallbackMethod_ModelMetadata<
                            inference::GRPCInferenceService::
                                WithCallbackMethod_ModelInfer<
                                    inference::GRPCInferenceService::
                                        WithRawCallbackMethod_ModelStreamInfer<
                                            inference::GRPCInferenceService::
                                                Service>>>>>>>;

class KServeService final : public KServeServiceBase {
 public:
  KServeService(const serving::ServedModel& model, std::string server_version)
      : model_(model), server_version_(std::move(server_version)) {}

  grpc::ServerUnaryReactor* ServerLive(
      grpc::CallbackServerContext* context,
      const inference::ServerLiveRequest* request,
      inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(
      grpc::CallbackServerContext* context,
      const inference::ServerReadyRequest* request,
      inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(
      grpc::CallbackServerContext* context,
      const inference::ModelReadyRequest* request,
      inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(
      grpc::CallbackServerContext* context,
      const inference::ServerMetadataRequest* request,
      inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(
      grpc::CallbackServerContext* context,
      const inference::ModelMetadataRequest* request,
      inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(
      grpc::CallbackServerContext* context,
      const inference::ModelInferRequest* request,
      inference::ModelInferResponse* response) override;
  // Reads serialized ModelInferRequest messages, writes serialized
  // ModelStreamInferResponse messages.
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ModelStreamInfer(
      grpc::CallbackServerContext* context) override;

 private:
  bool ModelMatches(const std::string& name, const std::string& version) const;

  const serving::ServedModel model_;
  const std::string server_version_;
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_KSERVE_SERVICE_H_

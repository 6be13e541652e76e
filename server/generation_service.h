// ringmoe.v1.Generation over gRPC's callback API: a thin layer that turns
// requests into scheduler Requests and scheduler outputs into responses. No
// engine work runs on gRPC threads; tokenization (thread-safe, cheap) does.
#ifndef RINGMOE_SERVER_GENERATION_SERVICE_H_
#define RINGMOE_SERVER_GENERATION_SERVICE_H_

#include "absl/status/statusor.h"
#include "engine/serving/request_api.h"
#include "engine/serving/scheduler.h"
#include "proto/generation.grpc.pb.h"
#include "server/service_util.h"

namespace ringmoe::server {

// A scheduler Request from a GenerateRequest (through the serving core's
// request API), without the output callback. INVALID_ARGUMENT names the
// offending field.
absl::StatusOr<serving::Request> RequestFromProto(
    const serving::ServedModel& model, const v1::GenerateRequest& proto);

class GenerationService final : public v1::Generation::CallbackService {
 public:
  explicit GenerationService(const serving::ServedModel& model)
      : model_(model) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context,
      const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(
      grpc::CallbackServerContext* context,
      const v1::DetokenizeRequest* request,
      v1::DetokenizeResponse* response) override;
  grpc::ServerUnaryReactor* GetModelInfo(
      grpc::CallbackServerContext* context,
      const v1::GetModelInfoRequest* request,
      v1::GetModelInfoResponse* response) override;

 private:
  const serving::ServedModel model_;
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_GENERATION_SERVICE_H_

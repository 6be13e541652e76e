// ringmoe.v1.Generation over gRPC's callback API: a thin layer that turns
// requests into scheduler Requests and scheduler outputs into responses. No
// engine work runs on gRPC threads; tokenization (thread-safe, cheap) does.
#ifndef RINGMOE_SERVER_GENERATION_SERVICE_H_
#define RINGMOE_SERVER_GENERATION_SERVICE_H_

#include "absl/status/statusor.h"
#include "proto/generation.grpc.pb.h"
#include "server/scheduler.h"
#include "server/service_util.h"

namespace ringmoe::server {

// A scheduler Request from a GenerateRequest (tokenizing `text`), without
// the output callback. INVALID_ARGUMENT names the offending field.
absl::StatusOr<Request> RequestFromProto(const ServedModel& model,
                                         const v1::GenerateRequest& proto);

class GenerationService final : public v1::Generation::CallbackService {
 public:
  explicit GenerationService(const ServedModel& model) : model_(model) {}

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
  grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                        const char* method,
                                        const absl::Status& status);

  const ServedModel model_;
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_GENERATION_SERVICE_H_

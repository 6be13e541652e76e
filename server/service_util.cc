#include "server/service_util.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace ringmoe::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      serving::ServingMetrics* metrics,
                                      const char* method,
                                      const absl::Status& status) {
  if (metrics != nullptr) metrics->CountRequest(method, status.code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

absl::Time DeadlineOf(const grpc::CallbackServerContext& context) {
  const auto deadline = context.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

absl::StatusCode OutcomeCode(const grpc::CallbackServerContext& context,
                             grpc::StatusCode finished_with) {
  if (context.IsCancelled()) {
    return absl::Now() >= DeadlineOf(context)
               ? absl::StatusCode::kDeadlineExceeded
               : absl::StatusCode::kCancelled;
  }
  return static_cast<absl::StatusCode>(finished_with);
}

}  // namespace ringmoe::server

#include "server/service_util.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "engine/serving/request_api.h"

namespace ringmoe::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // The message travels in a trailer, whose size gRPC limits (8 KiB by
  // default): a longer one would reach the client as a metadata error
  // instead of the real one.
  constexpr size_t kMaxMessageBytes = 2048;
  // absl and gRPC share the canonical code numbers.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      serving::Quote(status.message(), kMaxMessageBytes));
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
  // Not context.IsCancelled(): it is also true when the client's cancel
  // crossed a final status already sent, which the client received.
  if (finished_with == grpc::StatusCode::CANCELLED &&
      absl::Now() >= DeadlineOf(context)) {
    return absl::StatusCode::kDeadlineExceeded;
  }
  return static_cast<absl::StatusCode>(finished_with);
}

std::function<void(grpc::StatusCode)> CountOutcome(
    serving::ServingMetrics* metrics,
    const grpc::CallbackServerContext* context, const char* method) {
  return [metrics, context, method](grpc::StatusCode code) {
    if (metrics != nullptr)
      metrics->CountRequest(method, OutcomeCode(*context, code));
  };
}

}  // namespace ringmoe::server

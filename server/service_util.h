// What the gRPC services share: status conversion and deadlines.
#ifndef RINGMOE_SERVER_SERVICE_UTIL_H_
#define RINGMOE_SERVER_SERVICE_UTIL_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/serving/serving_metrics.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace ringmoe::server {

// The same code; the message cut to 2 KiB (on a character boundary).
grpc::Status ToGrpcStatus(const absl::Status& status);

// Ends a unary call with `status`, counted in `metrics` (may be null) under
// `method`.
grpc::ServerUnaryReactor* FinishUnary(grpc::CallbackServerContext* context,
                                      serving::ServingMetrics* metrics,
                                      const char* method,
                                      const absl::Status& status);

// The call's deadline as absl::Time (InfiniteFuture when there is none).
absl::Time DeadlineOf(const grpc::CallbackServerContext& context);

// The status a finished call reports in ringmoe_requests_total: the one it
// was finished with (CANCELLED when the client cancelled before the final
// status went out), DEADLINE_EXCEEDED for a cancel at the call's deadline.
absl::StatusCode OutcomeCode(const grpc::CallbackServerContext& context,
                             grpc::StatusCode finished_with);

// A stream's StreamChannel on_finish: counts the call's OutcomeCode in
// `metrics` (may be null) under `method`. `context` must outlive the call.
std::function<void(grpc::StatusCode)> CountOutcome(
    serving::ServingMetrics* metrics,
    const grpc::CallbackServerContext* context, const char* method);

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_SERVICE_UTIL_H_

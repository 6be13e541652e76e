// What the gRPC services share: the served model and status conversion.
#ifndef RINGMOE_SERVER_SERVICE_UTIL_H_
#define RINGMOE_SERVER_SERVICE_UTIL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/runtime/engine.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/metrics.h"
#include "server/scheduler.h"

namespace ringmoe::server {

// The one model a server process serves, and the parts every service uses.
struct ServedModel {
  std::string name;
  const runtime::Engine* engine = nullptr;  // spec and tokenizer (read-only)
  Scheduler* scheduler = nullptr;           // all engine work goes here
  Metrics* metrics = nullptr;               // may be null
};

grpc::Status ToGrpcStatus(const absl::Status& status);

// OK when `requested` is empty or the served model's name; INVALID_ARGUMENT
// naming both otherwise.
absl::Status CheckModelName(const ServedModel& model,
                            absl::string_view requested);

// The call's deadline as absl::Time (InfiniteFuture when there is none).
absl::Time DeadlineOf(const grpc::CallbackServerContext& context);

// The status a finished call reports in ringmoe_requests_total: the one it
// was finished with, unless the client cancelled or the deadline passed.
absl::StatusCode OutcomeCode(const grpc::CallbackServerContext& context,
                             grpc::StatusCode finished_with);

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_SERVICE_UTIL_H_

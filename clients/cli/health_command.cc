// ringmoe health --server HOST:PORT [--service NAME] [--timeout_s S]: one
// grpc.health.v1.Health/Check call. Prints the serving status and exits 0
// only for SERVING, 1 for anything else (NOT_SERVING while draining, an
// unknown service, no answer in time): the contract of Docker's HEALTHCHECK,
// which is why the container image calls this rather than a Python client
// (the runtime image carries no Python gRPC).
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "clients/cli/cli_util.h"
#include "clients/cli/commands.h"
#include "grpcpp/grpcpp.h"
#include "proto/health.grpc.pb.h"

ABSL_DECLARE_FLAG(std::string, server);

ABSL_FLAG(std::string, service, "",
          "health: service to check; empty = the whole server.");
ABSL_FLAG(double, timeout_s, 5,
          "health: deadline for connecting and answering, in seconds.");

namespace ringmoe::cli {

int RunHealth() {
  const std::string server = absl::GetFlag(FLAGS_server);
  if (server.empty()) {
    return Fail("health", absl::InvalidArgumentError("--server is required"));
  }
  const double timeout_s = absl::GetFlag(FLAGS_timeout_s);
  if (!(timeout_s > 0)) {
    return Fail("health",
                absl::InvalidArgumentError("--timeout_s must be > 0"));
  }
  auto channel =
      grpc::CreateChannel(server, grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  // wait_for_ready: a server still binding its port counts against the
  // deadline instead of failing at once with UNAVAILABLE.
  context.set_wait_for_ready(true);
  context.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::microseconds(static_cast<int64_t>(timeout_s * 1e6)));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(absl::GetFlag(FLAGS_service));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    std::fprintf(stderr, "ringmoe health: %s: %s\n",
                 absl::StatusCodeToString(
                     static_cast<absl::StatusCode>(status.error_code()))
                     .c_str(),
                 status.error_message().c_str());
    return 1;
  }
  std::printf("%s\n", grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                          response.status())
                          .c_str());
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? 0
             : 1;
}

}  // namespace ringmoe::cli

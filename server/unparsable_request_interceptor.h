// Requests whose bytes are not a valid message of their method (garbage,
// invalid UTF-8 in a string field) never reach a service: gRPC fails them
// itself with UNIMPLEMENTED and no message, and nothing counts them. This
// interceptor gives the client INVALID_ARGUMENT naming the problem and
// counts the call in ringmoe_requests_total under its method, like every
// other outcome.
//
// It covers methods whose request is one message read before the handler
// runs (unary and server streaming). Messages of a bidirectional stream are
// parsed by the stream's own reactor (KServe ModelStreamInfer).
#ifndef RINGMOE_SERVER_UNPARSABLE_REQUEST_INTERCEPTOR_H_
#define RINGMOE_SERVER_UNPARSABLE_REQUEST_INTERCEPTOR_H_

#include <memory>

#include "engine/serving/serving_metrics.h"
#include "grpcpp/support/server_interceptor.h"

namespace ringmoe::server {

// For grpc::ServerBuilder::experimental().SetInterceptorCreators.
// `metrics` (may be null) must outlive the server.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
UnparsableRequestInterceptorFactory(serving::ServingMetrics* metrics);

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_UNPARSABLE_REQUEST_INTERCEPTOR_H_

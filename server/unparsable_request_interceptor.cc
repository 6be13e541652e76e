#include "server/unparsable_request_interceptor.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ringmoe::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

class UnparsableRequestInterceptor final
    : public grpc::experimental::Interceptor {
 public:
  UnparsableRequestInterceptor(grpc::experimental::ServerRpcInfo* info,
                               serving::ServingMetrics* metrics)
      : info_(info), metrics_(metrics) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      unparsable_ = true;
    }
    if (unparsable_ && methods->QueryInterceptionHookPoint(
                           InterceptionHookPoints::PRE_SEND_STATUS)) {
      // "/package.Service/Method": the method's name as the services count it.
      absl::string_view method = info_->method();
      method = method.substr(method.rfind('/') + 1);
      methods->ModifySendStatus(grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("the request is not a valid message for ", method,
                       ": bad protobuf wire format, or a string field that "
                       "is not UTF-8")));
      if (metrics_ != nullptr) {
        metrics_->CountRequest(method, absl::StatusCode::kInvalidArgument);
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* const info_;
  serving::ServingMetrics* const metrics_;
  bool unparsable_ = false;
};

class Factory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(serving::ServingMetrics* metrics) : metrics_(metrics) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // Bidirectional streams read many messages and end on a failed read:
    // their reactor parses for itself.
    if (info->type() ==
            grpc::experimental::ServerRpcInfo::Type::BIDI_STREAMING ||
        info->type() ==
            grpc::experimental::ServerRpcInfo::Type::CLIENT_STREAMING) {
      return nullptr;
    }
    return new UnparsableRequestInterceptor(info, metrics_);
  }

 private:
  serving::ServingMetrics* const metrics_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
UnparsableRequestInterceptorFactory(serving::ServingMetrics* metrics) {
  return std::make_unique<Factory>(metrics);
}

}  // namespace ringmoe::server

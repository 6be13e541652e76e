#include "server/open_calls.h"

#include "absl/strings/match.h"

namespace ringmoe::server {

// Lives as long as its call: gRPC deletes a call's interceptors with the
// call's context, after its last operation.
class OpenCallCounter final : public grpc::experimental::Interceptor {
 public:
  explicit OpenCallCounter(OpenCalls* calls) : calls_(calls) { calls_->Add(1); }
  ~OpenCallCounter() override { calls_->Add(-1); }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    methods->Proceed();
  }

 private:
  OpenCalls* const calls_;
};

namespace {

class Factory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(OpenCalls* calls) : calls_(calls) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    // "/grpc.health.v1.Health/Watch", "/grpc.reflection.…": gRPC's own.
    const char* method = info->method();
    if (method != nullptr && absl::StartsWith(method, "/grpc.")) {
      return nullptr;
    }
    return new OpenCallCounter(calls_);
  }

 private:
  OpenCalls* const calls_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
OpenCalls::InterceptorFactory() {
  return std::make_unique<Factory>(this);
}

void OpenCalls::Add(int64_t delta) {
  absl::MutexLock lock(&mu_);
  count_ += delta;
}

bool OpenCalls::NoneLocked() const { return count_ == 0; }

int64_t OpenCalls::count() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

bool OpenCalls::WaitUntilNone(absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithTimeout(absl::Condition(this, &OpenCalls::NoneLocked),
                              timeout);
}

}  // namespace ringmoe::server

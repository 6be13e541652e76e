// Counts this server's own gRPC calls (generation, KServe) from their start
// to their end, so that a shutdown knows when every answer has been
// delivered.
//
// A request the scheduler has finished may still be on its way: its last
// messages queued for a slow reader, or a stream whose client has not
// half-closed. gRPC's Shutdown refuses every new call (health checks
// included, with CANCELLED) from the moment it starts, so the drain waits
// for these calls first, with health answering NOT_SERVING and new work
// refused as UNAVAILABLE meanwhile.
//
// gRPC's own services (grpc.health.v1, reflection) are not counted: a
// load balancer that watches health must not hold the drain.
#ifndef RINGMOE_SERVER_OPEN_CALLS_H_
#define RINGMOE_SERVER_OPEN_CALLS_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/support/server_interceptor.h"

namespace ringmoe::server {

class OpenCalls {
 public:
  // For grpc::ServerBuilder::experimental().SetInterceptorCreators: counts
  // each call from its creation to the end of its context. `this` must
  // outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  InterceptorFactory();

  int64_t count() const;
  // True once no call is open, within `timeout`.
  bool WaitUntilNone(absl::Duration timeout) const;

 private:
  friend class OpenCallCounter;
  void Add(int64_t delta);
  bool NoneLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_OPEN_CALLS_H_

// Delivers responses produced on the engine thread to a gRPC callback-API
// reactor, one write at a time, and finishes the call once they are out.
//
// The engine thread must never block on a slow client, so responses queue
// here (optionally merged into the last queued one). The reactor may be gone
// (client cancelled, call done) while the scheduler still holds the
// channel: after Detach() everything pushed is dropped, so the engine never
// touches a deleted reactor.
#ifndef RINGMOE_SERVER_STREAM_CHANNEL_H_
#define RINGMOE_SERVER_STREAM_CHANNEL_H_

#include <deque>
#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/status.h"

namespace ringmoe::server {

// Reactor: grpc::ServerWriteReactor<Response> or
// grpc::ServerBidiReactor<Request, Response> (StartWrite and Finish).
template <typename Reactor, typename Response>
class StreamChannel {
 public:
  // Folds `next` into `last` (a queued, not yet written response) and
  // returns true, or returns false to queue `next` separately.
  using MergeFn = std::function<bool(Response& last, const Response& next)>;

  StreamChannel(Reactor* reactor, MergeFn merge = nullptr)
      : reactor_(reactor), merge_(std::move(merge)) {}

  void Push(Response response) {
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr || finish_requested_) return;
    if (!(merge_ && !pending_.empty() && merge_(pending_.back(), response))) {
      pending_.push_back(std::move(response));
    }
    PumpLocked();
  }

  // Finishes the call with `status` once the queued responses are written.
  // Later calls (and pushes) are ignored.
  void Finish(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    if (finish_requested_) return;
    finish_requested_ = true;
    status_ = std::move(status);
    PumpLocked();
  }

  // Finishes as soon as the write in flight (if any) completes, dropping the
  // queue: the client is gone or the call was cancelled.
  void Abort(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    pending_.clear();
    if (finish_requested_) return;
    finish_requested_ = true;
    status_ = std::move(status);
    PumpLocked();
  }

  // The reactor's OnWriteDone.
  void OnWriteDone(bool ok) {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      pending_.clear();
      if (!finish_requested_) {
        finish_requested_ = true;
        status_ =
            grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    }
    PumpLocked();
  }

  // The reactor's OnDone: it is about to be deleted.
  void Detach() {
    absl::MutexLock lock(&mu_);
    reactor_ = nullptr;
  }

  // The status the call was (or will be) finished with.
  grpc::StatusCode final_code() const {
    absl::MutexLock lock(&mu_);
    return status_.error_code();
  }

 private:
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reactor_ == nullptr || writing_ || finish_called_) return;
    if (!pending_.empty()) {
      in_flight_ = std::move(pending_.front());
      pending_.pop_front();
      writing_ = true;
      reactor_->StartWrite(&in_flight_);
      return;
    }
    if (finish_requested_) {
      finish_called_ = true;
      reactor_->Finish(status_);
    }
  }

  mutable absl::Mutex mu_;
  Reactor* reactor_ ABSL_GUARDED_BY(mu_);
  const MergeFn merge_;
  std::deque<Response> pending_ ABSL_GUARDED_BY(mu_);
  Response in_flight_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_STREAM_CHANNEL_H_

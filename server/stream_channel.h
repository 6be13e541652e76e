// Delivers responses produced on the engine thread to a gRPC callback-API
// reactor, one write at a time, and finishes the call once they are out.
//
// The engine thread must never block on a slow client, so responses queue
// here (optionally merged into the last queued one), within a bound in
// bytes per stream and for the whole process (StreamBuffers): a client
// that does not read gets RESOURCE_EXHAUSTED instead of the server's
// memory. The reactor may be gone
// (client cancelled, call done) while the scheduler still holds the
// channel: after Detach() everything pushed is dropped, so the engine never
// touches a deleted reactor.
//
// The call's outcome is reported to `on_finish` as the status is handed to
// gRPC, before the client can see it: a client that reads its final status
// and then scrapes the metrics finds its call counted.
#ifndef RINGMOE_SERVER_STREAM_CHANNEL_H_
#define RINGMOE_SERVER_STREAM_CHANNEL_H_

#include <malloc.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/status.h"
#include "server/stream_buffers.h"

namespace ringmoe::server {

// What a queued response costs: a protobuf message, or the serialized bytes
// a raw (grpc::ByteBuffer) method writes.
template <typename Message>
int64_t WireBytes(const Message& message) {
  return static_cast<int64_t>(message.ByteSizeLong());
}
inline int64_t WireBytes(const grpc::ByteBuffer& buffer) {
  return static_cast<int64_t>(buffer.Length());
}

// Reactor: grpc::ServerWriteReactor<Response> or
// grpc::ServerBidiReactor<Request, Response> (StartWrite and Finish).
template <typename Reactor, typename Response>
class StreamChannel {
 public:
  // Folds `next` into `last` (a queued, not yet written response) and
  // returns true, or returns false to queue `next` separately.
  using MergeFn = std::function<bool(Response& last, const Response& next)>;
  // Called once, with the code the call finishes with (the one the client
  // is told), just before the reactor's Finish; under the channel's lock,
  // so it must not call back into the channel.
  using FinishFn = std::function<void(grpc::StatusCode)>;

  StreamChannel(Reactor* reactor, MergeFn merge = nullptr,
                FinishFn on_finish = nullptr)
      : reactor_(reactor),
        merge_(std::move(merge)),
        on_finish_(std::move(on_finish)) {}

  ~StreamChannel() {
    absl::MutexLock lock(&mu_);
    DropPendingLocked();
  }

  // Queues `response`. False when the call is ending (finished, cancelled,
  // or ended now because the client stopped reading and the replies waiting
  // for it passed a StreamBuffers limit): the producer should stop.
  bool Push(Response response) {
    absl::MutexLock lock(&mu_);
    if (reactor_ == nullptr || finish_requested_) return false;
    int64_t added;
    if (merge_ && !pending_.empty()) {
      const int64_t before = WireBytes(pending_.back());
      if (merge_(pending_.back(), response)) {
        added = WireBytes(pending_.back()) - before;
      } else {
        added = WireBytes(response);
        pending_.push_back(std::move(response));
      }
    } else {
      added = WireBytes(response);
      pending_.push_back(std::move(response));
    }
    pending_bytes_ += added;
    const int64_t total = StreamBuffers::buffered_bytes() += added;
    if (pending_bytes_ > StreamBuffers::per_stream() ||
        total > StreamBuffers::total()) {
      const std::string message = absl::StrCat(
          "the client is not reading its stream: ", pending_bytes_,
          " bytes of replies are waiting (limits: ",
          StreamBuffers::per_stream(), " per stream, ", StreamBuffers::total(),
          " for the server); the stream ends");
      ++StreamBuffers::overflows();
      DropPendingLocked();
      finish_requested_ = true;
      status_ = grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, message);
      PumpLocked();
      return false;
    }
    PumpLocked();
    return true;
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
  // queue: the client is gone or the call was cancelled. `status` replaces
  // a finish status not yet handed to the reactor (the client never sees
  // it); one already sent stays, as the client saw it.
  void Abort(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    DropPendingLocked();
    if (finish_called_) return;
    finish_requested_ = true;
    status_ = std::move(status);
    PumpLocked();
  }

  // The reactor's OnWriteDone. A failed write means the client is gone:
  // no status reaches it any more, so a finish status not yet sent (none
  // is while a write is in flight) becomes CANCELLED.
  void OnWriteDone(bool ok) {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      DropPendingLocked();
      finish_requested_ = true;
      status_ =
          grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    }
    PumpLocked();
  }

  // The reactor's OnDone: it is about to be deleted.
  void Detach() {
    absl::MutexLock lock(&mu_);
    reactor_ = nullptr;
  }

 private:
  // Drops what waits; a large buffer's memory goes back to the system
  // rather than staying in the allocator's free lists.
  void DropPendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pending_.clear();
    StreamBuffers::buffered_bytes() -= pending_bytes_;
    const bool large = pending_bytes_ >= (int64_t{16} << 20);
    pending_bytes_ = 0;
    if (large) malloc_trim(0);
  }

  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reactor_ == nullptr || writing_ || finish_called_) return;
    if (!pending_.empty()) {
      in_flight_ = std::move(pending_.front());
      pending_.pop_front();
      const int64_t bytes = WireBytes(in_flight_);
      pending_bytes_ -= bytes;
      StreamBuffers::buffered_bytes() -= bytes;
      writing_ = true;
      reactor_->StartWrite(&in_flight_);
      return;
    }
    if (finish_requested_) {
      finish_called_ = true;
      if (on_finish_) on_finish_(status_.error_code());
      reactor_->Finish(status_);
    }
  }

  absl::Mutex mu_;
  Reactor* reactor_ ABSL_GUARDED_BY(mu_);
  const MergeFn merge_;
  const FinishFn on_finish_;
  std::deque<Response> pending_ ABSL_GUARDED_BY(mu_);
  int64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  Response in_flight_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_called_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_STREAM_CHANNEL_H_

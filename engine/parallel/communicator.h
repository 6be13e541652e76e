// Communicator: the collectives expert parallelism needs between the ranks
// of one job, and nothing more. MpiCommunicator moves host memory between
// processes started by mpirun; NcclCommunicator moves GPU memory. The engine
// is written against this interface only.
//
// Every rank calls the same collectives in the same order with matching
// arguments (the same root, the same block size, counts that agree between
// sender and receiver); a mismatch is a bug in the caller and may fail or
// time out, never silently mix data.
//
// No collective hangs: each waits at most timeout() and then returns
// DEADLINE_EXCEEDED naming the collective (and the ranks it still waited
// for where the implementation can tell). A peer that died yields
// UNAVAILABLE or ABORTED where the transport reports it; where it does not,
// the timeout does. After any failed call the communicator is unusable:
// later calls return FAILED_PRECONDITION, the buffers of the failed call may
// still be written, and the caller must end the job with Abort(), because
// the other ranks may be waiting in a collective this rank will never join.
//
// Calls are made by one thread at a time (the engine's step thread); a
// collective's order must be the same on every rank, so concurrent calls
// could not be matched anyway.
#ifndef RINGMOE_ENGINE_PARALLEL_COMMUNICATOR_H_
#define RINGMOE_ENGINE_PARALLEL_COMMUNICATOR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace ringmoe::parallel {

// The bytes of `values` (anything with data() and size(): a vector, a
// span), as the collectives take them.
template <typename Values>
absl::Span<const uint8_t> AsBytes(const Values& values) {
  return {reinterpret_cast<const uint8_t*>(values.data()),
          values.size() * sizeof(*values.data())};
}
template <typename Values>
absl::Span<uint8_t> AsWritableBytes(Values&& values) {
  return {reinterpret_cast<uint8_t*>(values.data()),
          values.size() * sizeof(*values.data())};
}

class Communicator {
 public:
  virtual ~Communicator() = default;

  // This process's rank in [0, size()), and the number of ranks.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // How long one collective may wait for its peers.
  virtual absl::Duration timeout() const = 0;

  // All buffers below are in the communicator's memory: host memory for
  // MpiCommunicator, device memory of its GPU for NcclCommunicator. A call
  // returns when its results are in place (or it failed); send buffers may
  // be reused then. Results always come in rank order, so a caller that
  // combines them (sums, concatenations) does so in the same fixed order on
  // every rank and whatever the timing.

  // Equal-size blocks to every rank: send and recv hold size() blocks of
  // B = send.size() / size() bytes; block p of `send` goes to rank p and
  // block p of `recv` comes from rank p. send.size() == recv.size(), a
  // multiple of size(), and B the same on every rank. The engine exchanges
  // the per-peer byte counts of the following AllToAllV with it.
  virtual absl::Status AllToAll(absl::Span<const uint8_t> send,
                                absl::Span<uint8_t> recv) = 0;

  // Ragged blocks to every rank: `send` is the concatenation, in rank
  // order, of send_counts[p] bytes for each rank p; `recv` receives the
  // concatenation, in rank order, of recv_counts[p] bytes from each rank p.
  // Both count spans have size() entries (zeros allowed), sum to
  // send.size() and recv.size(), and recv_counts[p] on this rank equals
  // send_counts[this rank] on rank p (the caller exchanged them, e.g. with
  // AllToAll). The block to and from this rank is copied locally.
  virtual absl::Status AllToAllV(absl::Span<const uint8_t> send,
                                 absl::Span<const uint64_t> send_counts,
                                 absl::Span<uint8_t> recv,
                                 absl::Span<const uint64_t> recv_counts) = 0;

  // Rank `root`'s `buffer` copied into `buffer` on every rank (same size
  // everywhere).
  virtual absl::Status Broadcast(int root, absl::Span<uint8_t> buffer) = 0;

  // Every rank's `send` (the same size B everywhere) gathered on every
  // rank: recv.size() == size() * B, block p from rank p.
  virtual absl::Status AllGather(absl::Span<const uint8_t> send,
                                 absl::Span<uint8_t> recv) = 0;

  // Returns once every rank has entered the barrier.
  virtual absl::Status Barrier() = 0;

  // Ends every rank's process with a non-zero exit after printing `status`
  // (why) on stderr: the way out after a failed collective. Never returns.
  [[noreturn]] virtual void Abort(const absl::Status& status) = 0;
};

}  // namespace ringmoe::parallel

#endif  // RINGMOE_ENGINE_PARALLEL_COMMUNICATOR_H_

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
#include <vector>

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

// The whole count matrix of one AllToAllV, when every rank knows it (e.g.
// from one AllGather of every rank's counts): what each rank sends each
// rank, so that no rank needs the counts exchanged again. A view: `units`
// must outlive the call it is given to.
struct CountMatrix {
  // ranks x ranks entries, row-major: units[s * ranks + d] units go from
  // rank s to rank d (with `transposed`, from rank d to rank s).
  absl::Span<const uint64_t> units;
  // Bytes per unit: a unit is whatever the caller counts (a row of a
  // tensor), so one matrix of row counts serves exchanges of rows of
  // different widths. Every count's bytes must fit 64 bits.
  uint64_t unit_bytes = 1;
  // Whether `units` is indexed [to][from]: an exchange that answers
  // another sends back along its transpose (rank d returns to rank s what
  // s sent it), which then needs no matrix of its own.
  bool transposed = false;

  // Whether it is a matrix for `ranks` ranks (units.size() == ranks^2).
  bool Fits(int ranks) const {
    return units.size() == static_cast<size_t>(ranks) * ranks;
  }
  // The bytes rank `from` sends rank `to`; requires Fits(ranks).
  uint64_t Bytes(int ranks, int from, int to) const {
    const size_t at = transposed ? static_cast<size_t>(to) * ranks + from
                                 : static_cast<size_t>(from) * ranks + to;
    return units[at] * unit_bytes;
  }
  // Rank `rank`'s AllToAllV counts in bytes: what it sends each rank (its
  // row) and what it receives from each (its column). Empty unless
  // Fits(ranks), so that AllToAllV refuses a matrix of the wrong size as it
  // refuses counts of the wrong size.
  std::vector<uint64_t> SendCounts(int ranks, int rank) const {
    std::vector<uint64_t> counts;
    if (!Fits(ranks)) return counts;
    for (int p = 0; p < ranks; ++p) counts.push_back(Bytes(ranks, rank, p));
    return counts;
  }
  std::vector<uint64_t> RecvCounts(int ranks, int rank) const {
    std::vector<uint64_t> counts;
    if (!Fits(ranks)) return counts;
    for (int p = 0; p < ranks; ++p) counts.push_back(Bytes(ranks, p, rank));
    return counts;
  }
};

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
  // multiple of size(), and B the same on every rank.
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

  // AllToAllV when every rank knows the whole count matrix (the same
  // `counts` on every rank, Fits(size())): send_counts are this rank's row
  // of it, recv_counts its column, and the result is AllToAllV's with
  // those. The engine gathers one matrix of row counts per MoE layer and
  // passes it (transposed for the answer) to both of the layer's
  // exchanges. A communicator whose AllToAllV must learn more than its own
  // counts (HierarchicalCommunicator gathers every rank's to plan its
  // phases) overrides this to skip that; the default calls AllToAllV with
  // the row and the column. A wrapper forwards it as such (not as
  // AllToAllV), or the communicator it wraps cannot skip anything.
  virtual absl::Status AllToAllVWithMatrix(absl::Span<const uint8_t> send,
                                           absl::Span<uint8_t> recv,
                                           const CountMatrix& counts) {
    return AllToAllV(send, counts.SendCounts(size(), rank()), recv,
                     counts.RecvCounts(size(), rank()));
  }

  // Rank `root`'s `buffer` copied into `buffer` on every rank (same size
  // everywhere).
  virtual absl::Status Broadcast(int root, absl::Span<uint8_t> buffer) = 0;

  // Every rank's `send` (the same size B everywhere) gathered on every
  // rank: recv.size() == size() * B, block p from rank p.
  virtual absl::Status AllGather(absl::Span<const uint8_t> send,
                                 absl::Span<uint8_t> recv) = 0;

  // Every rank's `send`, of any size, gathered on every rank: `recv` is the
  // concatenation, in rank order, of recv_counts[p] bytes from each rank p.
  // recv_counts has size() entries (zeros allowed), sums to recv.size(), is
  // the same on every rank, and recv_counts[p] equals send.size() on rank
  // p (every rank knows every block's size, e.g. from the step's plan), so
  // no rank sends more than its own bytes to each peer.
  virtual absl::Status AllGatherV(absl::Span<const uint8_t> send,
                                  absl::Span<uint8_t> recv,
                                  absl::Span<const uint64_t> recv_counts) = 0;

  // Returns once every rank has entered the barrier.
  virtual absl::Status Barrier() = 0;

  // Ends every rank's process with a non-zero exit after printing `status`
  // (why) on stderr: the way out after a failed collective. Never returns.
  [[noreturn]] virtual void Abort(const absl::Status& status) = 0;
};

}  // namespace ringmoe::parallel

#endif  // RINGMOE_ENGINE_PARALLEL_COMMUNICATOR_H_

// MeteredCommunicator: a Communicator that counts what passes through it —
// the bytes this rank's collectives deliver to other ranks and receive from
// them, the collectives called, and the seconds spent inside them — and
// forwards every call to the communicator it wraps. The engine meters its
// expert exchanges with it; the counters are per-rank metrics.
//
// Bytes are the collectives' payload as the Communicator interface defines
// it, whatever the transport does underneath (a hierarchical AllToAllV
// forwards blocks through node leaders; MPI may copy more): the block a
// rank sends itself is not counted; AllToAll and AllGather count (size() -
// 1) blocks each way; a Broadcast counts size() - 1 buffers sent at the
// root and one received elsewhere. A failed call counts as called, its time
// spent, and no bytes. Seconds include the wait for the slowest peer, so
// they show imbalance between ranks as well as transport time.
//
// The counters may be read from any thread while collectives run (the
// calls themselves are one thread's, as on every Communicator).
#ifndef RINGMOE_ENGINE_PARALLEL_METERED_COMMUNICATOR_H_
#define RINGMOE_ENGINE_PARALLEL_METERED_COMMUNICATOR_H_

#include <atomic>
#include <cstdint>

#include "engine/parallel/communicator.h"

namespace ringmoe::parallel {

// What one rank's collectives moved so far.
struct CollectiveTraffic {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t collectives = 0;
  double seconds = 0;

  CollectiveTraffic& operator+=(const CollectiveTraffic& other) {
    bytes_sent += other.bytes_sent;
    bytes_received += other.bytes_received;
    collectives += other.collectives;
    seconds += other.seconds;
    return *this;
  }
};

class MeteredCommunicator : public Communicator {
 public:
  // `inner` must outlive this communicator.
  explicit MeteredCommunicator(Communicator* inner) : inner_(*inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  absl::Duration timeout() const override { return inner_.timeout(); }

  absl::Status AllToAll(absl::Span<const uint8_t> send,
                        absl::Span<uint8_t> recv) override;
  absl::Status AllToAllV(absl::Span<const uint8_t> send,
                         absl::Span<const uint64_t> send_counts,
                         absl::Span<uint8_t> recv,
                         absl::Span<const uint64_t> recv_counts) override;
  // Forwarded as such (the wrapped communicator may skip a count exchange
  // with it), counted as AllToAllV with the matrix's row and column.
  absl::Status AllToAllVWithMatrix(absl::Span<const uint8_t> send,
                                   absl::Span<uint8_t> recv,
                                   const CountMatrix& counts) override;
  absl::Status Broadcast(int root, absl::Span<uint8_t> buffer) override;
  absl::Status AllGather(absl::Span<const uint8_t> send,
                         absl::Span<uint8_t> recv) override;
  absl::Status AllGatherV(absl::Span<const uint8_t> send,
                          absl::Span<uint8_t> recv,
                          absl::Span<const uint64_t> recv_counts) override;
  absl::Status Barrier() override;
  [[noreturn]] void Abort(const absl::Status& status) override;

  // The counters now.
  CollectiveTraffic traffic() const;

 private:
  // Counts one call that took `seconds` and, when `status` is OK, moved
  // `sent` and `received` bytes; returns `status`.
  absl::Status Count(const absl::Status& status, absl::Time start,
                     uint64_t sent, uint64_t received);

  Communicator& inner_;
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint64_t> collectives_{0};
  std::atomic<int64_t> nanoseconds_{0};
};

}  // namespace ringmoe::parallel

#endif  // RINGMOE_ENGINE_PARALLEL_METERED_COMMUNICATOR_H_

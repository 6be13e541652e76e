#include "engine/parallel/metered_communicator.h"

#include <cstdlib>

#include "absl/time/clock.h"

namespace ringmoe::parallel {
namespace {

// The bytes of `counts` to or from other ranks than `rank`.
uint64_t PeerBytes(absl::Span<const uint64_t> counts, int rank) {
  uint64_t total = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    if (static_cast<int>(p) != rank) total += counts[p];
  }
  return total;
}

}  // namespace

absl::Status MeteredCommunicator::Count(const absl::Status& status,
                                        absl::Time start, uint64_t sent,
                                        uint64_t received) {
  nanoseconds_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start),
                         std::memory_order_relaxed);
  collectives_.fetch_add(1, std::memory_order_relaxed);
  if (status.ok()) {
    bytes_sent_.fetch_add(sent, std::memory_order_relaxed);
    bytes_received_.fetch_add(received, std::memory_order_relaxed);
  }
  return status;
}

absl::Status MeteredCommunicator::AllToAll(absl::Span<const uint8_t> send,
                                           absl::Span<uint8_t> recv) {
  const absl::Time start = absl::Now();
  const absl::Status status = inner_.AllToAll(send, recv);
  const uint64_t peers = size() - 1;
  return Count(status, start, send.size() / size() * peers,
               recv.size() / size() * peers);
}

absl::Status MeteredCommunicator::AllToAllV(
    absl::Span<const uint8_t> send, absl::Span<const uint64_t> send_counts,
    absl::Span<uint8_t> recv, absl::Span<const uint64_t> recv_counts) {
  const absl::Time start = absl::Now();
  const absl::Status status =
      inner_.AllToAllV(send, send_counts, recv, recv_counts);
  return Count(status, start, PeerBytes(send_counts, rank()),
               PeerBytes(recv_counts, rank()));
}

absl::Status MeteredCommunicator::AllToAllVWithMatrix(
    absl::Span<const uint8_t> send, absl::Span<uint8_t> recv,
    const CountMatrix& counts) {
  const absl::Time start = absl::Now();
  const absl::Status status = inner_.AllToAllVWithMatrix(send, recv, counts);
  return Count(status, start,
               PeerBytes(counts.SendCounts(size(), rank()), rank()),
               PeerBytes(counts.RecvCounts(size(), rank()), rank()));
}

absl::Status MeteredCommunicator::Broadcast(int root,
                                            absl::Span<uint8_t> buffer) {
  const absl::Time start = absl::Now();
  const absl::Status status = inner_.Broadcast(root, buffer);
  const bool at_root = root == rank();
  return Count(status, start, at_root ? buffer.size() * (size() - 1) : 0,
               at_root ? 0 : buffer.size());
}

absl::Status MeteredCommunicator::AllGather(absl::Span<const uint8_t> send,
                                            absl::Span<uint8_t> recv) {
  const absl::Time start = absl::Now();
  const absl::Status status = inner_.AllGather(send, recv);
  const uint64_t peers = size() - 1;
  return Count(status, start, send.size() * peers, send.size() * peers);
}

absl::Status MeteredCommunicator::AllGatherV(
    absl::Span<const uint8_t> send, absl::Span<uint8_t> recv,
    absl::Span<const uint64_t> recv_counts) {
  const absl::Time start = absl::Now();
  const absl::Status status = inner_.AllGatherV(send, recv, recv_counts);
  const uint64_t peers = size() - 1;
  return Count(status, start, send.size() * peers,
               PeerBytes(recv_counts, rank()));
}

absl::Status MeteredCommunicator::Barrier() {
  const absl::Time start = absl::Now();
  return Count(inner_.Barrier(), start, 0, 0);
}

void MeteredCommunicator::Abort(const absl::Status& status) {
  inner_.Abort(status);
  // Communicator::Abort never returns; should an implementation, the job
  // must still end.
  std::abort();
}

CollectiveTraffic MeteredCommunicator::traffic() const {
  CollectiveTraffic t;
  t.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
  t.bytes_received = bytes_received_.load(std::memory_order_relaxed);
  t.collectives = collectives_.load(std::memory_order_relaxed);
  t.seconds =
      static_cast<double>(nanoseconds_.load(std::memory_order_relaxed)) * 1e-9;
  return t;
}

}  // namespace ringmoe::parallel

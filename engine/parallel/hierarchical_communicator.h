// HierarchicalCommunicator: a Communicator whose AllToAllV crosses between
// nodes once per ordered pair of nodes (HetuMoE's hierarchical all-to-all)
// instead of once per pair of ranks. With R ranks on each of M nodes, a flat
// AllToAllV sends up to R^2 messages from one node to another; this one
// sends one, aggregated by the nodes' leaders (the lowest rank of each
// node, NodeGrouping::leader), so fewer and larger messages cross the slow
// link between machines.
//
// AllToAllV, on every rank, in four collectives of the base communicator:
//   0. AllGather of every rank's send_counts: each rank then knows the whole
//      count matrix and derives every later phase's counts and layouts
//      locally (PlanHierarchicalAllToAllV), with no further count exchange.
//   1. Intra-node AllToAllV: each rank sends the ranks of its own node
//      their blocks directly, and its node's leader, appended to the
//      leader's own block, its blocks for every rank of the other nodes.
//   2. Between-node AllToAllV of the leaders: one message from each leader
//      to each other node's leader, holding every block from its node to
//      that node (none where the blocks are all empty).
//   3. Intra-node AllToAllV: each leader scatters to every rank of its node
//      (itself included) the blocks that came from the other nodes.
// AllToAllVWithMatrix is phases 1 to 3 alone: the caller's count matrix is
// the one phase 0 would gather. The engine uses it (TokenDispatchExecutor:
// one AllGather of row counts per MoE layer serves both of the layer's
// exchanges), so a layer costs the base 1 + 2 x 3 collectives, not an
// extra count exchange and 2 x 4: phase 0's gather costs as many messages
// between nodes as a flat exchange of the counts, which is what the
// hierarchical exchange exists to avoid.
// The result is byte-identical to the base's flat AllToAllV, in the rank
// order Communicator promises. Every phase is a full AllToAllV of the base
// with zero counts where nothing goes (MpiCommunicator sends no message
// for a zero count), so all ranks call the same collectives in the same
// order. The base's per-message limits (MpiCommunicator: 2^31 - 1 bytes)
// apply to the aggregated messages, which are larger than the flat ones.
//
// AllToAll, Broadcast, AllGather (so the engine's gather of counts),
// AllGatherV (replicated attention's outputs), Barrier, Abort, rank, size
// and timeout are the base's, forwarded: their messages are a few bytes per
// peer, or not the all-to-all's.
//
// Memory: the blocks are packed and unpacked with memcpy in staging
// buffers of host memory, so the base must move host memory
// (MpiCommunicator, SingleRankCommunicator), not a GPU's.
//
// Failure follows Communicator's contract: a failed phase returns the
// base's error (its code, and its message after the phase's name, e.g.
// "hierarchical AllToAllV phase 2 (between nodes): ..."); after any failed
// call, this communicator's or the base's, every later call returns
// FAILED_PRECONDITION and the job must be ended with Abort(). Arguments are
// checked as the base checks them (collective_args.h; a CountMatrix's row
// and column as send and recv counts), and AllToAllV's recv_counts must
// agree with the gathered matrix (INVALID_ARGUMENT otherwise, on the rank
// that sees the mismatch; its peers then fail or time out). A CountMatrix
// that differs between ranks is the caller's bug, as counts that disagree
// are for any AllToAllV: the phases' counts then disagree too, and the
// base refuses them or times out.
//
// Calls are made by one thread at a time, as on every Communicator.
#ifndef RINGMOE_ENGINE_PARALLEL_HIERARCHICAL_COMMUNICATOR_H_
#define RINGMOE_ENGINE_PARALLEL_HIERARCHICAL_COMMUNICATOR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/node_grouping.h"

namespace ringmoe::parallel {

// What one rank sent: a message is a non-empty block to another rank (the
// block a rank sends itself is a local copy and is not counted); bytes are
// those messages' bytes.
struct TrafficStats {
  uint64_t messages = 0;
  uint64_t bytes = 0;
};

// A hierarchical AllToAllV's traffic from one rank, by where it goes.
struct HierarchicalTraffic {
  TrafficStats intra_node;     // phases 1 and 3
  TrafficStats between_nodes;  // phase 2
};

// The buffers a hierarchical AllToAllV's pieces are copied from: the
// caller's send buffer and each phase's receive buffer.
enum class StagedBuffer { kSend = 0, kPhase1Recv, kPhase2Recv, kPhase3Recv };

// `bytes` bytes at `offset` in buffer `from`.
struct Piece {
  StagedBuffer from;
  uint64_t offset;
  uint64_t bytes;
};

// One phase's AllToAllV on one rank: its counts (size() entries each) and
// its send buffer, the concatenation of `send`.
struct PhasePlan {
  std::vector<uint64_t> send_counts;
  std::vector<uint64_t> recv_counts;
  std::vector<Piece> send;
};

// One rank's part of a hierarchical AllToAllV: phases 1 to 3, then the
// result, the concatenation of `recv`. Pieces are non-empty, and adjacent
// runs of one buffer are merged into one piece.
struct HierarchicalPlan {
  std::array<PhasePlan, 3> phases;
  std::vector<Piece> recv;
};

// The plan of `rank` for the count matrix `counts` (row-major, size x size
// for size = nodes.size(): counts[s * size + d] bytes go from rank s to rank
// d). A pure function of its arguments, so every rank derives the phase
// counts of its peers' plans consistently. Blocks travel in these layouts:
// a phase-1 message to the leader is the block for the leader, then the
// blocks for the other nodes' ranks in rank order; a phase-2 message holds
// the blocks from its node to the receiving node ordered by destination
// rank, then by source rank; a phase-3 message holds the blocks from the
// other nodes' ranks in source rank order. Requires rank in [0, size) and
// counts.size() == size * size.
HierarchicalPlan PlanHierarchicalAllToAllV(const NodeGrouping& nodes, int rank,
                                           absl::Span<const uint64_t> counts);

// The traffic `rank` sends in a phase with these send counts.
TrafficStats PhaseTraffic(absl::Span<const uint64_t> send_counts, int rank);

// Copies `pieces`, concatenated, into `out` (whose size is their total),
// reading buffer b of each piece from buffers[b].
void AssemblePieces(absl::Span<const Piece> pieces,
                    const std::array<absl::Span<const uint8_t>, 4>& buffers,
                    absl::Span<uint8_t> out);

class HierarchicalCommunicator : public Communicator {
 public:
  // Wraps `base` (not owned; it must outlive this communicator and be used
  // only through it from now on, since a failure of either makes both
  // unusable). INVALID_ARGUMENT when `nodes` does not group base->size()
  // ranks. Communicates nothing.
  static absl::StatusOr<std::unique_ptr<HierarchicalCommunicator>> Create(
      Communicator* base, NodeGrouping nodes);

  int rank() const override { return base_->rank(); }
  int size() const override { return base_->size(); }
  absl::Duration timeout() const override { return base_->timeout(); }

  absl::Status AllToAll(absl::Span<const uint8_t> send,
                        absl::Span<uint8_t> recv) override;
  absl::Status AllToAllV(absl::Span<const uint8_t> send,
                         absl::Span<const uint64_t> send_counts,
                         absl::Span<uint8_t> recv,
                         absl::Span<const uint64_t> recv_counts) override;
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

  const NodeGrouping& nodes() const { return nodes_; }

  // What this rank sent in the phases 1 to 3 of every AllToAllV and
  // AllToAllVWithMatrix so far (not phase 0's gather of the counts, whose
  // messages are the base's affair, nor the forwarded collectives).
  const HierarchicalTraffic& traffic() const { return traffic_; }

 private:
  HierarchicalCommunicator(Communicator* base, NodeGrouping nodes);

  absl::Status CheckUsable(const std::string& collective) const;
  // Records a failed call's status (OK passes through) and returns it.
  absl::Status Fail(absl::Status status);
  // Phases 1 to 3 for the byte counts in count_matrix_, checked against
  // `send` and `recv` by the caller.
  absl::Status RunPhases(absl::Span<const uint8_t> send,
                         absl::Span<uint8_t> recv);

  Communicator* const base_;
  const NodeGrouping nodes_;
  HierarchicalTraffic traffic_;
  absl::Status failure_;
  // Kept between calls so that the engine's every step reuses their
  // memory: the byte counts of the AllToAllV in progress (row-major, from
  // by to), and each phase's send and receive buffers.
  std::vector<uint64_t> count_matrix_;
  std::array<std::vector<uint8_t>, 3> phase_send_;
  std::array<std::vector<uint8_t>, 3> phase_recv_;
};

}  // namespace ringmoe::parallel

#endif  // RINGMOE_ENGINE_PARALLEL_HIERARCHICAL_COMMUNICATOR_H_

#include "engine/parallel/hierarchical_communicator.h"

#include <cstdlib>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/parallel/collective_args.h"

namespace ringmoe::parallel {
namespace {

// Appends `bytes` bytes at `offset` of `from`, merged into the last piece
// when they continue it (fewer, larger copies) and dropped when empty.
void AddPiece(std::vector<Piece>& pieces, StagedBuffer from, uint64_t offset,
              uint64_t bytes) {
  if (bytes == 0) return;
  if (!pieces.empty() && pieces.back().from == from &&
      pieces.back().offset + pieces.back().bytes == offset) {
    pieces.back().bytes += bytes;
    return;
  }
  pieces.push_back({from, offset, bytes});
}

uint64_t Total(absl::Span<const uint64_t> counts) {
  return std::accumulate(counts.begin(), counts.end(), uint64_t{0});
}

constexpr const char* kCollective = "hierarchical AllToAllV";
constexpr const char* kPhaseNames[3] = {
    "phase 1 (within nodes, to the leaders)",
    "phase 2 (between nodes)",
    "phase 3 (within nodes, from the leaders)",
};

}  // namespace

HierarchicalPlan PlanHierarchicalAllToAllV(const NodeGrouping& nodes, int rank,
                                           absl::Span<const uint64_t> counts) {
  const int n = nodes.size();
  const auto count = [&](int from, int to) {
    return counts[static_cast<size_t>(from) * n + to];
  };
  const int node = nodes.node_of(rank);
  const int leader = nodes.leader(node);
  const std::vector<int>& mine = nodes.ranks_of(node);
  const auto off_node = [&](int r) { return nodes.node_of(r) != node; };

  HierarchicalPlan plan;
  for (PhasePlan& phase : plan.phases) {
    phase.send_counts.assign(n, 0);
    phase.recv_counts.assign(n, 0);
  }
  PhasePlan& phase1 = plan.phases[0];
  PhasePlan& phase2 = plan.phases[1];
  PhasePlan& phase3 = plan.phases[2];

  // Phase 1: this rank's blocks for its own node go directly; the leader's
  // message also carries every block for the other nodes.
  const std::vector<uint64_t> send_offsets =
      BlockOffsets(counts.subspan(static_cast<size_t>(rank) * n, n));
  for (int q : mine) {
    AddPiece(phase1.send, StagedBuffer::kSend, send_offsets[q], count(rank, q));
    phase1.send_counts[q] = count(rank, q);
    if (q != leader) continue;
    for (int d = 0; d < n; ++d) {
      if (!off_node(d)) continue;
      AddPiece(phase1.send, StagedBuffer::kSend, send_offsets[d],
               count(rank, d));
      phase1.send_counts[q] += count(rank, d);
    }
  }
  for (int p : mine) {
    phase1.recv_counts[p] = count(p, rank);
    if (rank != leader) continue;
    for (int d = 0; d < n; ++d) {
      if (off_node(d)) phase1.recv_counts[p] += count(p, d);
    }
  }
  const std::vector<uint64_t> phase1_offsets = BlockOffsets(phase1.recv_counts);

  if (rank == leader) {
    std::vector<int> index_in_node(n, -1);
    for (size_t i = 0; i < mine.size(); ++i) index_in_node[mine[i]] = i;

    // Where block (s -> d), s of this node and d of another, lies in the
    // phase-1 buffer: in s's message, after s's block for the leader.
    std::vector<uint64_t> at_phase1(mine.size() * n, 0);
    for (size_t i = 0; i < mine.size(); ++i) {
      const int s = mine[i];
      uint64_t at = phase1_offsets[s] + count(s, leader);
      for (int d = 0; d < n; ++d) {
        if (!off_node(d)) continue;
        at_phase1[i * n + d] = at;
        at += count(s, d);
      }
    }

    // Phase 2: one message per other node, to its leader (nodes are
    // numbered in the order of their leaders, so this is rank order).
    for (int other = 0; other < nodes.num_nodes(); ++other) {
      if (other == node) continue;
      const int to = nodes.leader(other);
      for (int d : nodes.ranks_of(other)) {
        for (size_t i = 0; i < mine.size(); ++i) {
          const int s = mine[i];
          AddPiece(phase2.send, StagedBuffer::kPhase1Recv, at_phase1[i * n + d],
                   count(s, d));
          phase2.send_counts[to] += count(s, d);
        }
      }
      for (int s : nodes.ranks_of(other)) {
        for (int d : mine) phase2.recv_counts[to] += count(s, d);
      }
    }
    const std::vector<uint64_t> phase2_offsets =
        BlockOffsets(phase2.recv_counts);

    // Where block (s -> d), s of another node and d of this one, lies in
    // the phase-2 buffer: in the message of s's leader, ordered by d, then
    // by s.
    std::vector<uint64_t> at_phase2(static_cast<size_t>(n) * mine.size(), 0);
    for (int other = 0; other < nodes.num_nodes(); ++other) {
      if (other == node) continue;
      uint64_t at = phase2_offsets[nodes.leader(other)];
      for (size_t j = 0; j < mine.size(); ++j) {
        for (int s : nodes.ranks_of(other)) {
          at_phase2[s * mine.size() + j] = at;
          at += count(s, mine[j]);
        }
      }
    }

    // Phase 3: to each rank of this node, its blocks from the other nodes
    // in source rank order.
    for (int d : mine) {
      const size_t j = index_in_node[d];
      for (int s = 0; s < n; ++s) {
        if (!off_node(s)) continue;
        AddPiece(phase3.send, StagedBuffer::kPhase2Recv,
                 at_phase2[s * mine.size() + j], count(s, d));
        phase3.send_counts[d] += count(s, d);
      }
    }
  }
  for (int s = 0; s < n; ++s) {
    if (off_node(s)) phase3.recv_counts[leader] += count(s, rank);
  }

  // The result in rank order: blocks from this node came directly in phase
  // 1 (first in each message), the others in the leader's phase-3 message.
  uint64_t at_phase3 = 0;
  for (int p = 0; p < n; ++p) {
    if (off_node(p)) {
      AddPiece(plan.recv, StagedBuffer::kPhase3Recv, at_phase3, count(p, rank));
      at_phase3 += count(p, rank);
    } else {
      AddPiece(plan.recv, StagedBuffer::kPhase1Recv, phase1_offsets[p],
               count(p, rank));
    }
  }
  return plan;
}

TrafficStats PhaseTraffic(absl::Span<const uint64_t> send_counts, int rank) {
  TrafficStats traffic;
  for (size_t p = 0; p < send_counts.size(); ++p) {
    if (static_cast<int>(p) == rank || send_counts[p] == 0) continue;
    ++traffic.messages;
    traffic.bytes += send_counts[p];
  }
  return traffic;
}

void AssemblePieces(absl::Span<const Piece> pieces,
                    const std::array<absl::Span<const uint8_t>, 4>& buffers,
                    absl::Span<uint8_t> out) {
  uint64_t at = 0;
  for (const Piece& piece : pieces) {
    std::memcpy(out.data() + at,
                buffers[static_cast<int>(piece.from)].data() + piece.offset,
                piece.bytes);
    at += piece.bytes;
  }
}

absl::StatusOr<std::unique_ptr<HierarchicalCommunicator>>
HierarchicalCommunicator::Create(Communicator* base, NodeGrouping nodes) {
  if (base == nullptr) {
    return absl::InvalidArgumentError(
        "HierarchicalCommunicator: no base communicator");
  }
  if (nodes.size() != base->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("HierarchicalCommunicator: the node grouping has ",
                     nodes.size(), " ranks but the job ", base->size()));
  }
  return std::unique_ptr<HierarchicalCommunicator>(
      new HierarchicalCommunicator(base, std::move(nodes)));
}

HierarchicalCommunicator::HierarchicalCommunicator(Communicator* base,
                                                   NodeGrouping nodes)
    : base_(base), nodes_(std::move(nodes)) {}

absl::Status HierarchicalCommunicator::CheckUsable(
    const std::string& collective) const {
  if (failure_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(collective, " on rank ", rank(), " of ", size(),
                   ": the communicator failed earlier (", failure_.ToString(),
                   "); the job must be aborted"));
}

absl::Status HierarchicalCommunicator::Fail(absl::Status status) {
  if (!status.ok() && failure_.ok()) failure_ = status;
  return status;
}

absl::Status HierarchicalCommunicator::AllToAll(absl::Span<const uint8_t> send,
                                                absl::Span<uint8_t> recv) {
  if (absl::Status s = CheckUsable("AllToAll"); !s.ok()) return s;
  return Fail(base_->AllToAll(send, recv));
}

absl::Status HierarchicalCommunicator::AllToAllV(
    absl::Span<const uint8_t> send, absl::Span<const uint64_t> send_counts,
    absl::Span<uint8_t> recv, absl::Span<const uint64_t> recv_counts) {
  if (absl::Status s = CheckUsable(kCollective); !s.ok()) return s;
  const int n = size();
  const int me = rank();
  absl::Status status =
      CheckAllToAllV(n, me, send, send_counts, recv, recv_counts);
  if (!status.ok()) return Fail(status);

  // Phase 0: the whole count matrix on every rank.
  count_matrix_.resize(static_cast<size_t>(n) * n);
  status = base_->AllGather(AsBytes(send_counts.subspan(0, n)),
                            AsWritableBytes(count_matrix_));
  if (!status.ok()) {
    return Fail(absl::Status(
        status.code(),
        absl::StrCat(kCollective,
                     " phase 0 (gathering counts): ", status.message())));
  }
  for (int p = 0; p < n; ++p) {
    if (count_matrix_[static_cast<size_t>(p) * n + me] != recv_counts[p]) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat(kCollective, " on rank ", me, ": expects ",
                       recv_counts[p], " bytes from rank ", p, ", which sends ",
                       count_matrix_[static_cast<size_t>(p) * n + me])));
    }
  }
  return RunPhases(send, recv);
}

absl::Status HierarchicalCommunicator::AllToAllVWithMatrix(
    absl::Span<const uint8_t> send, absl::Span<uint8_t> recv,
    const CountMatrix& counts) {
  if (absl::Status s = CheckUsable(kCollective); !s.ok()) return s;
  const int n = size();
  const int me = rank();
  if (absl::Status s = CheckAllToAllV(n, me, send, counts.SendCounts(n, me),
                                      recv, counts.RecvCounts(n, me));
      !s.ok()) {
    return Fail(s);
  }
  // No phase 0: the caller's matrix is the one it would gather.
  count_matrix_.resize(static_cast<size_t>(n) * n);
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      count_matrix_[static_cast<size_t>(from) * n + to] =
          counts.Bytes(n, from, to);
    }
  }
  return RunPhases(send, recv);
}

absl::Status HierarchicalCommunicator::RunPhases(absl::Span<const uint8_t> send,
                                                 absl::Span<uint8_t> recv) {
  const int me = rank();
  const HierarchicalPlan plan =
      PlanHierarchicalAllToAllV(nodes_, me, count_matrix_);
  std::array<absl::Span<const uint8_t>, 4> buffers = {send, {}, {}, {}};
  for (int i = 0; i < 3; ++i) {
    const PhasePlan& phase = plan.phases[i];
    phase_send_[i].resize(Total(phase.send_counts));
    phase_recv_[i].resize(Total(phase.recv_counts));
    AssemblePieces(phase.send, buffers, absl::MakeSpan(phase_send_[i]));
    const absl::Status status =
        base_->AllToAllV(phase_send_[i], phase.send_counts,
                         absl::MakeSpan(phase_recv_[i]), phase.recv_counts);
    if (!status.ok()) {
      return Fail(absl::Status(
          status.code(), absl::StrCat(kCollective, " ", kPhaseNames[i], ": ",
                                      status.message())));
    }
    buffers[i + 1] = phase_recv_[i];
    const TrafficStats sent = PhaseTraffic(phase.send_counts, me);
    TrafficStats& total = i == 1 ? traffic_.between_nodes : traffic_.intra_node;
    total.messages += sent.messages;
    total.bytes += sent.bytes;
  }
  AssemblePieces(plan.recv, buffers, recv);
  return absl::OkStatus();
}

absl::Status HierarchicalCommunicator::Broadcast(int root,
                                                 absl::Span<uint8_t> buffer) {
  if (absl::Status s = CheckUsable("Broadcast"); !s.ok()) return s;
  return Fail(base_->Broadcast(root, buffer));
}

absl::Status HierarchicalCommunicator::AllGather(absl::Span<const uint8_t> send,
                                                 absl::Span<uint8_t> recv) {
  if (absl::Status s = CheckUsable("AllGather"); !s.ok()) return s;
  return Fail(base_->AllGather(send, recv));
}

absl::Status HierarchicalCommunicator::AllGatherV(
    absl::Span<const uint8_t> send, absl::Span<uint8_t> recv,
    absl::Span<const uint64_t> recv_counts) {
  if (absl::Status s = CheckUsable("AllGatherV"); !s.ok()) return s;
  return Fail(base_->AllGatherV(send, recv, recv_counts));
}

absl::Status HierarchicalCommunicator::Barrier() {
  if (absl::Status s = CheckUsable("Barrier"); !s.ok()) return s;
  return Fail(base_->Barrier());
}

void HierarchicalCommunicator::Abort(const absl::Status& status) {
  base_->Abort(status);
  // Unreached: the base's Abort never returns either, but the compiler
  // does not carry [[noreturn]] through a virtual call.
  std::abort();
}

}  // namespace ringmoe::parallel

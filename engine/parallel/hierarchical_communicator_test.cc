// NodeGrouping, the hierarchical AllToAllV's phase plans (pure functions,
// run here for every rank of simulated jobs and compared with a direct
// routing of each block and with the flat AllToAllV's result), the count
// matrix Communicator::AllToAllVWithMatrix takes, and the communicator over
// one rank and over a pretend base (the collectives it makes of the base).
// hierarchical_mpi_test.cc runs it under MPI.
#include "engine/parallel/hierarchical_communicator.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/parallel/collective_args.h"
#include "engine/parallel/metered_communicator.h"
#include "engine/parallel/single_rank_communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmoe::parallel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CountMatrixTest, RowsColumnsAndTheTranspose) {
  const std::vector<uint64_t> units = {1, 2, 3,  //
                                       4, 5, 6,  //
                                       7, 8, 9};
  const CountMatrix rows{units, /*unit_bytes=*/10};
  EXPECT_TRUE(rows.Fits(3));
  EXPECT_FALSE(rows.Fits(2));
  EXPECT_EQ(rows.Bytes(3, /*from=*/1, /*to=*/2), 60u);
  EXPECT_THAT(rows.SendCounts(3, 1), ElementsAre(40, 50, 60));
  EXPECT_THAT(rows.RecvCounts(3, 1), ElementsAre(20, 50, 80));
  // The answer's matrix: rank 1 sends back what it received, and receives
  // back what it sent.
  const CountMatrix back{units, /*unit_bytes=*/1, /*transposed=*/true};
  EXPECT_EQ(back.Bytes(3, /*from=*/1, /*to=*/2), 8u);
  EXPECT_THAT(back.SendCounts(3, 1), ElementsAre(2, 5, 8));
  EXPECT_THAT(back.RecvCounts(3, 1), ElementsAre(4, 5, 6));
  // A matrix for another number of ranks has no counts, which AllToAllV
  // refuses.
  EXPECT_TRUE(rows.SendCounts(2, 0).empty());
  EXPECT_TRUE(rows.RecvCounts(2, 0).empty());
}

TEST(CountMatrixTest, TheDefaultIsAllToAllVWithTheRowAndColumn) {
  SingleRankCommunicator comm(absl::Seconds(5));
  const std::vector<uint64_t> units = {2};
  const std::vector<uint8_t> send = {1, 2, 3, 4, 5, 6};
  std::vector<uint8_t> recv(6);
  ASSERT_TRUE(comm.AllToAllVWithMatrix(send, absl::MakeSpan(recv),
                                       {units, /*unit_bytes=*/3})
                  .ok());
  EXPECT_EQ(recv, send);
  // A matrix for two ranks is refused as mis-sized counts are, and the
  // communicator is then unusable.
  const std::vector<uint64_t> two_ranks = {1, 1, 1, 1};
  const absl::Status status =
      comm.AllToAllVWithMatrix(send, absl::MakeSpan(recv), {two_ranks, 3});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(comm.Barrier().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(NodeGroupingTest, ConsecutiveEvenAndUneven) {
  auto even = NodeGrouping::Consecutive(4, 2);
  ASSERT_TRUE(even.ok()) << even.status();
  EXPECT_EQ(even->ToString(), "{0,1} {2,3}");
  EXPECT_EQ(even->node_of(3), 1);
  EXPECT_EQ(even->leader(1), 2);

  auto uneven = NodeGrouping::Consecutive(5, 2);
  ASSERT_TRUE(uneven.ok()) << uneven.status();
  EXPECT_EQ(uneven->ToString(), "{0,1} {2,3} {4}");
  EXPECT_EQ(uneven->num_nodes(), 3);

  auto one_node = NodeGrouping::Consecutive(3, 8);
  ASSERT_TRUE(one_node.ok()) << one_node.status();
  EXPECT_EQ(one_node->ToString(), "{0,1,2}");
}

TEST(NodeGroupingTest, ConsecutiveRefusesEmptyJobsAndEmptyNodes) {
  const absl::Status no_ranks = NodeGrouping::Consecutive(0, 2).status();
  EXPECT_EQ(no_ranks.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_ranks.message()), HasSubstr("at least one rank"));
  const absl::Status no_node = NodeGrouping::Consecutive(4, 0).status();
  EXPECT_EQ(no_node.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_node.message()),
              HasSubstr("ranks_per_node must be at least 1; got 0"));
}

TEST(NodeGroupingTest, LabelsNeedNotBeConsecutive) {
  const std::vector<int64_t> labels = {70, 30, 70, 30, 5};
  auto nodes = NodeGrouping::FromLabels(labels);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  // Numbered by lowest rank, whatever the labels' values.
  EXPECT_EQ(nodes->ToString(), "{0,2} {1,3} {4}");
  EXPECT_EQ(nodes->node_of(4), 2);
  EXPECT_EQ(nodes->leader(1), 1);
  EXPECT_EQ(NodeGrouping::FromLabels({}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(NodeGroupingTest, HierarchicalPaysOnlyAcrossNodesWithSharedNodes) {
  EXPECT_TRUE(HierarchicalAllToAllPays(*NodeGrouping::Consecutive(4, 2)));
  EXPECT_TRUE(HierarchicalAllToAllPays(*NodeGrouping::Consecutive(3, 2)));
  EXPECT_FALSE(HierarchicalAllToAllPays(*NodeGrouping::Consecutive(4, 1)));
  EXPECT_FALSE(HierarchicalAllToAllPays(*NodeGrouping::Consecutive(4, 4)));
  EXPECT_FALSE(HierarchicalAllToAllPays(*NodeGrouping::Consecutive(1, 1)));
}

// counts[s * n + d]: zero in about a third of the blocks, and one rank
// that sends nothing and one that receives nothing.
std::vector<uint64_t> RandomCounts(int n, std::mt19937_64& rng) {
  std::vector<uint64_t> counts(n * n);
  for (uint64_t& count : counts) count = rng() % 3 == 0 ? 0 : rng() % 40;
  const int silent = rng() % n;
  const int deaf = rng() % n;
  for (int p = 0; p < n; ++p) {
    counts[silent * n + p] = 0;
    counts[p * n + deaf] = 0;
  }
  return counts;
}

std::vector<uint8_t> RandomBytes(uint64_t size, std::mt19937_64& rng) {
  std::vector<uint8_t> bytes(size);
  for (uint8_t& byte : bytes) byte = static_cast<uint8_t>(rng());
  return bytes;
}

uint64_t Total(const std::vector<uint64_t>& counts) {
  uint64_t total = 0;
  for (uint64_t count : counts) total += count;
  return total;
}

// Every rank's plan, run in memory: each phase's messages are cut from the
// senders' buffers by their send counts, as a base AllToAllV does. Checks
// the counts against routing every block directly (s -> d within a node;
// s -> leader -> leader -> d between nodes), then the result against the
// flat AllToAllV's.
void CheckPlans(const NodeGrouping& nodes, const std::vector<uint64_t>& counts,
                std::mt19937_64& rng) {
  const int n = nodes.size();
  SCOPED_TRACE(absl::StrCat(n, " ranks on nodes ", nodes.ToString()));
  std::vector<HierarchicalPlan> plans;
  for (int r = 0; r < n; ++r) {
    plans.push_back(PlanHierarchicalAllToAllV(nodes, r, counts));
  }

  // expected[i][from * n + to]: bytes of phase i + 1 from `from` to `to`.
  std::vector<std::vector<uint64_t>> expected(3,
                                              std::vector<uint64_t>(n * n, 0));
  for (int s = 0; s < n; ++s) {
    for (int d = 0; d < n; ++d) {
      const uint64_t c = counts[s * n + d];
      const int from_leader = nodes.leader(nodes.node_of(s));
      const int to_leader = nodes.leader(nodes.node_of(d));
      if (from_leader == to_leader) {
        expected[0][s * n + d] += c;
      } else {
        expected[0][s * n + from_leader] += c;
        expected[1][from_leader * n + to_leader] += c;
        expected[2][to_leader * n + d] += c;
      }
    }
  }
  for (int i = 0; i < 3; ++i) {
    for (int r = 0; r < n; ++r) {
      for (int p = 0; p < n; ++p) {
        ASSERT_EQ(plans[r].phases[i].send_counts[p], expected[i][r * n + p])
            << "phase " << i + 1 << " from " << r << " to " << p;
        ASSERT_EQ(plans[r].phases[i].recv_counts[p], expected[i][p * n + r])
            << "phase " << i + 1 << " to " << r << " from " << p;
      }
    }
  }

  // One between-node message per ordered pair of nodes with data.
  uint64_t node_pairs_with_data = 0;
  for (int a = 0; a < nodes.num_nodes(); ++a) {
    for (int b = 0; b < nodes.num_nodes(); ++b) {
      uint64_t bytes = 0;
      for (int s : nodes.ranks_of(a)) {
        for (int d : nodes.ranks_of(b)) bytes += counts[s * n + d];
      }
      if (a != b && bytes > 0) ++node_pairs_with_data;
    }
  }
  uint64_t between_node_messages = 0;
  for (int r = 0; r < n; ++r) {
    between_node_messages +=
        PhaseTraffic(plans[r].phases[1].send_counts, r).messages;
  }
  EXPECT_EQ(between_node_messages, node_pairs_with_data);

  // The data, phase by phase.
  std::vector<std::vector<uint8_t>> sends(n);
  std::vector<std::array<std::vector<uint8_t>, 4>> held(n);
  for (int r = 0; r < n; ++r) {
    held[r][0] =
        RandomBytes(Total(std::vector<uint64_t>(counts.begin() + r * n,
                                                counts.begin() + (r + 1) * n)),
                    rng);
  }
  const auto spans = [&](int r) {
    std::array<absl::Span<const uint8_t>, 4> buffers;
    for (int b = 0; b < 4; ++b) buffers[b] = held[r][b];
    return buffers;
  };
  for (int i = 0; i < 3; ++i) {
    for (int r = 0; r < n; ++r) {
      const PhasePlan& phase = plans[r].phases[i];
      sends[r].assign(Total(phase.send_counts), 0);
      AssemblePieces(phase.send, spans(r), absl::MakeSpan(sends[r]));
    }
    for (int r = 0; r < n; ++r) {
      std::vector<uint8_t>& recv = held[r][i + 1];
      recv.clear();
      for (int p = 0; p < n; ++p) {
        const PhasePlan& theirs = plans[p].phases[i];
        const uint64_t at = BlockOffsets(theirs.send_counts)[r];
        recv.insert(recv.end(), sends[p].begin() + at,
                    sends[p].begin() + at + theirs.send_counts[r]);
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t> flat;
    for (int p = 0; p < n; ++p) {
      const uint64_t at =
          BlockOffsets(absl::MakeConstSpan(counts).subspan(p * n, n))[r];
      flat.insert(flat.end(), held[p][0].begin() + at,
                  held[p][0].begin() + at + counts[p * n + r]);
    }
    std::vector<uint8_t> result(flat.size(), 0xEE);
    AssemblePieces(plans[r].recv, spans(r), absl::MakeSpan(result));
    ASSERT_EQ(result, flat) << "rank " << r;
  }
}

TEST(HierarchicalPlanTest, MatchesFlatForConsecutiveNodes) {
  std::mt19937_64 rng(1);
  for (int n = 1; n <= 9; ++n) {
    for (int ranks_per_node = 1; ranks_per_node <= n + 1; ++ranks_per_node) {
      auto nodes = NodeGrouping::Consecutive(n, ranks_per_node);
      ASSERT_TRUE(nodes.ok()) << nodes.status();
      for (int round = 0; round < 5; ++round) {
        CheckPlans(*nodes, RandomCounts(n, rng), rng);
      }
    }
  }
}

TEST(HierarchicalPlanTest, MatchesFlatForScatteredNodes) {
  std::mt19937_64 rng(2);
  for (int round = 0; round < 200; ++round) {
    const int n = 1 + rng() % 10;
    const int num_labels = 1 + rng() % n;
    std::vector<int64_t> labels(n);
    for (int64_t& label : labels) label = rng() % num_labels;
    auto nodes = NodeGrouping::FromLabels(labels);
    ASSERT_TRUE(nodes.ok()) << nodes.status();
    CheckPlans(*nodes, RandomCounts(n, rng), rng);
  }
}

TEST(HierarchicalPlanTest, AllZeroCountsPlanNothing) {
  auto nodes = NodeGrouping::Consecutive(5, 2);
  ASSERT_TRUE(nodes.ok());
  const std::vector<uint64_t> counts(25, 0);
  for (int r = 0; r < 5; ++r) {
    const HierarchicalPlan plan = PlanHierarchicalAllToAllV(*nodes, r, counts);
    for (const PhasePlan& phase : plan.phases) {
      EXPECT_TRUE(phase.send.empty());
      EXPECT_EQ(Total(phase.send_counts), 0);
      EXPECT_EQ(Total(phase.recv_counts), 0);
    }
    EXPECT_TRUE(plan.recv.empty());
  }
}

TEST(HierarchicalPlanTest, CountsOnlyMessagesToOtherRanks) {
  const std::vector<uint64_t> send_counts = {5, 0, 7, 9};
  const TrafficStats traffic = PhaseTraffic(send_counts, 3);
  EXPECT_EQ(traffic.messages, 2);
  EXPECT_EQ(traffic.bytes, 12);
}

TEST(HierarchicalCommunicatorTest, RefusesAGroupingOfAnotherJob) {
  SingleRankCommunicator base(absl::Seconds(5));
  auto comm =
      HierarchicalCommunicator::Create(&base, *NodeGrouping::Consecutive(2, 1));
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(comm.status().message()),
              HasSubstr("grouping has 2 ranks but the job 1"));
}

TEST(HierarchicalCommunicatorTest, OneRankCopiesAndForwards) {
  SingleRankCommunicator base(absl::Seconds(5));
  auto comm =
      HierarchicalCommunicator::Create(&base, *NodeGrouping::Consecutive(1, 1));
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->rank(), 0);
  EXPECT_EQ((*comm)->size(), 1);
  EXPECT_EQ((*comm)->timeout(), absl::Seconds(5));
  const std::vector<uint8_t> send = {1, 2, 3};
  const std::vector<uint64_t> counts = {3};
  std::vector<uint8_t> recv(3);
  ASSERT_TRUE(
      (*comm)->AllToAllV(send, counts, absl::MakeSpan(recv), counts).ok());
  EXPECT_EQ(recv, send);
  EXPECT_EQ((*comm)->traffic().intra_node.messages, 0);
  EXPECT_EQ((*comm)->traffic().between_nodes.messages, 0);
  std::vector<uint8_t> gathered(3);
  ASSERT_TRUE((*comm)->AllGather(send, absl::MakeSpan(gathered)).ok());
  EXPECT_EQ(gathered, send);
  gathered.assign(3, 0);
  ASSERT_TRUE((*comm)->AllGatherV(send, absl::MakeSpan(gathered), counts).ok());
  EXPECT_EQ(gathered, send);
  EXPECT_TRUE((*comm)->Barrier().ok());
}

TEST(HierarchicalCommunicatorTest, AKnownMatrixSkipsTheGatherOfCounts) {
  SingleRankCommunicator single(absl::Seconds(5));
  MeteredCommunicator base(&single);
  auto comm =
      HierarchicalCommunicator::Create(&base, *NodeGrouping::Consecutive(1, 1));
  ASSERT_TRUE(comm.ok()) << comm.status();
  const std::vector<uint8_t> send = {1, 2, 3, 4};
  std::vector<uint8_t> recv(4);
  // AllToAllV: the gather of counts (phase 0) and phases 1 to 3.
  const std::vector<uint64_t> counts = {4};
  ASSERT_TRUE(
      (*comm)->AllToAllV(send, counts, absl::MakeSpan(recv), counts).ok());
  EXPECT_EQ(recv, send);
  EXPECT_EQ(base.traffic().collectives, 4u);
  // With the matrix known: phases 1 to 3 only, to the same result.
  const std::vector<uint64_t> rows = {2};
  std::fill(recv.begin(), recv.end(), 0);
  ASSERT_TRUE((*comm)
                  ->AllToAllVWithMatrix(send, absl::MakeSpan(recv),
                                        {rows, /*unit_bytes=*/2,
                                         /*transposed=*/true})
                  .ok());
  EXPECT_EQ(recv, send);
  EXPECT_EQ(base.traffic().collectives, 4u + 3u);
}

TEST(HierarchicalCommunicatorTest, RefusesBadArgumentsThenEverything) {
  SingleRankCommunicator base(absl::Seconds(5));
  auto comm =
      HierarchicalCommunicator::Create(&base, *NodeGrouping::Consecutive(1, 1));
  ASSERT_TRUE(comm.ok()) << comm.status();
  const std::vector<uint64_t> counts = {1};
  std::vector<uint8_t> buffer(2);
  const absl::Status status =
      (*comm)->AllToAllV(buffer, counts, absl::MakeSpan(buffer), counts);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  const absl::Status after = (*comm)->Barrier();
  EXPECT_EQ(after.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(after.message()), HasSubstr("failed earlier"));
}

// Rank 0 of a pretend job of four ranks that all send the same counts
// (AllGather repeats this rank's block, and counts its calls); the
// AllToAllV call numbered `failing_call` (0 is phase 1) fails as a lost
// peer would.
class FailingCommunicator : public SingleRankCommunicator {
 public:
  explicit FailingCommunicator(int failing_call)
      : SingleRankCommunicator(absl::Seconds(5)), failing_call_(failing_call) {}
  int size() const override { return 4; }
  absl::Status AllToAllV(absl::Span<const uint8_t>, absl::Span<const uint64_t>,
                         absl::Span<uint8_t> recv,
                         absl::Span<const uint64_t>) override {
    if (calls_++ == failing_call_) {
      return absl::UnavailableError("AllToAllV on rank 0 of 4: peer gone");
    }
    std::fill(recv.begin(), recv.end(), 0);
    return absl::OkStatus();
  }
  absl::Status AllGather(absl::Span<const uint8_t> send,
                         absl::Span<uint8_t> recv) override {
    ++gathers;
    for (size_t at = 0; at < recv.size(); at += send.size()) {
      std::copy(send.begin(), send.end(), recv.begin() + at);
    }
    return absl::OkStatus();
  }
  absl::Status AllGatherV(absl::Span<const uint8_t>, absl::Span<uint8_t>,
                          absl::Span<const uint64_t>) override {
    return absl::UnimplementedError("AllGatherV");
  }

  int gathers = 0;

 private:
  const int failing_call_;
  int calls_ = 0;
};

TEST(HierarchicalCommunicatorTest, AFailedPhaseIsNamedAndFinal) {
  const std::vector<std::string> phases = {
      "hierarchical AllToAllV phase 1 (within nodes, to the leaders): ",
      "hierarchical AllToAllV phase 2 (between nodes): ",
      "hierarchical AllToAllV phase 3 (within nodes, from the leaders): ",
  };
  for (int failing = 0; failing < 3; ++failing) {
    FailingCommunicator base(failing);
    auto comm = HierarchicalCommunicator::Create(
        &base, *NodeGrouping::Consecutive(4, 2));
    ASSERT_TRUE(comm.ok()) << comm.status();
    const std::vector<uint64_t> counts = {1, 1, 1, 1};
    std::vector<uint8_t> send(4, 7);
    std::vector<uint8_t> recv(4);
    const absl::Status status =
        (*comm)->AllToAllV(send, counts, absl::MakeSpan(recv), counts);
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_EQ(status.message(),
              phases[failing] + "AllToAllV on rank 0 of 4: peer gone");
    EXPECT_EQ((*comm)->Broadcast(0, {}).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  // The same names when the matrix is known, with no gather before.
  const std::vector<uint64_t> rows(16, 1);
  for (int failing = 0; failing < 3; ++failing) {
    FailingCommunicator base(failing);
    auto comm = HierarchicalCommunicator::Create(
        &base, *NodeGrouping::Consecutive(4, 2));
    ASSERT_TRUE(comm.ok()) << comm.status();
    std::vector<uint8_t> send(4, 7);
    std::vector<uint8_t> recv(4);
    const absl::Status status =
        (*comm)->AllToAllVWithMatrix(send, absl::MakeSpan(recv), {rows});
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
    EXPECT_EQ(status.message(),
              phases[failing] + "AllToAllV on rank 0 of 4: peer gone");
    EXPECT_EQ(base.gathers, 0);
  }
}

TEST(HierarchicalCommunicatorTest, AMatrixIsCheckedAsItsRowAndColumn) {
  // Of the wrong size.
  {
    FailingCommunicator base(-1);
    auto comm = HierarchicalCommunicator::Create(
        &base, *NodeGrouping::Consecutive(4, 2));
    ASSERT_TRUE(comm.ok()) << comm.status();
    const std::vector<uint64_t> rows(9, 1);
    std::vector<uint8_t> buffer(3);
    const absl::Status status =
        (*comm)->AllToAllVWithMatrix(buffer, absl::MakeSpan(buffer), {rows});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("one count per rank needed"));
    EXPECT_EQ((*comm)->Barrier().code(), absl::StatusCode::kFailedPrecondition);
  }
  // Whose column does not fit the receive buffer.
  {
    FailingCommunicator base(-1);
    auto comm = HierarchicalCommunicator::Create(
        &base, *NodeGrouping::Consecutive(4, 2));
    ASSERT_TRUE(comm.ok()) << comm.status();
    std::vector<uint64_t> rows(16, 1);
    rows[1 * 4 + 0] = 2;  // rank 1 sends this rank 2 units
    std::vector<uint8_t> send(4), recv(4);
    const absl::Status status =
        (*comm)->AllToAllVWithMatrix(send, absl::MakeSpan(recv), {rows});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("recv counts to 5 for 4 bytes"));
    EXPECT_EQ(base.gathers, 0);
  }
}

TEST(HierarchicalCommunicatorTest, RecvCountsMustAgreeWithTheMatrix) {
  FailingCommunicator base(-1);
  auto comm =
      HierarchicalCommunicator::Create(&base, *NodeGrouping::Consecutive(4, 2));
  ASSERT_TRUE(comm.ok()) << comm.status();
  // Every rank sends 1 byte to each; this rank claims 2 from rank 1.
  const std::vector<uint64_t> send_counts = {1, 1, 1, 1};
  const std::vector<uint64_t> recv_counts = {1, 2, 1, 1};
  std::vector<uint8_t> send(4);
  std::vector<uint8_t> recv(5);
  const absl::Status status =
      (*comm)->AllToAllV(send, send_counts, absl::MakeSpan(recv), recv_counts);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("expects 2 bytes from rank 1, which sends 1"));
}

}  // namespace
}  // namespace ringmoe::parallel

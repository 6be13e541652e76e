// The hierarchical AllToAllV on every rank of the job this test runs in
// (alone: a SingleRankCommunicator; under mpirun -np N: MpiCommunicator,
// started by the hierarchical_mpi_np*_test targets through
// mpirun_test.sh). Every node grouping of the job's ranks into consecutive
// pretend nodes, and one with scattered nodes, must give byte for byte the
// flat AllToAllV's result on the same base communicator, with exactly one
// between-node message per ordered pair of nodes that has data; so must
// AllToAllVWithMatrix, for the count matrix and for its transpose, with
// three collectives of the base (no gather of counts).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "engine/parallel/hierarchical_communicator.h"
#include "engine/parallel/metered_communicator.h"
#include "engine/parallel/mpi_communicator.h"
#include "engine/parallel/rank_test_output.h"
#include "gtest/gtest.h"

namespace ringmoe::parallel {
namespace {

Communicator* job = nullptr;
// The same communicator when mpirun started the job, else null.
MpiCommunicator* mpi = nullptr;

// Bytes rank `from` sends rank `to` in round `round`: zero in about a
// third of the pairs, else small or up to a few rendezvous-sized messages.
uint64_t RaggedCount(int round, int from, int to) {
  std::mt19937_64 rng(round * 1000003 + from * 1009 + to);
  switch (rng() % 3) {
    case 0:
      return 0;
    case 1:
      return rng() % 100;
    default:
      return rng() % 200000;
  }
}

uint8_t PayloadByte(int round, int from, int to, uint64_t i) {
  return static_cast<uint8_t>((i * 131 + from * 31 + to * 7 + round * 3) ^
                              (i >> 8));
}

// counts[from * size + to] of round `round`; in round 4 the last rank
// sends nothing, in round 5 rank 0 receives nothing, in round 6 nothing
// moves at all.
std::vector<uint64_t> RoundCounts(int round, int size) {
  std::vector<uint64_t> counts(size * size);
  for (int from = 0; from < size; ++from) {
    for (int to = 0; to < size; ++to) {
      counts[from * size + to] = round == 6 ? 0 : RaggedCount(round, from, to);
    }
  }
  for (int p = 0; p < size; ++p) {
    if (round == 4) counts[(size - 1) * size + p] = 0;
    if (round == 5) counts[p * size] = 0;
  }
  return counts;
}

// What this rank sends in round `round` with these send counts.
std::vector<uint8_t> Payload(int round, int rank,
                             absl::Span<const uint64_t> send_counts) {
  std::vector<uint8_t> send;
  for (size_t to = 0; to < send_counts.size(); ++to) {
    for (uint64_t i = 0; i < send_counts[to]; ++i) {
      send.push_back(PayloadByte(round, rank, to, i));
    }
  }
  return send;
}

// The flat AllToAllV's result for this rank under `counts`, against
// AllToAllVWithMatrix's through `comm`, which must make exactly three
// collectives of `base`.
void CheckMatrixAgainstFlat(int round, const CountMatrix& counts,
                            HierarchicalCommunicator& comm,
                            const MeteredCommunicator& base) {
  const int size = job->size();
  const int rank = job->rank();
  const std::vector<uint64_t> send_counts = counts.SendCounts(size, rank);
  const std::vector<uint64_t> recv_counts = counts.RecvCounts(size, rank);
  const std::vector<uint8_t> send = Payload(round, rank, send_counts);
  uint64_t recv_bytes = 0;
  for (uint64_t c : recv_counts) recv_bytes += c;
  std::vector<uint8_t> flat(recv_bytes, 0xEE);
  ASSERT_TRUE(
      job->AllToAllV(send, send_counts, absl::MakeSpan(flat), recv_counts)
          .ok());
  const uint64_t collectives_before = base.traffic().collectives;
  std::vector<uint8_t> result(recv_bytes, 0xDD);
  const absl::Status status =
      comm.AllToAllVWithMatrix(send, absl::MakeSpan(result), counts);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_TRUE(result == flat)
      << "round " << round << (counts.transposed ? ", transposed" : "");
  EXPECT_EQ(base.traffic().collectives - collectives_before, 3u)
      << "round " << round;
}

uint64_t BetweenNodePairsWithData(const NodeGrouping& nodes,
                                  const std::vector<uint64_t>& counts) {
  const int size = nodes.size();
  std::vector<uint64_t> bytes(nodes.num_nodes() * nodes.num_nodes(), 0);
  for (int from = 0; from < size; ++from) {
    for (int to = 0; to < size; ++to) {
      bytes[nodes.node_of(from) * nodes.num_nodes() + nodes.node_of(to)] +=
          counts[from * size + to];
    }
  }
  uint64_t pairs = 0;
  for (int a = 0; a < nodes.num_nodes(); ++a) {
    for (int b = 0; b < nodes.num_nodes(); ++b) {
      if (a != b && bytes[a * nodes.num_nodes() + b] > 0) ++pairs;
    }
  }
  return pairs;
}

// Every rank's sum of `value`.
uint64_t SumOverRanks(uint64_t value) {
  std::vector<uint64_t> all(job->size());
  const absl::Status status = job->AllGather(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(&value),
                          sizeof(value)),
      absl::MakeSpan(reinterpret_cast<uint8_t*>(all.data()),
                     all.size() * sizeof(uint64_t)));
  EXPECT_TRUE(status.ok()) << status;
  uint64_t sum = 0;
  for (uint64_t v : all) sum += v;
  return sum;
}

void CheckAgainstFlat(const NodeGrouping& nodes) {
  const int size = job->size();
  const int rank = job->rank();
  SCOPED_TRACE(absl::StrCat("nodes ", nodes.ToString()));
  MeteredCommunicator base(job);
  auto hierarchical = HierarchicalCommunicator::Create(&base, nodes);
  ASSERT_TRUE(hierarchical.ok()) << hierarchical.status();
  HierarchicalCommunicator& comm = **hierarchical;
  for (int round = 0; round < 7; ++round) {
    const std::vector<uint64_t> counts = RoundCounts(round, size);
    std::vector<uint64_t> send_counts(counts.begin() + rank * size,
                                      counts.begin() + (rank + 1) * size);
    const std::vector<uint8_t> send = Payload(round, rank, send_counts);
    // The receivers learn the counts from the forwarded AllToAll, as the
    // engine does.
    std::vector<uint64_t> recv_counts(size);
    ASSERT_TRUE(
        comm.AllToAll(
                absl::MakeConstSpan(
                    reinterpret_cast<const uint8_t*>(send_counts.data()),
                    size * sizeof(uint64_t)),
                absl::MakeSpan(reinterpret_cast<uint8_t*>(recv_counts.data()),
                               size * sizeof(uint64_t)))
            .ok());
    uint64_t recv_bytes = 0;
    for (int from = 0; from < size; ++from) {
      ASSERT_EQ(recv_counts[from], counts[from * size + rank]);
      recv_bytes += recv_counts[from];
    }

    std::vector<uint8_t> flat(recv_bytes, 0xEE);
    ASSERT_TRUE(
        job->AllToAllV(send, send_counts, absl::MakeSpan(flat), recv_counts)
            .ok());
    const HierarchicalTraffic before = comm.traffic();
    std::vector<uint8_t> result(recv_bytes, 0xDD);
    const absl::Status status =
        comm.AllToAllV(send, send_counts, absl::MakeSpan(result), recv_counts);
    ASSERT_TRUE(status.ok()) << status;
    ASSERT_TRUE(result == flat) << "round " << round;

    const uint64_t between_nodes =
        comm.traffic().between_nodes.messages - before.between_nodes.messages;
    if (rank != nodes.leader(nodes.node_of(rank))) {
      EXPECT_EQ(between_nodes, 0) << "round " << round;
    }
    EXPECT_EQ(SumOverRanks(between_nodes),
              BetweenNodePairsWithData(nodes, counts))
        << "round " << round;

    // The same exchange with the matrix known, and the answer along its
    // transpose (units of 3 bytes, as a row is several bytes).
    CheckMatrixAgainstFlat(round, {counts}, comm, base);
    CheckMatrixAgainstFlat(
        round, {counts, /*unit_bytes=*/3, /*transposed=*/true}, comm, base);
  }
}

TEST(HierarchicalMpiTest, ConsecutiveNodesMatchFlat) {
  for (int ranks_per_node = 1; ranks_per_node <= job->size();
       ++ranks_per_node) {
    auto nodes = NodeGrouping::Consecutive(job->size(), ranks_per_node);
    ASSERT_TRUE(nodes.ok()) << nodes.status();
    CheckAgainstFlat(*nodes);
  }
}

TEST(HierarchicalMpiTest, ScatteredNodesMatchFlat) {
  // Even and odd ranks on two nodes: a node's ranks are not consecutive.
  std::vector<int64_t> labels(job->size());
  for (int p = 0; p < job->size(); ++p) labels[p] = p % 2;
  auto nodes = NodeGrouping::FromLabels(labels);
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  CheckAgainstFlat(*nodes);
}

TEST(HierarchicalMpiTest, SharedMemoryFindsOneMachine) {
  if (mpi == nullptr) GTEST_SKIP() << "not started by mpirun";
  auto nodes = mpi->SharedMemoryNodes();
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  EXPECT_EQ(nodes->num_nodes(), 1) << nodes->ToString();
  EXPECT_EQ(nodes->size(), job->size());
  EXPECT_FALSE(HierarchicalAllToAllPays(*nodes));
  CheckAgainstFlat(*nodes);
}

}  // namespace
}  // namespace ringmoe::parallel

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  std::unique_ptr<ringmoe::parallel::Communicator> job;
  if (ringmoe::parallel::LaunchedAsMpiRank()) {
    auto mpi = ringmoe::parallel::MpiCommunicator::Create(absl::Seconds(30));
    if (!mpi.ok()) {
      std::fprintf(stderr, "%s\n", mpi.status().ToString().c_str());
      return 1;
    }
    ringmoe::parallel::mpi = mpi->get();
    job = std::move(*mpi);
  } else {
    auto alone = ringmoe::parallel::CreateJobCommunicator(absl::Seconds(30));
    if (!alone.ok()) {
      std::fprintf(stderr, "%s\n", alone.status().ToString().c_str());
      return 1;
    }
    job = std::move(*alone);
  }
  ringmoe::parallel::job = job.get();
  ringmoe::parallel::PrintOnlyFailuresUnlessRankZero(job->rank());
  return RUN_ALL_TESTS();
}

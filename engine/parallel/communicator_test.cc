// The collectives on every rank of the job this test runs in: alone (a
// SingleRankCommunicator) or under mpirun -np N (MpiCommunicator; the
// mpi_communicator_np*_test targets start it through mpirun_test.sh). Every
// rank runs every test in the same order; what a rank expects to receive is
// computed from the same seeds its peers sent from.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "absl/time/clock.h"
#include "engine/parallel/mpi_communicator.h"
#include "engine/parallel/rank_test_output.h"
#include "gtest/gtest.h"

namespace ringmoe::parallel {
namespace {

Communicator* job = nullptr;

// Byte i of what rank `from` sends rank `to` in round `round`.
uint8_t PayloadByte(int round, int from, int to, uint64_t i) {
  return static_cast<uint8_t>((i * 131 + from * 31 + to * 7 + round * 3) ^
                              (i >> 8));
}

// Bytes rank `from` sends rank `to` in round `round`: zero in about a
// quarter of the pairs, small (eager messages) or large (rendezvous).
uint64_t RaggedCount(int round, int from, int to) {
  std::mt19937_64 rng(round * 1000003 + from * 1009 + to);
  switch (rng() % 4) {
    case 0:
      return 0;
    case 1:
      return rng() % 100;
    case 2:
      return rng() % 70000;
    default:
      return rng() % (1 << 20);
  }
}

std::vector<uint8_t> Payload(int round, int from, int to, uint64_t count) {
  std::vector<uint8_t> bytes(count);
  for (uint64_t i = 0; i < count; ++i) {
    bytes[i] = PayloadByte(round, from, to, i);
  }
  return bytes;
}

// What this rank sends every rank (in rank order) and expects back, for
// counts[from][to].
struct Exchange {
  std::vector<uint64_t> send_counts;
  std::vector<uint64_t> recv_counts;
  std::vector<uint8_t> send;
  std::vector<uint8_t> expected;
};

Exchange Plan(int round, int rank, int size,
              const std::vector<std::vector<uint64_t>>& counts) {
  Exchange plan;
  for (int p = 0; p < size; ++p) {
    plan.send_counts.push_back(counts[rank][p]);
    plan.recv_counts.push_back(counts[p][rank]);
    const std::vector<uint8_t> out = Payload(round, rank, p, counts[rank][p]);
    plan.send.insert(plan.send.end(), out.begin(), out.end());
    const std::vector<uint8_t> in = Payload(round, p, rank, counts[p][rank]);
    plan.expected.insert(plan.expected.end(), in.begin(), in.end());
  }
  return plan;
}

TEST(CommunicatorTest, JobIsTheOneTheLauncherStarted) {
  const char* launched_size = std::getenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_EQ(job->size(), launched_size ? std::atoi(launched_size) : 1);
  EXPECT_EQ(LaunchedAsMpiRank(), launched_size != nullptr);
  EXPECT_GE(job->rank(), 0);
  EXPECT_LT(job->rank(), job->size());
}

TEST(CommunicatorTest, AllToAllVDeliversRaggedCountsIncludingZero) {
  const int size = job->size();
  for (int round = 0; round < 6; ++round) {
    std::vector<std::vector<uint64_t>> counts(size,
                                              std::vector<uint64_t>(size));
    for (int from = 0; from < size; ++from) {
      for (int to = 0; to < size; ++to) {
        counts[from][to] = RaggedCount(round, from, to);
      }
    }
    // One round where this rank sends nothing at all, one where it gets
    // nothing.
    if (round == 4) counts[size - 1].assign(size, 0);
    if (round == 5) {
      for (int from = 0; from < size; ++from) counts[from][0] = 0;
    }
    Exchange plan = Plan(round, job->rank(), size, counts);
    std::vector<uint8_t> recv(plan.expected.size(), 0xEE);
    ASSERT_TRUE(job->AllToAllV(plan.send, plan.send_counts,
                               absl::MakeSpan(recv), plan.recv_counts)
                    .ok());
    ASSERT_EQ(recv, plan.expected) << "round " << round;
  }
}

TEST(CommunicatorTest, CountsExchangedByAllToAllDriveAllToAllV) {
  const int size = job->size();
  const int rank = job->rank();
  // Each rank decides alone what it sends; the receivers learn the counts
  // from AllToAll, as the engine does before moving tokens.
  const int round = 7;
  std::vector<uint64_t> send_counts(size);
  std::vector<uint8_t> send;
  for (int p = 0; p < size; ++p) {
    send_counts[p] = RaggedCount(round, rank, p);
    const std::vector<uint8_t> out = Payload(round, rank, p, send_counts[p]);
    send.insert(send.end(), out.begin(), out.end());
  }
  std::vector<uint64_t> recv_counts(size, 0);
  ASSERT_TRUE(
      job->AllToAll(
             absl::MakeConstSpan(
                 reinterpret_cast<const uint8_t*>(send_counts.data()),
                 size * sizeof(uint64_t)),
             absl::MakeSpan(reinterpret_cast<uint8_t*>(recv_counts.data()),
                            size * sizeof(uint64_t)))
          .ok());
  std::vector<uint8_t> expected;
  for (int p = 0; p < size; ++p) {
    ASSERT_EQ(recv_counts[p], RaggedCount(round, p, rank)) << "from " << p;
    const std::vector<uint8_t> in = Payload(round, p, rank, recv_counts[p]);
    expected.insert(expected.end(), in.begin(), in.end());
  }
  std::vector<uint8_t> recv(expected.size());
  ASSERT_TRUE(
      job->AllToAllV(send, send_counts, absl::MakeSpan(recv), recv_counts)
          .ok());
  EXPECT_EQ(recv, expected);
}

TEST(CommunicatorTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < job->size(); ++root) {
    for (uint64_t bytes : {0, 1, 300000}) {
      const std::vector<uint8_t> sent = Payload(root, root, -1, bytes);
      std::vector<uint8_t> buffer(bytes, 0xEE);
      if (job->rank() == root) buffer = sent;
      ASSERT_TRUE(job->Broadcast(root, absl::MakeSpan(buffer)).ok());
      ASSERT_EQ(buffer, sent) << "root " << root << ", " << bytes << " bytes";
    }
  }
}

TEST(CommunicatorTest, AllGatherPutsBlocksInRankOrder) {
  const int size = job->size();
  for (uint64_t block : {0, 7, 100000}) {
    const std::vector<uint8_t> mine = Payload(1, job->rank(), -1, block);
    std::vector<uint8_t> expected;
    for (int p = 0; p < size; ++p) {
      const std::vector<uint8_t> theirs = Payload(1, p, -1, block);
      expected.insert(expected.end(), theirs.begin(), theirs.end());
    }
    std::vector<uint8_t> recv(size * block, 0xEE);
    ASSERT_TRUE(job->AllGather(mine, absl::MakeSpan(recv)).ok());
    ASSERT_EQ(recv, expected) << block << "-byte blocks";
  }
}

TEST(CommunicatorTest, AllGatherVPutsRaggedBlocksInRankOrder) {
  const int size = job->size();
  // Blocks of different sizes per rank, zero included, and one large.
  for (int round = 0; round < 3; ++round) {
    std::vector<uint64_t> counts;
    for (int p = 0; p < size; ++p) {
      counts.push_back(round == 2 && p == size - 1
                           ? 300001
                           : static_cast<uint64_t>((p * 37 + round * 11) % 50));
    }
    std::vector<uint8_t> expected;
    for (int p = 0; p < size; ++p) {
      const std::vector<uint8_t> theirs = Payload(2 + round, p, -1, counts[p]);
      expected.insert(expected.end(), theirs.begin(), theirs.end());
    }
    const std::vector<uint8_t> mine =
        Payload(2 + round, job->rank(), -1, counts[job->rank()]);
    std::vector<uint8_t> recv(expected.size(), 0xEE);
    ASSERT_TRUE(job->AllGatherV(mine, absl::MakeSpan(recv), counts).ok());
    ASSERT_EQ(recv, expected) << "round " << round;
  }
}

TEST(CommunicatorTest, BarrierWaitsForTheLastRank) {
  // The last rank enters late; no rank may leave before it entered. The
  // ranks share this machine's clock, so their times compare directly.
  const int size = job->size();
  if (job->rank() == size - 1) absl::SleepFor(absl::Milliseconds(300));
  int64_t times[2];  // entered, left (Unix nanoseconds)
  times[0] = absl::GetCurrentTimeNanos();
  ASSERT_TRUE(job->Barrier().ok());
  times[1] = absl::GetCurrentTimeNanos();
  std::vector<int64_t> all(2 * size);
  ASSERT_TRUE(
      job->AllGather(
             absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(times),
                                 sizeof(times)),
             absl::MakeSpan(reinterpret_cast<uint8_t*>(all.data()),
                            all.size() * sizeof(int64_t)))
          .ok());
  const int64_t last_entered = all[2 * (size - 1)];
  for (int p = 0; p < size; ++p) {
    EXPECT_GE(all[2 * p + 1], last_entered) << "rank " << p << " left early";
  }
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(job->Barrier().ok());
}

TEST(CommunicatorTest, RefusesBadArgumentsThenRefusesEverything) {
  // A communicator of its own: after a refusal it is unusable.
  auto other = CreateJobCommunicator(absl::Seconds(30));
  ASSERT_TRUE(other.ok()) << other.status();
  Communicator& comm = **other;
  // One byte more than the counts say, on every rank alike.
  const std::vector<uint64_t> counts(comm.size(), 1);
  std::vector<uint8_t> buffer(comm.size() + 1);
  const absl::Status status =
      comm.AllToAllV(buffer, counts, absl::MakeSpan(buffer), counts);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(comm.Broadcast(0, {}).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(comm.Barrier().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CommunicatorTest, RefusesRootsOutsideTheJob) {
  auto other = CreateJobCommunicator(absl::Seconds(30));
  ASSERT_TRUE(other.ok()) << other.status();
  const absl::Status status = (*other)->Broadcast((*other)->size(), {});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("root"), absl::string_view::npos) << status;
}

TEST(CommunicatorTest, AllGatherVRefusesCountsThatDisagreeWithTheSend) {
  auto other = CreateJobCommunicator(absl::Seconds(30));
  ASSERT_TRUE(other.ok()) << other.status();
  Communicator& comm = **other;
  // Every rank counts its own block as 2 bytes but sends 3.
  const std::vector<uint64_t> counts(comm.size(), 2);
  const std::vector<uint8_t> send(3);
  std::vector<uint8_t> recv(2 * comm.size());
  const absl::Status status =
      comm.AllGatherV(send, absl::MakeSpan(recv), counts);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("AllGatherV"), absl::string_view::npos)
      << status;
  EXPECT_EQ(comm.Barrier().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ringmoe::parallel

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  auto job = ringmoe::parallel::CreateJobCommunicator(absl::Seconds(30));
  if (!job.ok()) {
    std::fprintf(stderr, "%s\n", job.status().ToString().c_str());
    return 1;
  }
  ringmoe::parallel::job = job->get();
  ringmoe::parallel::PrintOnlyFailuresUnlessRankZero((*job)->rank());
  return RUN_ALL_TESTS();
}

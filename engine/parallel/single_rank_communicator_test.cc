#include "engine/parallel/single_rank_communicator.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe::parallel {
namespace {

TEST(SingleRankCommunicatorTest, EveryCollectiveCopiesToItself) {
  SingleRankCommunicator comm(absl::Seconds(5));
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.timeout(), absl::Seconds(5));
  const std::vector<uint8_t> send = {1, 2, 3, 4};
  std::vector<uint8_t> recv(4);
  ASSERT_TRUE(comm.AllToAll(send, absl::MakeSpan(recv)).ok());
  EXPECT_EQ(recv, send);
  recv.assign(4, 0);
  const std::vector<uint64_t> counts = {4};
  ASSERT_TRUE(comm.AllToAllV(send, counts, absl::MakeSpan(recv), counts).ok());
  EXPECT_EQ(recv, send);
  recv.assign(4, 0);
  ASSERT_TRUE(comm.AllGather(send, absl::MakeSpan(recv)).ok());
  EXPECT_EQ(recv, send);
  recv.assign(4, 0);
  ASSERT_TRUE(comm.AllGatherV(send, absl::MakeSpan(recv), counts).ok());
  EXPECT_EQ(recv, send);
  std::vector<uint8_t> buffer = send;
  ASSERT_TRUE(comm.Broadcast(0, absl::MakeSpan(buffer)).ok());
  EXPECT_EQ(buffer, send);
  EXPECT_TRUE(comm.Barrier().ok());
  // Empty buffers (null data) too.
  const std::vector<uint64_t> zero = {0};
  EXPECT_TRUE(comm.AllToAllV({}, zero, {}, zero).ok());
  EXPECT_TRUE(comm.AllGather({}, {}).ok());
  EXPECT_TRUE(comm.AllGatherV({}, {}, zero).ok());
}

TEST(SingleRankCommunicatorTest, UnusableAfterARefusedCall) {
  SingleRankCommunicator comm(absl::Seconds(5));
  std::vector<uint8_t> buffer(4);
  const std::vector<uint64_t> three = {3};
  EXPECT_EQ(comm.AllToAllV(buffer, three, absl::MakeSpan(buffer), three).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status status = comm.Barrier();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("must be aborted"), absl::string_view::npos)
      << status;
  EXPECT_EQ(comm.Broadcast(0, absl::MakeSpan(buffer)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(SingleRankCommunicatorTest, AbortExitsWithTheReason) {
  SingleRankCommunicator comm(absl::Seconds(5));
  EXPECT_EXIT(comm.Abort(absl::DeadlineExceededError("step 7 timed out")),
              testing::ExitedWithCode(1), "step 7 timed out");
}

}  // namespace
}  // namespace ringmoe::parallel

#include "engine/parallel/collective_args.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe::parallel {
namespace {

using ::absl::StatusCode;

TEST(CollectiveArgsTest, AllToAllNeedsEqualBuffersOfWholeBlocks) {
  std::vector<uint8_t> twelve(12), eight(8);
  EXPECT_TRUE(CheckAllToAll(4, twelve, absl::MakeSpan(twelve)).ok());
  EXPECT_TRUE(CheckAllToAll(3, {}, {}).ok());
  EXPECT_EQ(CheckAllToAll(4, twelve, absl::MakeSpan(eight)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckAllToAll(5, twelve, absl::MakeSpan(twelve)).code(),
            StatusCode::kInvalidArgument);
}

TEST(CollectiveArgsTest, AllToAllVCountsMustSumToTheBuffers) {
  std::vector<uint8_t> send(6), recv(9);
  const std::vector<uint64_t> send_counts = {0, 2, 4};
  const std::vector<uint64_t> recv_counts = {5, 2, 2};
  EXPECT_TRUE(
      CheckAllToAllV(3, 1, send, send_counts, absl::MakeSpan(recv), recv_counts)
          .ok());
  // One count per rank.
  EXPECT_EQ(
      CheckAllToAllV(2, 1, send, send_counts, absl::MakeSpan(recv), recv_counts)
          .code(),
      StatusCode::kInvalidArgument);
  // Sums that miss the buffers.
  std::vector<uint8_t> short_recv(8);
  const absl::Status status = CheckAllToAllV(
      3, 1, send, send_counts, absl::MakeSpan(short_recv), recv_counts);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("recv counts to 9 for 8 bytes"),
            absl::string_view::npos)
      << status;
  // Sums past 64 bits.
  const std::vector<uint64_t> huge = {UINT64_MAX, 2, 4};
  EXPECT_EQ(CheckAllToAllV(3, 1, send, huge, absl::MakeSpan(recv), recv_counts)
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(CollectiveArgsTest, AllToAllVBlockToItselfMustMatch) {
  std::vector<uint8_t> send(6), recv(6);
  const std::vector<uint64_t> send_counts = {1, 2, 3};
  const std::vector<uint64_t> recv_counts = {3, 1, 2};
  // Rank 1 sends itself 2 bytes but expects 1.
  const absl::Status status = CheckAllToAllV(3, 1, send, send_counts,
                                             absl::MakeSpan(recv), recv_counts);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("rank 1 sends itself 2 bytes"),
            absl::string_view::npos)
      << status;
}

TEST(CollectiveArgsTest, BroadcastRootMustBeARank) {
  EXPECT_TRUE(CheckBroadcast(2, 0).ok());
  EXPECT_TRUE(CheckBroadcast(2, 1).ok());
  EXPECT_EQ(CheckBroadcast(2, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckBroadcast(2, -1).code(), StatusCode::kInvalidArgument);
}

TEST(CollectiveArgsTest, AllGatherReceivesOneBlockPerRank) {
  std::vector<uint8_t> send(5), recv(15), wrong(14);
  EXPECT_TRUE(CheckAllGather(3, send, absl::MakeSpan(recv)).ok());
  EXPECT_EQ(CheckAllGather(3, send, absl::MakeSpan(wrong)).code(),
            StatusCode::kInvalidArgument);
}

TEST(CollectiveArgsTest, AllGatherVCountsMatchTheBuffersAndTheSend) {
  std::vector<uint8_t> send(5), recv(12);
  const std::vector<uint64_t> counts = {4, 5, 0, 3};
  EXPECT_TRUE(CheckAllGatherV(4, 1, send, absl::MakeSpan(recv), counts).ok());
  // Rank 0 counts its own block as 4 bytes: it sends 5.
  absl::Status status =
      CheckAllGatherV(4, 0, send, absl::MakeSpan(recv), counts);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("rank 0 sends 5 bytes"),
            absl::string_view::npos)
      << status;
  // The counts must sum to recv, one per rank.
  std::vector<uint8_t> longer(13);
  EXPECT_EQ(CheckAllGatherV(4, 1, send, absl::MakeSpan(longer), counts).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckAllGatherV(3, 1, send, absl::MakeSpan(recv), counts).code(),
            StatusCode::kInvalidArgument);
  const std::vector<uint64_t> overflowing = {UINT64_MAX, 5, 1, 0};
  status = CheckAllGatherV(4, 1, send, absl::MakeSpan(recv), overflowing);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("overflow"), absl::string_view::npos)
      << status;
}

TEST(CollectiveArgsTest, BlockOffsetsArePrefixSums) {
  EXPECT_EQ(BlockOffsets(std::vector<uint64_t>{3, 0, 5, 1}),
            (std::vector<uint64_t>{0, 3, 3, 8}));
  EXPECT_TRUE(BlockOffsets({}).empty());
}

}  // namespace
}  // namespace ringmoe::parallel

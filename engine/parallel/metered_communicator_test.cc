#include "engine/parallel/metered_communicator.h"

#include <cstdint>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace ringmoe::parallel {
namespace {

// Rank `rank` of `size`: every collective succeeds without moving data
// (or fails with `failure` when set), after `delay`; AllToAllVWithMatrix
// is counted apart and keeps the matrix it was given.
class FakeCommunicator : public Communicator {
 public:
  FakeCommunicator(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Duration timeout() const override { return absl::Seconds(7); }
  absl::Status AllToAll(absl::Span<const uint8_t>,
                        absl::Span<uint8_t>) override {
    return Done();
  }
  absl::Status AllToAllV(absl::Span<const uint8_t>, absl::Span<const uint64_t>,
                         absl::Span<uint8_t>,
                         absl::Span<const uint64_t>) override {
    return Done();
  }
  absl::Status Broadcast(int, absl::Span<uint8_t>) override { return Done(); }
  absl::Status AllGather(absl::Span<const uint8_t>,
                         absl::Span<uint8_t>) override {
    return Done();
  }
  absl::Status AllGatherV(absl::Span<const uint8_t>, absl::Span<uint8_t>,
                          absl::Span<const uint64_t>) override {
    return Done();
  }
  absl::Status AllToAllVWithMatrix(absl::Span<const uint8_t>,
                                   absl::Span<uint8_t>,
                                   const CountMatrix& counts) override {
    ++matrix_calls;
    matrix = counts;
    return Done();
  }
  absl::Status Barrier() override { return Done(); }
  [[noreturn]] void Abort(const absl::Status&) override { std::abort(); }

  absl::Status failure;
  absl::Duration delay;
  int calls = 0;
  int matrix_calls = 0;
  CountMatrix matrix;

 private:
  absl::Status Done() {
    ++calls;
    absl::SleepFor(delay);
    return failure;
  }

  const int rank_, size_;
};

TEST(MeteredCommunicatorTest, CountsPayloadToAndFromOtherRanks) {
  FakeCommunicator inner(/*rank=*/1, /*size=*/3);
  MeteredCommunicator metered(&inner);
  EXPECT_EQ(metered.rank(), 1);
  EXPECT_EQ(metered.size(), 3);
  EXPECT_EQ(metered.timeout(), absl::Seconds(7));

  std::vector<uint8_t> send(30), recv(30);
  // Blocks of 10 bytes: two go to peers, two come from them.
  ASSERT_TRUE(metered.AllToAll(send, absl::MakeSpan(recv)).ok());
  CollectiveTraffic t = metered.traffic();
  EXPECT_EQ(t.bytes_sent, 20u);
  EXPECT_EQ(t.bytes_received, 20u);
  EXPECT_EQ(t.collectives, 1u);

  // The block to this rank itself (index 1) is not traffic.
  const std::vector<uint64_t> send_counts = {4, 100, 6};
  const std::vector<uint64_t> recv_counts = {7, 100, 0};
  std::vector<uint8_t> vsend(110), vrecv(107);
  ASSERT_TRUE(
      metered.AllToAllV(vsend, send_counts, absl::MakeSpan(vrecv), recv_counts)
          .ok());
  t = metered.traffic();
  EXPECT_EQ(t.bytes_sent, 20u + 10u);
  EXPECT_EQ(t.bytes_received, 20u + 7u);

  std::vector<uint8_t> block(5), all(15);
  ASSERT_TRUE(metered.AllGather(block, absl::MakeSpan(all)).ok());
  t = metered.traffic();
  EXPECT_EQ(t.bytes_sent, 30u + 10u);
  EXPECT_EQ(t.bytes_received, 27u + 10u);

  // Ragged blocks: this rank's 5 bytes to each of two peers; the peers'
  // blocks of 3 and 0 bytes in.
  const std::vector<uint64_t> gathered = {3, 5, 0};
  std::vector<uint8_t> ragged(8);
  ASSERT_TRUE(metered.AllGatherV(block, absl::MakeSpan(ragged), gathered).ok());
  t = metered.traffic();
  EXPECT_EQ(t.bytes_sent, 40u + 10u);
  EXPECT_EQ(t.bytes_received, 37u + 3u);

  std::vector<uint8_t> buffer(8);
  ASSERT_TRUE(metered.Broadcast(/*root=*/0, absl::MakeSpan(buffer)).ok());
  t = metered.traffic();
  EXPECT_EQ(t.bytes_sent, 50u);
  EXPECT_EQ(t.bytes_received, 40u + 8u);
  ASSERT_TRUE(metered.Broadcast(/*root=*/1, absl::MakeSpan(buffer)).ok());
  ASSERT_TRUE(metered.Barrier().ok());
  t = metered.traffic();
  EXPECT_EQ(t.bytes_sent, 50u + 16u);
  EXPECT_EQ(t.bytes_received, 48u);
  EXPECT_EQ(t.collectives, 7u);
  EXPECT_EQ(inner.calls, 7);
}

TEST(MeteredCommunicatorTest, ForwardsAllToAllVWithMatrixAsSuch) {
  FakeCommunicator inner(/*rank=*/1, /*size=*/3);
  MeteredCommunicator metered(&inner);
  // Row counts, 4 bytes a row: rank 1 sends rows {2, 9, 3} and receives
  // its column {5, 9, 0}; its block to itself is not traffic.
  const std::vector<uint64_t> rows = {1, 5, 7,  //
                                      2, 9, 3,  //
                                      4, 0, 6};
  std::vector<uint8_t> send(14 * 4), recv(14 * 4);
  ASSERT_TRUE(metered
                  .AllToAllVWithMatrix(send, absl::MakeSpan(recv),
                                       {rows, /*unit_bytes=*/4})
                  .ok());
  // Forwarded with the matrix itself (not as AllToAllV, which would make
  // a hierarchical communicator gather the counts again).
  EXPECT_EQ(inner.matrix_calls, 1);
  EXPECT_EQ(inner.calls, 1);
  EXPECT_EQ(inner.matrix.units.data(), rows.data());
  EXPECT_EQ(inner.matrix.unit_bytes, 4u);
  EXPECT_FALSE(inner.matrix.transposed);
  CollectiveTraffic t = metered.traffic();
  EXPECT_EQ(t.bytes_sent, (2u + 3u) * 4);
  EXPECT_EQ(t.bytes_received, 5u * 4);
  EXPECT_EQ(t.collectives, 1u);

  // The answer goes back along the transpose: rank 1 sends its column and
  // receives its row.
  std::vector<uint8_t> back(14 * 2);
  ASSERT_TRUE(metered
                  .AllToAllVWithMatrix(back, absl::MakeSpan(back),
                                       {rows, /*unit_bytes=*/2,
                                        /*transposed=*/true})
                  .ok());
  EXPECT_TRUE(inner.matrix.transposed);
  t = metered.traffic();
  EXPECT_EQ(t.bytes_sent, 20u + 5u * 2);
  EXPECT_EQ(t.bytes_received, 20u + (2u + 3u) * 2);
  EXPECT_EQ(t.collectives, 2u);
  EXPECT_EQ(inner.matrix_calls, 2);
}

TEST(MeteredCommunicatorTest, CountsTimeAndFailedCallsWithoutTheirBytes) {
  FakeCommunicator inner(/*rank=*/0, /*size=*/2);
  MeteredCommunicator metered(&inner);
  inner.delay = absl::Milliseconds(20);
  std::vector<uint8_t> send(16), recv(16);
  ASSERT_TRUE(metered.AllToAll(send, absl::MakeSpan(recv)).ok());
  inner.failure = absl::DeadlineExceededError("AllToAll: rank 1 is late");
  const absl::Status failed = metered.AllToAll(send, absl::MakeSpan(recv));
  EXPECT_EQ(failed, inner.failure);
  const CollectiveTraffic t = metered.traffic();
  EXPECT_EQ(t.collectives, 2u);
  EXPECT_EQ(t.bytes_sent, 8u);
  EXPECT_EQ(t.bytes_received, 8u);
  EXPECT_GE(t.seconds, 0.04);
  EXPECT_LT(t.seconds, 5.0);
}

TEST(MeteredCommunicatorTest, ARankAloneMovesNothing) {
  FakeCommunicator inner(/*rank=*/0, /*size=*/1);
  MeteredCommunicator metered(&inner);
  std::vector<uint8_t> send(16), recv(16);
  ASSERT_TRUE(metered.AllToAll(send, absl::MakeSpan(recv)).ok());
  ASSERT_TRUE(metered.AllGather(send, absl::MakeSpan(recv)).ok());
  ASSERT_TRUE(metered.Broadcast(0, absl::MakeSpan(recv)).ok());
  const CollectiveTraffic t = metered.traffic();
  EXPECT_EQ(t.bytes_sent, 0u);
  EXPECT_EQ(t.bytes_received, 0u);
  EXPECT_EQ(t.collectives, 3u);
}

}  // namespace
}  // namespace ringmoe::parallel

#include "memory_ring/copy_engine_tier.h"

#include <cstring>
#include <future>
#include <numeric>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "memory_ring/host_buffer.h"

namespace ringmoe::memory_ring {
namespace {

absl::Status CopyAndWait(Tier& tier, std::vector<CopyPiece> pieces,
                         uint8_t* dst) {
  std::promise<absl::Status> done;
  tier.CopyAsync(std::move(pieces), dst, tier.RecordComputeFence(),
                 [&](absl::Status s) { done.set_value(s); });
  return done.get_future().get();
}

TEST(CopyEngineTierTest, CopiesPiecesFromTheirSources) {
  std::unique_ptr<TierBuffer> a = NewHostBuffer(100), b = NewHostBuffer(50);
  std::iota(a->data(), a->data() + 100, 0);
  std::iota(b->data(), b->data() + 50, 200);
  std::unique_ptr<Tier> tier = CreateCopyEngineTier({a.get(), b.get()}, 0);
  EXPECT_EQ(tier->name(), "host_to_device");
  auto dst = tier->Allocate(16);
  ASSERT_TRUE(dst.ok());
  ASSERT_TRUE(
      CopyAndWait(*tier, {{0, 10, 4, 0}, {1, 46, 4, 8}}, (*dst)->data()).ok());
  const uint8_t want_a[] = {10, 11, 12, 13}, want_b[] = {246, 247, 248, 249};
  EXPECT_EQ(std::memcmp((*dst)->data(), want_a, 4), 0);
  EXPECT_EQ(std::memcmp((*dst)->data() + 8, want_b, 4), 0);
}

TEST(CopyEngineTierTest, OutOfRangePieceIsNamed) {
  std::unique_ptr<TierBuffer> a = NewHostBuffer(10);
  std::unique_ptr<Tier> tier = CreateCopyEngineTier({a.get()}, 0);
  auto dst = tier->Allocate(16);
  const absl::Status s = CopyAndWait(*tier, {{0, 8, 4, 0}}, (*dst)->data());
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("offset 8"), absl::string_view::npos) << s;
  EXPECT_EQ(CopyAndWait(*tier, {{3, 0, 1, 0}}, (*dst)->data()).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(CopyEngineTierTest, BandwidthLimitHoldsCopiesBack) {
  std::unique_ptr<TierBuffer> a = NewHostBuffer(1 << 20);
  // 1 MiB at 20 MiB/s: at least 50 ms.
  std::unique_ptr<Tier> tier = CreateCopyEngineTier({a.get()}, 20 << 20);
  auto dst = tier->Allocate(1 << 20);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(CopyAndWait(*tier, {{0, 0, 1 << 20, 0}}, (*dst)->data()).ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(45));
}

}  // namespace
}  // namespace ringmoe::memory_ring

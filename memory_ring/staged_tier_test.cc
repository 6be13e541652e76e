#include "memory_ring/staged_tier.h"

#include <future>
#include <numeric>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "memory_ring/copy_engine_tier.h"
#include "memory_ring/fake_tier.h"
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

struct ThreeTiers {
  std::unique_ptr<TierBuffer> host = NewHostBuffer(256);
  std::vector<std::unique_ptr<TierBuffer>> staging;
  FakeTier* disk = nullptr;
  std::unique_ptr<Tier> tier;

  explicit ThreeTiers(int disk_threads) {
    std::iota(host->data(), host->data() + 256, 0);
    staging.push_back(NewHostBuffer(64));
    staging.push_back(NewHostBuffer(64));
    auto disk_tier =
        std::make_unique<FakeTier>(absl::Milliseconds(1), disk_threads);
    disk = disk_tier.get();
    tier = CreateStagedTier(
        CreateCopyEngineTier({host.get(), staging[0].get(), staging[1].get()},
                             0),
        /*host_sources=*/1, {staging[0].get(), staging[1].get()},
        std::move(disk_tier));
  }
};

TEST(StagedTierTest, SectionsMixHostAndDiskPieces) {
  for (int threads : {0, 2}) {
    ThreeTiers s(threads);
    auto slot = s.tier->Allocate(64);
    ASSERT_TRUE(slot.ok());
    uint8_t* dst = (*slot)->data();
    // Host bytes 10..17 at 0; disk source 0 (tier source 1) bytes
    // 1000..1015 at 16; disk source 3 bytes 7..14 at 40.
    ASSERT_TRUE(CopyAndWait(*s.tier,
                            {{0, 10, 8, 0}, {1, 1000, 16, 16}, {4, 7, 8, 40}},
                            dst)
                    .ok());
    for (int i = 0; i < 8; ++i) EXPECT_EQ(dst[i], 10 + i);
    for (int i = 0; i < 16; ++i) {
      EXPECT_EQ(dst[16 + i], FakeTier::SourceByte(0, 1000 + i)) << i;
    }
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(dst[40 + i], FakeTier::SourceByte(3, 7 + i)) << i;
    }
    // Host-only sections go straight up; many disk sections reuse the two
    // staging buffers.
    for (int round = 0; round < 6; ++round) {
      ASSERT_TRUE(CopyAndWait(*s.tier, {{1, 64u * round, 32, 0}}, dst).ok());
      EXPECT_EQ(dst[31], FakeTier::SourceByte(0, 64u * round + 31));
    }
    ASSERT_TRUE(CopyAndWait(*s.tier, {{0, 200, 4, 60}}, dst).ok());
    EXPECT_EQ(dst[63], 203);
  }
}

TEST(StagedTierTest, DiskErrorsAndOversizedSectionsAreReported) {
  ThreeTiers s(2);
  auto slot = s.tier->Allocate(128);
  s.disk->FailSource(2);
  const absl::Status failed =
      CopyAndWait(*s.tier, {{0, 0, 4, 0}, {3, 0, 4, 8}}, (*slot)->data());
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss) << failed;
  s.disk->ClearFailure();
  // Both staging buffers came back: two more sections pass.
  EXPECT_TRUE(CopyAndWait(*s.tier, {{3, 0, 4, 8}}, (*slot)->data()).ok());
  EXPECT_TRUE(CopyAndWait(*s.tier, {{3, 0, 4, 8}}, (*slot)->data()).ok());
  EXPECT_EQ(CopyAndWait(*s.tier, {{1, 0, 16, 100}}, (*slot)->data()).code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace ringmoe::memory_ring

// The ring protocol with a fake tier that injects delays and errors.
#include "memory_ring/section_ring.h"

#include <random>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "memory_ring/fake_tier.h"

namespace ringmoe::memory_ring {
namespace {

// Section i: unequal sizes, from source i % 3 at an offset depending on i.
std::vector<CopyPiece> SectionPieces(int i) {
  const uint64_t size = 100 + (i * 37) % 400;
  return {{i % 3, static_cast<uint64_t>(i) * 1000, size / 2, 0},
          {i % 3, static_cast<uint64_t>(i) * 1000 + 5000, size - size / 2,
           size / 2}};
}

bool SlotHolds(const uint8_t* slot, const std::vector<CopyPiece>& pieces) {
  for (const CopyPiece& p : pieces) {
    for (uint64_t j = 0; j < p.size; ++j) {
      if (slot[p.dst_offset + j] !=
          FakeTier::SourceByte(p.source, p.offset + j))
        return false;
    }
  }
  return true;
}

struct RingCase {
  int slots;
  int depth;
};

class SectionRingTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(SectionRingTest, NoSlotReusedWhileComputeReadsIt) {
  const RingCase c = GetParam();
  FakeTier tier(absl::Milliseconds(1), /*threads=*/2);
  RingStats stats;
  auto ring = SectionRing::Create(&tier, 600, {c.slots, c.depth}, &stats);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::mt19937 rng(c.slots * 10 + c.depth);
  constexpr int kSections = 24;
  int enqueued = 0;
  // The schedule is announced in bursts of random length, as a batch's
  // routing reveals it.
  for (int i = 0; i < kSections; ++i) {
    while (enqueued <= i || (enqueued < kSections && rng() % 3 == 0)) {
      EXPECT_EQ((*ring)->Enqueue(SectionPieces(enqueued)), enqueued);
      ++enqueued;
    }
    auto slot = (*ring)->Acquire(i);
    ASSERT_TRUE(slot.ok()) << slot.status();
    const int index = i % c.slots;
    const uint64_t generation = (*ring)->SlotGeneration(index);
    EXPECT_TRUE(SlotHolds(*slot, SectionPieces(i))) << "section " << i;
    absl::SleepFor(absl::Microseconds(rng() % 3000));  // compute
    EXPECT_TRUE(SlotHolds(*slot, SectionPieces(i)))
        << "section " << i << " overwritten";
    EXPECT_EQ((*ring)->SlotGeneration(index), generation)
        << "slot refilled early";
    (*ring)->Release(i);
  }
  EXPECT_EQ(stats.sections_loaded, kSections);
  EXPECT_EQ(stats.load_errors, 0u);
}

INSTANTIATE_TEST_SUITE_P(SlotsAndDepths, SectionRingTest,
                         ::testing::Values(RingCase{2, 0}, RingCase{2, 1},
                                           RingCase{3, 0}, RingCase{3, 1},
                                           RingCase{3, 2}, RingCase{4, 0},
                                           RingCase{4, 1}, RingCase{4, 2},
                                           RingCase{4, 3}),
                         [](const auto& info) {
                           return "K" + std::to_string(info.param.slots) +
                                  "_d" + std::to_string(info.param.depth);
                         });

TEST(SectionRingTest, PrefetchDepthBoundsLoadsAhead) {
  for (int depth = 0; depth < 4; ++depth) {
    FakeTier tier(absl::ZeroDuration(), /*threads=*/0);  // copies finish inline
    RingStats stats;
    auto ring = SectionRing::Create(&tier, 600, {4, depth}, &stats);
    ASSERT_TRUE(ring.ok());
    for (int i = 0; i < 10; ++i) (*ring)->Enqueue(SectionPieces(i));
    // The first sections load ahead of compute, up to the depth.
    EXPECT_EQ(tier.copies_started(), depth);
    ASSERT_TRUE((*ring)->Acquire(0).ok());
    EXPECT_EQ(tier.copies_started(), 1 + depth);
    (*ring)->Release(0);
    ASSERT_TRUE((*ring)->Acquire(1).ok());
    EXPECT_EQ(tier.copies_started(), 2 + depth);
    // Sections loaded ahead were ready when asked for: no stall counted.
    if (depth > 0) {
      EXPECT_EQ(stats.stall_nanos, 0u);
    }
    (*ring)->Release(1);
  }
}

TEST(SectionRingTest, StallIsTheWaitForALoad) {
  FakeTier tier(absl::Milliseconds(20), /*threads=*/1);
  RingStats stats;
  auto ring = SectionRing::Create(&tier, 600, {2, 0}, &stats);
  ASSERT_TRUE(ring.ok());
  for (int i = 0; i < 5; ++i) {
    const auto ticket = (*ring)->Enqueue(SectionPieces(i));
    ASSERT_TRUE((*ring)->Acquire(ticket).ok());
    (*ring)->Release(ticket);
  }
  // Without prefetch every section is waited for, at least its delay.
  EXPECT_GE(stats.stall_seconds(), 5 * 0.020);
}

TEST(SectionRingTest, ExtraPiecesLoadIntoTheSameSlot) {
  FakeTier tier(absl::Milliseconds(1), 1);
  RingStats stats;
  auto ring = SectionRing::Create(&tier, 2000, {2, 1}, &stats);
  ASSERT_TRUE(ring.ok());
  const auto ticket = (*ring)->Enqueue({{1, 10, 100, 0}});
  std::vector<CopyPiece> extra = {{2, 300, 50, 1000}};
  auto slot = (*ring)->Acquire(ticket, extra);
  ASSERT_TRUE(slot.ok());
  EXPECT_TRUE(SlotHolds(*slot, {{1, 10, 100, 0}}));
  EXPECT_TRUE(SlotHolds(*slot, extra));
  EXPECT_EQ(stats.bytes_moved, 150u);
  (*ring)->Release(ticket);
}

TEST(SectionRingTest, RefillReplacesAnAcquiredSectionInPlace) {
  FakeTier tier(absl::Milliseconds(1), 2);
  RingStats stats;
  auto ring = SectionRing::Create(&tier, 600, {2, 1}, &stats);
  ASSERT_TRUE(ring.ok());
  const auto first = (*ring)->Enqueue(SectionPieces(0));
  const auto second = (*ring)->Enqueue(SectionPieces(1));
  EXPECT_EQ((*ring)->Refill(first, SectionPieces(5)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  auto slot = (*ring)->Acquire(first);
  ASSERT_TRUE(slot.ok());
  for (int turn : {5, 7, 8}) {
    auto refilled = (*ring)->Refill(first, SectionPieces(turn));
    ASSERT_TRUE(refilled.ok()) << refilled.status();
    EXPECT_EQ(*refilled, *slot);
    EXPECT_TRUE(SlotHolds(*refilled, SectionPieces(turn))) << turn;
  }
  tier.FailSource(1);
  auto failed = (*ring)->Refill(first, SectionPieces(4));  // source 1
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("source 1"), std::string::npos);
  tier.ClearFailure();
  (*ring)->Release(first);
  // The next section's slot was never touched by the refills.
  auto next = (*ring)->Acquire(second);
  ASSERT_TRUE(next.ok());
  EXPECT_TRUE(SlotHolds(*next, SectionPieces(1)));
  (*ring)->Release(second);
  EXPECT_EQ(stats.load_errors, 1u);
}

TEST(SectionRingTest, LoadErrorFailsThatSectionOnly) {
  FakeTier tier(absl::Milliseconds(1), 2);
  RingStats stats;
  auto ring = SectionRing::Create(&tier, 600, {3, 2}, &stats);
  ASSERT_TRUE(ring.ok());
  tier.FailSource(1);
  for (int i = 0; i < 3; ++i) (*ring)->Enqueue(SectionPieces(i));
  ASSERT_TRUE((*ring)->Acquire(0).ok());
  (*ring)->Release(0);
  auto failed = (*ring)->Acquire(1);  // source 1
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("source 1"), std::string::npos);
  (*ring)->Release(1);
  tier.ClearFailure();
  ASSERT_TRUE((*ring)->Acquire(2).ok());
  (*ring)->Release(2);
  // Once the source reads again, so do its sections.
  const auto again = (*ring)->Enqueue(SectionPieces(4));  // source 1
  auto ok = (*ring)->Acquire(again);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(SlotHolds(*ok, SectionPieces(4)));
  (*ring)->Release(again);
  EXPECT_EQ(stats.load_errors, 1u);
}

TEST(SectionRingTest, ResetWithLoadsInFlightDoesNotDeadlock) {
  FakeTier tier(absl::Milliseconds(10), 2);
  RingStats stats;
  auto ring = SectionRing::Create(&tier, 600, {4, 3}, &stats);
  ASSERT_TRUE(ring.ok());
  for (int i = 0; i < 8; ++i) (*ring)->Enqueue(SectionPieces(i));
  ASSERT_TRUE((*ring)->Acquire(0).ok());  // starts 0..3, 1..3 still loading
  (*ring)->Reset();                       // abandon the step
  const auto next = (*ring)->Enqueue(SectionPieces(9));
  auto slot = (*ring)->Acquire(next);
  ASSERT_TRUE(slot.ok());
  EXPECT_TRUE(SlotHolds(*slot, SectionPieces(9)));
  (*ring)->Release(next);
}

TEST(SectionRingTest, RejectsBadOptions) {
  FakeTier tier(absl::ZeroDuration(), 0);
  RingStats stats;
  EXPECT_FALSE(SectionRing::Create(&tier, 100, {1, 0}, &stats).ok());
  EXPECT_FALSE(SectionRing::Create(&tier, 100, {3, 3}, &stats).ok());
  EXPECT_FALSE(SectionRing::Create(&tier, 100, {3, -1}, &stats).ok());
}

}  // namespace
}  // namespace ringmoe::memory_ring

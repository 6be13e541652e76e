#include "memory_ring/expert_cache.h"

#include <vector>

#include "gtest/gtest.h"
#include "memory_ring/fake_tier.h"

namespace ringmoe::memory_ring {
namespace {

std::vector<uint8_t> Bytes(int key) {
  return std::vector<uint8_t>(64, static_cast<uint8_t>(key));
}

TEST(ExpertCacheTest, KeepsTheMostFrequentExperts) {
  FakeTier tier(absl::ZeroDuration(), 0);
  RingStats stats;
  auto cache = ExpertCache::Create(&tier, /*capacity_bytes=*/200,
                                   /*entry_bytes=*/64, &stats);
  ASSERT_TRUE(cache.ok());
  ASSERT_EQ((*cache)->capacity_entries(), 3);
  auto use = [&](int key) {
    const uint8_t* hit = (*cache)->Lookup(key);
    if (hit == nullptr) {
      auto b = Bytes(key);
      EXPECT_TRUE((*cache)->Offer(key, b.data(), b.size()).ok());
    } else {
      EXPECT_EQ(hit[0], key);
      EXPECT_EQ(hit[63], key);
    }
  };
  for (int round = 0; round < 5; ++round) {
    use(1);
    use(2);
    use(3);
  }
  EXPECT_EQ(stats.cache_misses, 3u);
  EXPECT_EQ(stats.cache_hits, 12u);
  // A one-off expert does not evict the hot ones...
  use(4);
  EXPECT_FALSE((*cache)->Contains(4));
  EXPECT_EQ(stats.cache_evictions, 0u);
  // ...one used more often than the coldest does.
  for (int i = 0; i < 10; ++i) use(5);
  EXPECT_TRUE((*cache)->Contains(5));
  EXPECT_EQ(stats.cache_evictions, 1u);
  EXPECT_EQ(
      (*cache)->Contains(1) + (*cache)->Contains(2) + (*cache)->Contains(3), 2);
}

TEST(ExpertCacheTest, ZeroCapacityCachesNothing) {
  FakeTier tier(absl::ZeroDuration(), 0);
  RingStats stats;
  auto cache = ExpertCache::Create(&tier, 10, 64, &stats);
  ASSERT_TRUE(cache.ok());
  EXPECT_EQ((*cache)->capacity_entries(), 0);
  auto b = Bytes(1);
  EXPECT_EQ((*cache)->Lookup(1), nullptr);
  EXPECT_TRUE((*cache)->Offer(1, b.data(), b.size()).ok());
  EXPECT_EQ((*cache)->Lookup(1), nullptr);
}

}  // namespace
}  // namespace ringmoe::memory_ring

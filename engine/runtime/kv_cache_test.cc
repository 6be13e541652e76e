#include "engine/runtime/kv_cache.h"

#include "gtest/gtest.h"

namespace ringmoe::runtime {
namespace {

TEST(KvCacheTest, BlocksAreTakenAndReturned) {
  KvCache cache(/*num_layers=*/2, /*key_width=*/3, /*value_width=*/3,
                /*block_size=*/4, /*num_blocks=*/5);
  EXPECT_EQ(cache.BlocksNeeded(1, 9), 3);
  ASSERT_TRUE(cache.Grow(1, 9).ok());
  EXPECT_EQ(cache.Length(1), 9);
  EXPECT_EQ(cache.num_free_blocks(), 2);
  EXPECT_EQ(cache.BlocksNeeded(1, 12), 0);
  EXPECT_EQ(cache.BlocksNeeded(1, 13), 1);
  absl::Status full = cache.Grow(2, 13);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.num_free_blocks(), 2);  // nothing taken on failure
  EXPECT_EQ(cache.Length(2), 0);
  EXPECT_FALSE(cache.Grow(1, 3).ok());  // no shrinking
  cache.Release(1);
  EXPECT_EQ(cache.num_free_blocks(), 5);
  EXPECT_EQ(cache.Length(1), 0);
}

// Keys and values of different widths (and none: MLA), every row distinct.
TEST(KvCacheTest, RowsAreDistinctAndViewsAddressThem) {
  const int64_t layers = 3, key_width = 5, block = 2;
  for (int64_t value_width : {5, 3, 0}) {
    KvCache cache(layers, key_width, value_width, block, 8);
    ASSERT_TRUE(cache.Grow(7, 3).ok());
    ASSERT_TRUE(cache.Grow(9, 4).ok());
    for (SequenceId s : {7, 9}) {
      for (int64_t l = 0; l < layers; ++l) {
        for (int64_t p = 0; p < cache.Length(s); ++p) {
          for (int64_t d = 0; d < key_width; ++d)
            cache.Key(s, l, p)[d] = s * 1000 + l * 100 + p * 10 + d;
          for (int64_t d = 0; d < value_width; ++d)
            cache.Value(s, l, p)[d] = -(s * 1000 + l * 100 + p * 10 + d);
        }
      }
    }
    for (SequenceId s : {7, 9}) {
      for (int64_t l = 0; l < layers; ++l) {
        KvCache::LayerView view;
        cache.View(s, l, &view);
        for (int64_t p = 0; p < cache.Length(s); ++p) {
          const float* k = view.k_blocks[p / block] + (p % block) * key_width;
          for (int64_t d = 0; d < key_width; ++d) {
            EXPECT_EQ(k[d], s * 1000 + l * 100 + p * 10 + d);
          }
          if (value_width == 0) {
            EXPECT_EQ(view.v_blocks[p / block], view.k_blocks[p / block]);
            continue;
          }
          const float* v = view.v_blocks[p / block] + (p % block) * value_width;
          for (int64_t d = 0; d < value_width; ++d) {
            EXPECT_EQ(v[d], -(s * 1000 + l * 100 + p * 10 + d))
                << "value width " << value_width;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ringmoe::runtime

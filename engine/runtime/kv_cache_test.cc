#include "engine/runtime/kv_cache.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe::runtime {
namespace {

std::vector<KvCache::Layer> FullLayers(int64_t n, int64_t key_width,
                                       int64_t value_width) {
  return std::vector<KvCache::Layer>(n, {key_width, value_width, 0});
}

// Full attention, windows smaller than a block (3), between one and two
// blocks (6) and longer than any sequence here (1000); blocks of 4.
constexpr int64_t kBlock = 4;
std::vector<KvCache::Layer> MixedLayers(int64_t value_width = 2) {
  return {{3, value_width, 0},
          {3, value_width, 3},
          {3, value_width, 6},
          {3, value_width, 1000}};
}

// The blocks of `layer` a sequence grown from `old` to `length` positions
// must hold, from the definition: the query at p >= old reads positions
// [p + 1 - window, p], so positions [old + 1 - window, length) stay.
std::set<int64_t> NeededBlocks(const KvCache::Layer& layer, int64_t old,
                               int64_t length) {
  const int64_t first =
      layer.window > 0 ? std::max<int64_t>(0, old + 1 - layer.window) : 0;
  std::set<int64_t> blocks;
  for (int64_t p = first; p < length; ++p) blocks.insert(p / kBlock);
  return blocks;
}

std::set<int64_t> HeldBlocks(const KvCache& cache, SequenceId seq,
                             int64_t layer) {
  KvCache::LayerView view;
  cache.View(seq, layer, &view);
  std::set<int64_t> held;
  for (size_t i = 0; i < view.k_blocks.size(); ++i) {
    if (view.k_blocks[i] != nullptr) held.insert(i);
  }
  return held;
}

// Grows one sequence through `lengths` on a cache of `num_blocks` blocks;
// false as soon as a Grow fails.
bool Replay(const std::vector<KvCache::Layer>& layers, int64_t num_blocks,
            const std::vector<int64_t>& lengths) {
  KvCache cache(layers, kBlock, num_blocks);
  for (int64_t length : lengths) {
    if (!cache.Grow(1, length).ok()) return false;
  }
  return true;
}

TEST(KvCacheTest, BlocksAreTakenAndReturned) {
  // A block holds 4 positions of one layer: 9 positions of 2 layers take 6.
  KvCache cache(FullLayers(2, 3, 3), /*block_size=*/4, /*num_blocks=*/10);
  EXPECT_EQ(cache.BlocksNeeded(1, 9), 6);
  ASSERT_TRUE(cache.Grow(1, 9).ok());
  EXPECT_EQ(cache.Length(1), 9);
  EXPECT_EQ(cache.BlocksHeld(1), 6);
  EXPECT_EQ(cache.num_free_blocks(), 4);
  EXPECT_EQ(cache.BlocksNeeded(1, 12), 0);
  EXPECT_EQ(cache.BlocksNeeded(1, 13), 2);
  absl::Status full = cache.Grow(2, 13);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(cache.num_free_blocks(), 4);  // nothing taken on failure
  EXPECT_EQ(cache.Length(2), 0);
  EXPECT_FALSE(cache.Grow(1, 3).ok());  // no shrinking
  cache.Release(1);
  EXPECT_EQ(cache.num_free_blocks(), 10);
  EXPECT_EQ(cache.Length(1), 0);
  EXPECT_EQ(cache.BlocksHeld(1), 0);
}

// Keys and values of different widths (and none: MLA), every row distinct.
TEST(KvCacheTest, RowsAreDistinctAndViewsAddressThem) {
  const int64_t layers = 3, key_width = 5, block = 2;
  for (int64_t value_width : {5, 3, 0}) {
    KvCache cache(FullLayers(layers, key_width, value_width), block,
                  layers * 8);
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

TEST(KvCacheTest, DecodeReturnsWindowBlocksAsSoonAsNoQueryReadsThem) {
  // One layer, window 3, blocks of 4, one position per step. Growing from
  // `old`, the query at old reads from old - 2: block 0 goes when old
  // reaches 6 (the Grow to 7), block 1 when it reaches 10.
  KvCache cache({{2, 2, 3}}, kBlock, 8);
  const std::vector<std::pair<int64_t, int64_t>> free_after = {
      {1, 7}, {4, 7}, {5, 6}, {6, 6}, {7, 7}, {8, 7}, {9, 6}, {10, 6}, {11, 7}};
  int64_t length = 0;
  for (const auto& [to, free] : free_after) {
    while (length < to) ASSERT_TRUE(cache.Grow(1, ++length).ok());
    EXPECT_EQ(cache.num_free_blocks(), free) << "length " << length;
  }
  EXPECT_EQ(HeldBlocks(cache, 1, 0), (std::set<int64_t>{2}));
}

// Chunked growth of two sequences over every mix of windows: after each
// Grow each layer holds exactly the blocks some query from the chunk's
// first position on can read, BlocksNeeded matches what Grow took, and the
// pool's count agrees.
TEST(KvCacheTest, ChunkedGrowthHoldsExactlyTheBlocksQueriesCanRead) {
  const std::vector<KvCache::Layer> layers = MixedLayers();
  for (int64_t chunk : {1, 2, 3, 5, 8, 13}) {
    KvCache cache(layers, kBlock, 200);
    for (int64_t step = 0; step < 60 / chunk; ++step) {
      for (SequenceId seq : {1, 2}) {
        // The second sequence grows by one position more, so the two
        // sequences' chunks end at different offsets of their blocks.
        const int64_t old = cache.Length(seq);
        const int64_t length = old + chunk + (seq == 2 ? 1 : 0);
        const int64_t need = cache.BlocksNeeded(seq, length);
        const int64_t free = cache.num_free_blocks();
        const int64_t held = cache.BlocksHeld(seq);
        ASSERT_TRUE(cache.Grow(seq, length).ok());
        int64_t now_held = 0;
        for (int64_t l = 0; l < static_cast<int64_t>(layers.size()); ++l) {
          const std::set<int64_t> want = NeededBlocks(layers[l], old, length);
          EXPECT_EQ(HeldBlocks(cache, seq, l), want)
              << "chunk " << chunk << " layer " << l << " " << old << ".."
              << length;
          now_held += static_cast<int64_t>(want.size());
        }
        EXPECT_EQ(cache.BlocksHeld(seq), now_held);
        const int64_t taken = now_held - held;  // net of those returned
        EXPECT_EQ(free - cache.num_free_blocks(), taken);
        EXPECT_EQ(need, std::max<int64_t>(0, taken));
      }
    }
    int64_t held = 0;
    for (SequenceId seq : {1, 2}) held += cache.BlocksHeld(seq);
    EXPECT_EQ(cache.num_free_blocks(), cache.num_blocks() - held);
    cache.Release(1);
    cache.Release(2);
    EXPECT_EQ(cache.num_free_blocks(), cache.num_blocks());
  }
}

// Grow succeeds with exactly BlocksNeeded free blocks and fails, changing
// nothing, with one fewer: the same growth replayed on a pool cut so that
// only that many are free at the step.
TEST(KvCacheTest, BlocksNeededIsExactlyWhatGrowNeeds) {
  const std::vector<KvCache::Layer> layers = MixedLayers();
  for (int64_t chunk : {1, 3, 7}) {
    std::vector<int64_t> lengths;
    for (int64_t length = chunk; length <= 40; length += chunk)
      lengths.push_back(length);
    constexpr int64_t kBlocks = 100;
    KvCache cache(layers, kBlock, kBlocks);
    std::vector<int64_t> spare;  // free blocks beyond BlocksNeeded, per step
    for (int64_t length : lengths) {
      spare.push_back(cache.num_free_blocks() - cache.BlocksNeeded(1, length));
      ASSERT_TRUE(cache.Grow(1, length).ok());
    }
    for (size_t k = 0; k < lengths.size(); ++k) {
      const int64_t cut = spare[k];
      // Earlier steps must still fit in the smaller pools.
      if (k > 0 &&
          *std::min_element(spare.begin(), spare.begin() + k) < cut + 1) {
        continue;
      }
      const std::vector<int64_t> upto(lengths.begin(), lengths.begin() + k + 1);
      EXPECT_TRUE(Replay(layers, kBlocks - cut, upto))
          << "chunk " << chunk << " step " << k;
      EXPECT_FALSE(Replay(layers, kBlocks - cut - 1, upto))
          << "chunk " << chunk << " step " << k;
    }
  }
}

TEST(KvCacheTest, FailedGrowReturnsNothing) {
  KvCache cache({{2, 2, 2}, {2, 2, 0}}, kBlock, 8);
  ASSERT_TRUE(cache.Grow(1, 12).ok());  // 3 blocks per layer
  // 12 -> 20 returns blocks 0..1 of the windowed layer and takes 4.
  EXPECT_EQ(cache.BlocksNeeded(1, 20), 2);
  ASSERT_TRUE(cache.Grow(2, 1).ok());  // leaves none free
  const absl::Status status = cache.Grow(1, 20);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_EQ(cache.Length(1), 12);
  EXPECT_EQ(cache.BlocksHeld(1), 6);
  EXPECT_EQ(HeldBlocks(cache, 1, 0), (std::set<int64_t>{0, 1, 2}));
  EXPECT_EQ(cache.num_free_blocks(), 0);
}

// Rows written as positions arrive keep their values while blocks of other
// layers and of the other sequence are returned and handed out again.
TEST(KvCacheTest, HeldRowsKeepTheirContentsWhileBlocksAreReused) {
  for (int64_t value_width : {2, 0}) {
    const std::vector<KvCache::Layer> layers = MixedLayers(value_width);
    const int64_t num_layers = static_cast<int64_t>(layers.size());
    // Tight: the full and the 1000-wide layers keep everything, so the
    // windowed layers' returned blocks are what the others grow into.
    KvCache cache(layers, kBlock, 2 * 2 * 10 + 2 * 2 * 3);
    auto value = [](SequenceId s, int64_t l, int64_t p, int64_t d) {
      return static_cast<float>(s * 100000 + l * 10000 + p * 10 + d);
    };
    for (int64_t step = 0; step < 20; ++step) {
      for (SequenceId s : {1, 2}) {
        const int64_t old = cache.Length(s);
        const int64_t length = std::min<int64_t>(40, old + 1 + step % 4);
        if (length == old) continue;
        ASSERT_TRUE(cache.Grow(s, length).ok()) << s << " to " << length;
        for (int64_t l = 0; l < num_layers; ++l) {
          for (int64_t p = old; p < length; ++p) {
            for (int64_t d = 0; d < 3; ++d) {
              cache.Key(s, l, p)[d] = value(s, l, p, d);
            }
            for (int64_t d = 0; d < value_width; ++d) {
              cache.Value(s, l, p)[d] = -value(s, l, p, d);
            }
          }
        }
        for (SequenceId t : {1, 2}) {
          if (cache.Length(t) == 0) continue;
          for (int64_t l = 0; l < num_layers; ++l) {
            KvCache::LayerView view;
            cache.View(t, l, &view);
            for (int64_t p = 0; p < cache.Length(t); ++p) {
              const float* k = view.k_blocks[p / kBlock];
              if (k == nullptr) continue;
              const float* v = view.v_blocks[p / kBlock];
              EXPECT_EQ(k + p % kBlock * 3, cache.Key(t, l, p));
              for (int64_t d = 0; d < 3; ++d) {
                ASSERT_EQ(k[p % kBlock * 3 + d], value(t, l, p, d))
                    << "seq " << t << " layer " << l << " position " << p;
              }
              if (value_width == 0) {
                EXPECT_EQ(v, k);
                continue;
              }
              for (int64_t d = 0; d < value_width; ++d) {
                ASSERT_EQ(v[p % kBlock * value_width + d], -value(t, l, p, d))
                    << "seq " << t << " layer " << l << " position " << p;
              }
            }
          }
        }
      }
    }
    EXPECT_EQ(cache.Length(1), 40);
    EXPECT_EQ(cache.Length(2), 40);
    cache.Release(1);
    cache.Release(2);
    EXPECT_EQ(cache.num_free_blocks(), cache.num_blocks());
  }
}

// MaxBlocksHeld against every way to reach `length` with chunks of at most
// `max_chunk`: what a layer holds right after a Grow depends only on where
// that Grow started and ended, so the worst case is a replay to `old` then
// one Grow to `end`.
TEST(KvCacheTest, MaxBlocksHeldIsTheWorstCaseOverChunkings) {
  const std::vector<KvCache::Layer> layers = MixedLayers();
  for (int64_t max_chunk : {1, 2, 5, 9}) {
    for (int64_t length : {1, 3, 4, 7, 12, 17, 30}) {
      int64_t most = 0;
      for (int64_t old = 0; old < length; ++old) {
        for (int64_t end = old + 1; end <= std::min(length, old + max_chunk);
             ++end) {
          KvCache cache(layers, kBlock, 100);
          for (int64_t p = std::min(old, max_chunk); p < old; p += max_chunk)
            ASSERT_TRUE(cache.Grow(1, p).ok());
          ASSERT_TRUE(cache.Grow(1, old).ok());
          ASSERT_TRUE(cache.Grow(1, end).ok());
          most = std::max(most, cache.BlocksHeld(1));
        }
      }
      EXPECT_EQ(KvCache(layers, kBlock, 1).MaxBlocksHeld(length, max_chunk),
                most)
          << "length " << length << " chunk " << max_chunk;
    }
  }
  // Full attention: every position stays.
  EXPECT_EQ(KvCache(FullLayers(3, 2, 2), kBlock, 1).MaxBlocksHeld(9, 2), 9);
}

TEST(KvCacheTest, GrowLimitIsTheLongestGrowthThatFits) {
  const std::vector<KvCache::Layer> layers = MixedLayers();
  KvCache cache(layers, kBlock, 100);
  for (int64_t length : {0, 1, 6, 11, 20}) {
    ASSERT_TRUE(cache.Grow(1, length).ok());
    for (int64_t free = 0; free < 14; ++free) {
      const int64_t limit = cache.GrowLimit(1, free);
      EXPECT_GE(limit, length);
      EXPECT_LE(cache.BlocksNeeded(1, limit), free) << length << " " << free;
      EXPECT_GT(cache.BlocksNeeded(1, limit + 1), free)
          << length << " " << free;
    }
  }
  EXPECT_EQ(cache.GrowLimit(2, 9), 8);  // a new sequence: 4 layers a block
}

// A ledger given the same growth and releases as a cache answers every
// planning query as the cache does, and fails a Grow exactly when it does.
TEST(KvCacheTest, LedgerAccountsAsTheCacheDoes) {
  const std::vector<KvCache::Layer> layers = MixedLayers();
  KvCache cache(layers, kBlock, 30);
  KvCache ledger = KvCache::Ledger(layers, kBlock, 30);
  EXPECT_EQ(ledger.num_blocks(), cache.num_blocks());
  EXPECT_EQ(ledger.MaxBlocksHeld(50, 7), cache.MaxBlocksHeld(50, 7));
  const struct {
    SequenceId seq;
    int64_t length;  // 0: release
  } ops[] = {{1, 5}, {2, 9}, {1, 6}, {3, 20}, {2, 17}, {1, 0},
             {3, 21}, {4, 30}, {2, 40}, {3, 0}, {4, 33}, {2, 41}};
  for (const auto& op : ops) {
    for (SequenceId s = 1; s <= 4; ++s) {
      ASSERT_EQ(ledger.Length(s), cache.Length(s));
      ASSERT_EQ(ledger.BlocksHeld(s), cache.BlocksHeld(s));
      ASSERT_EQ(ledger.BlocksNeeded(s, ledger.Length(s) + 3),
                cache.BlocksNeeded(s, cache.Length(s) + 3));
      ASSERT_EQ(ledger.GrowLimit(s, 4), cache.GrowLimit(s, 4));
    }
    if (op.length == 0) {
      cache.Release(op.seq);
      ledger.Release(op.seq);
    } else {
      const absl::Status want = cache.Grow(op.seq, op.length);
      EXPECT_EQ(ledger.Grow(op.seq, op.length).code(), want.code())
          << op.seq << " to " << op.length;
    }
    ASSERT_EQ(ledger.num_free_blocks(), cache.num_free_blocks());
  }
}

}  // namespace
}  // namespace ringmoe::runtime

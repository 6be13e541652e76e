// A paged key/value cache whose sliding-window layers give back the blocks
// no query can read any more.
//
// Design. The pool is one allocation of num_blocks equal blocks; a block
// holds block_size positions of ONE layer (its key rows, then its value
// rows). Each sequence has a block table per layer, so a layer under a
// window of W positions can return a block as soon as every query still to
// come starts past it, while full-attention layers keep theirs until
// Release. A block per layer rather than per group of layers sharing a
// window keeps every block the same size whatever the mix of windows (12
// sliding and 12 full layers, or 28 full and 20 sliding), so one pool
// serves them all and memory freed by a sliding layer goes to any layer of
// any sequence.
//
// The block is therefore also the unit of num_blocks, num_free_blocks,
// BlocksNeeded and the server's metrics: a block is block_size positions of
// one layer, and a full-attention sequence of T positions over L layers
// holds L * ceil(T / block_size) of them. Sizing the pool as
// num_layers * ceil(tokens / block_size) keeps "capacity in tokens of a
// full-attention sequence" the meaning of --kv_cache_tokens, and the used
// fraction of blocks is the used fraction of the memory.
//
// Every block is sized for the widest layer (key_width + value_width);
// models here have the same widths on every layer, so nothing is wasted.
// A value width of 0 means the key rows serve as values too (MLA's latent
// rows, whose first kv_lora_rank floats are the values).
//
// When blocks go back. Under window W the query at position p reads
// positions [p + 1 - W, p] (clipped at 0). Grow(seq, length) appends
// positions [old, length), old = Length(seq), whose first query (at old)
// still reads from old + 1 - W on, and later steps only start later; so
// Grow first returns the blocks lying wholly below old + 1 - W, then takes
// blocks for the new positions. Blocks that the step's own later queries no
// longer need are returned by the next Grow, not this one: a step of many
// tokens writes all its keys before any of its queries attends.
#ifndef RINGMOE_ENGINE_RUNTIME_KV_CACHE_H_
#define RINGMOE_ENGINE_RUNTIME_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/backend/backend.h"
#include "engine/model/model_spec.h"

namespace ringmoe::runtime {

using SequenceId = int64_t;

class KvCache {
 public:
  // What the cache holds for one layer.
  struct Layer {
    int64_t key_width = 0;    // floats per position
    int64_t value_width = 0;  // 0: the key rows serve as values (MLA)
    int64_t window = 0;       // 0: full attention; else W as above
  };

  // `layers` (one per model layer) share a pool of `num_blocks` blocks of
  // `block_size` positions, allocated here once: in host memory, or in
  // `backend`'s memory (which must outlive the cache) when given; the
  // pointers Key, Value and View return point there.
  KvCache(std::vector<Layer> layers, int64_t block_size, int64_t num_blocks,
          backend::Backend* backend = nullptr);
  // The block accounting of such a cache without its storage: Grow,
  // Release and the queries above work as on a cache, Key, Value and View
  // must not be called. Data-parallel attention keeps one per other rank, to
  // plan the blocks of the sequences that rank holds.
  static KvCache Ledger(std::vector<Layer> layers, int64_t block_size,
                        int64_t num_blocks);
  // The memory such a cache takes, in bytes (a double: callers check
  // absurd configurations with it before allocating).
  static double Bytes(const std::vector<Layer>& layers, int64_t block_size,
                      int64_t num_blocks);
  ~KvCache();
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&&) = delete;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // The configuration: fixed at construction, so these may be called from
  // any thread while another one grows and releases sequences.
  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
  // The most blocks one sequence ever holds at once while it grows to
  // `length` positions by Grows of at most `max_chunk` positions each (the
  // worst case over where the chunks end): ceil(length / block_size) per
  // full-attention layer, at most ceil((max_chunk + W - 1 + block_size - 1)
  // / block_size) per layer under window W. For admission: a sequence for
  // which this exceeds num_blocks() can never be served.
  int64_t MaxBlocksHeld(int64_t length, int64_t max_chunk) const;

  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }

  // Positions currently stored for `seq` (0 for an unknown sequence).
  int64_t Length(SequenceId seq) const;

  // Blocks `seq` holds now, all layers together (what Release would return).
  int64_t BlocksHeld(SequenceId seq) const;

  // The free blocks Grow(seq, length) needs: it succeeds exactly when this is
  // at most num_free_blocks(). Net of the blocks Grow returns first, and 0
  // when it returns at least as many as it takes; otherwise Grow lowers
  // num_free_blocks() by exactly this. Summed over several sequences it
  // covers growing them all, in any order.
  int64_t BlocksNeeded(SequenceId seq, int64_t length) const;

  // The longest length Grow(seq, ·) can reach with at most `free_blocks`
  // free blocks (BlocksNeeded of it is at most free_blocks); never less than
  // Length(seq).
  int64_t GrowLimit(SequenceId seq, int64_t free_blocks) const;

  // Grows `seq` (created on first use) to `length` positions: returns the
  // blocks of windowed layers that no query from position Length(seq) on
  // reads, then takes blocks for the new positions. RESOURCE_EXHAUSTED, with
  // nothing changed, when BlocksNeeded exceeds the free blocks. Shrinking is
  // not allowed.
  absl::Status Grow(SequenceId seq, int64_t length);

  // Returns every block of `seq` to the pool.
  void Release(SequenceId seq);

  // The key (value) row of `layer` at `position`: key_width (value_width)
  // floats. `position` must still be held: below Length(seq) and, under a
  // window, not in a block already returned. No value rows when value_width
  // is 0.
  float* Key(SequenceId seq, int64_t layer, int64_t position);
  float* Value(SequenceId seq, int64_t layer, int64_t position);

  // Per-block key and value pointers of one sequence's `layer`, in the form
  // the attention kernel reads (value blocks are the key blocks when
  // value_width is 0): entry i covers positions [i * block_size, (i + 1) *
  // block_size) and is null for a block already returned, which the kernels
  // never read as they start at the window. Reused across calls to avoid
  // allocations.
  struct LayerView {
    std::vector<const float*> k_blocks;
    std::vector<const float*> v_blocks;
    int64_t block_size = 0;
    backend::KvBlocks blocks() const {
      return {k_blocks.data(), v_blocks.data(), block_size};
    }
  };
  void View(SequenceId seq, int64_t layer, LayerView* view) const;

 private:
  struct NoStorage {};
  KvCache(std::vector<Layer> layers, int64_t block_size, int64_t num_blocks,
          NoStorage);

  static constexpr int32_t kReturned = -1;

  struct Sequence {
    int64_t length = 0;
    // Per layer: the block of each block_size positions, kReturned for those
    // given back; entries [0, ceil(length / block_size)).
    std::vector<std::vector<int32_t>> tables;
    // Per layer: blocks below this index are returned.
    std::vector<int64_t> first_held;
    int64_t held = 0;
  };

  // The first block index layer `l` must keep for queries from `position`
  // on.
  int64_t FirstNeeded(int64_t l, int64_t position) const;
  // Blocks Grow would return for `s` before taking new ones.
  int64_t Returnable(const Sequence& s) const;
  float* BlockBase(int32_t block) const {
    return storage_ + static_cast<int64_t>(block) * block_floats_;
  }
  // The start of `layer`'s rows in the block holding `position`.
  float* RowBlock(SequenceId seq, int64_t layer, int64_t position) const;

  std::vector<Layer> layers_;
  int64_t block_size_;
  int64_t num_blocks_;
  int64_t block_floats_;  // block_size * the widest key_width + value_width
  backend::Backend* backend_;  // null: storage_ is from new[]
  float* storage_;             // null in a ledger
  std::vector<int32_t> free_;
  absl::flat_hash_map<SequenceId, Sequence> sequences_;
};

// The cache layers of `spec`: its key and value widths and each layer's
// sliding window.
std::vector<KvCache::Layer> KvCacheLayers(const model::ModelSpec& spec);

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_KV_CACHE_H_

// A paged key/value cache: fixed-size blocks from one pool, a block table per
// sequence. A block holds block_size positions of every layer's keys and
// values, so one table serves all layers. Key and value rows may differ in
// width; a value width of 0 means the key rows serve as values too (MLA's
// latent rows, whose first kv_lora_rank floats are the values).
#ifndef RINGMOE_ENGINE_RUNTIME_KV_CACHE_H_
#define RINGMOE_ENGINE_RUNTIME_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/backend/backend.h"

namespace ringmoe::runtime {

using SequenceId = int64_t;

class KvCache {
 public:
  KvCache(int64_t num_layers, int64_t key_width, int64_t value_width,
          int64_t block_size, int64_t num_blocks);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free_blocks() const { return static_cast<int64_t>(free_.size()); }

  // Positions currently stored for `seq` (0 for an unknown sequence).
  int64_t Length(SequenceId seq) const;

  // Blocks `seq` would need in addition to hold `length` positions.
  int64_t BlocksNeeded(SequenceId seq, int64_t length) const;

  // Grows `seq` (created on first use) to `length` positions, taking blocks
  // from the pool; RESOURCE_EXHAUSTED, with nothing taken, when too few are
  // free. Shrinking is not allowed.
  absl::Status Grow(SequenceId seq, int64_t length);

  // Returns every block of `seq` to the pool.
  void Release(SequenceId seq);

  // The key (value) row of `layer` at `position`: key_width (value_width)
  // floats. No value rows when value_width is 0.
  float* Key(SequenceId seq, int64_t layer, int64_t position);
  float* Value(SequenceId seq, int64_t layer, int64_t position);

  // Per-block key and value pointers of one sequence's `layer`, in the form
  // the attention kernel reads (value blocks are the key blocks when
  // value_width is 0). Reused across calls to avoid allocations.
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
  // The start of `layer`'s keys in the block holding `position`.
  float* LayerBase(SequenceId seq, int64_t layer, int64_t position) const;

  int64_t num_layers_;
  int64_t key_width_;
  int64_t value_width_;
  int64_t block_size_;
  int64_t num_blocks_;
  int64_t layer_floats_;  // block_size * (key_width + value_width)
  int64_t block_floats_;  // num_layers * layer_floats_
  std::unique_ptr<float[]> storage_;
  std::vector<int32_t> free_;
  struct Sequence {
    std::vector<int32_t> blocks;
    int64_t length = 0;
  };
  absl::flat_hash_map<SequenceId, Sequence> sequences_;
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_KV_CACHE_H_

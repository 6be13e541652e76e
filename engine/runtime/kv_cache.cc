#include "engine/runtime/kv_cache.h"

#include "absl/strings/str_cat.h"

namespace ringmoe::runtime {

KvCache::KvCache(int64_t num_layers, int64_t key_width, int64_t value_width,
                 int64_t block_size, int64_t num_blocks)
    : num_layers_(num_layers),
      key_width_(key_width),
      value_width_(value_width),
      block_size_(block_size),
      num_blocks_(num_blocks),
      layer_floats_(block_size * (key_width + value_width)),
      block_floats_(num_layers * layer_floats_),
      // Left uninitialised: pages are committed only as blocks get used.
      storage_(new float[num_blocks * block_floats_]) {
  free_.reserve(num_blocks);
  // Hand out low-numbered blocks first.
  for (int64_t b = num_blocks - 1; b >= 0; --b)
    free_.push_back(static_cast<int32_t>(b));
}

int64_t KvCache::Length(SequenceId seq) const {
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? 0 : it->second.length;
}

int64_t KvCache::BlocksNeeded(SequenceId seq, int64_t length) const {
  auto it = sequences_.find(seq);
  const int64_t have = it == sequences_.end() ? 0 : it->second.blocks.size();
  const int64_t need = (length + block_size_ - 1) / block_size_;
  return need > have ? need - have : 0;
}

absl::Status KvCache::Grow(SequenceId seq, int64_t length) {
  if (length < Length(seq)) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache: cannot shrink sequence ", seq, " to ", length,
                     " positions"));
  }
  const int64_t more = BlocksNeeded(seq, length);
  if (more > num_free_blocks()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("KV cache: sequence ", seq, " needs ", more,
                     " more blocks for ", length, " positions, ",
                     num_free_blocks(), " of ", num_blocks_, " are free"));
  }
  Sequence& s = sequences_[seq];
  for (int64_t i = 0; i < more; ++i) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  s.length = length;
  return absl::OkStatus();
}

void KvCache::Release(SequenceId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  free_.insert(free_.end(), it->second.blocks.rbegin(),
               it->second.blocks.rend());
  sequences_.erase(it);
}

float* KvCache::LayerBase(SequenceId seq, int64_t layer,
                          int64_t position) const {
  const Sequence& s = sequences_.at(seq);
  const int64_t block = s.blocks[position / block_size_];
  return storage_.get() + block * block_floats_ + layer * layer_floats_;
}

float* KvCache::Key(SequenceId seq, int64_t layer, int64_t position) {
  return LayerBase(seq, layer, position) + position % block_size_ * key_width_;
}

float* KvCache::Value(SequenceId seq, int64_t layer, int64_t position) {
  return LayerBase(seq, layer, position) + block_size_ * key_width_ +
         position % block_size_ * value_width_;
}

void KvCache::View(SequenceId seq, int64_t layer, LayerView* view) const {
  const Sequence& s = sequences_.at(seq);
  view->block_size = block_size_;
  view->k_blocks.resize(s.blocks.size());
  view->v_blocks.resize(s.blocks.size());
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    const float* base =
        storage_.get() + s.blocks[i] * block_floats_ + layer * layer_floats_;
    view->k_blocks[i] = base;
    view->v_blocks[i] =
        value_width_ > 0 ? base + block_size_ * key_width_ : base;
  }
}

}  // namespace ringmoe::runtime

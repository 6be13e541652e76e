#include "engine/runtime/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace ringmoe::runtime {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t WidestBlock(const std::vector<KvCache::Layer>& layers,
                    int64_t block_size) {
  int64_t widest = 0;
  for (const KvCache::Layer& layer : layers) {
    widest = std::max(widest, layer.key_width + layer.value_width);
  }
  return block_size * widest;
}

}  // namespace

double KvCache::Bytes(const std::vector<Layer>& layers, int64_t block_size,
                      int64_t num_blocks) {
  return static_cast<double>(num_blocks) *
         static_cast<double>(WidestBlock(layers, block_size)) * sizeof(float);
}

KvCache::KvCache(std::vector<Layer> layers, int64_t block_size,
                 int64_t num_blocks, backend::Backend* backend)
    : KvCache(std::move(layers), block_size, num_blocks, NoStorage{}) {
  backend_ = backend;
  // Left uninitialised: pages are committed only as blocks get used.
  storage_ = backend != nullptr ? backend->Allocate(num_blocks * block_floats_)
                                : new float[num_blocks * block_floats_];
}

KvCache::KvCache(std::vector<Layer> layers, int64_t block_size,
                 int64_t num_blocks, NoStorage)
    : layers_(std::move(layers)),
      block_size_(block_size),
      num_blocks_(num_blocks),
      block_floats_(WidestBlock(layers_, block_size)),
      backend_(nullptr),
      storage_(nullptr) {
  free_.reserve(num_blocks);
  // Hand out low-numbered blocks first.
  for (int64_t b = num_blocks - 1; b >= 0; --b)
    free_.push_back(static_cast<int32_t>(b));
}

KvCache KvCache::Ledger(std::vector<Layer> layers, int64_t block_size,
                        int64_t num_blocks) {
  return KvCache(std::move(layers), block_size, num_blocks, NoStorage{});
}

KvCache::KvCache(KvCache&& other) noexcept
    : layers_(std::move(other.layers_)),
      block_size_(other.block_size_),
      num_blocks_(other.num_blocks_),
      block_floats_(other.block_floats_),
      backend_(other.backend_),
      storage_(other.storage_),
      free_(std::move(other.free_)),
      sequences_(std::move(other.sequences_)) {
  other.storage_ = nullptr;
}

KvCache::~KvCache() {
  if (storage_ == nullptr) return;
  if (backend_ != nullptr) {
    backend_->Free(storage_);
  } else {
    delete[] storage_;
  }
}

int64_t KvCache::MaxBlocksHeld(int64_t length, int64_t max_chunk) const {
  // Right after growing from `old` to `end` (end - old <= max_chunk), a
  // windowed layer holds the blocks from the one holding old + 1 - W to the
  // one holding end - 1: a span of at most max_chunk + W - 1 positions,
  // which touches the most blocks, ceil((span + block_size - 1) /
  // block_size), when it starts on the last row of a block.
  int64_t blocks = 0;
  for (const Layer& layer : layers_) {
    const int64_t span =
        layer.window > 0
            ? std::min(length, max_chunk + layer.window - 1 + block_size_ - 1)
            : length;
    blocks += CeilDiv(span, block_size_);
  }
  return blocks;
}

int64_t KvCache::Length(SequenceId seq) const {
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? 0 : it->second.length;
}

int64_t KvCache::BlocksHeld(SequenceId seq) const {
  auto it = sequences_.find(seq);
  return it == sequences_.end() ? 0 : it->second.held;
}

int64_t KvCache::FirstNeeded(int64_t l, int64_t position) const {
  const int64_t window = layers_[l].window;
  return window > 0 ? std::max<int64_t>(0, position + 1 - window) / block_size_
                    : 0;
}

int64_t KvCache::Returnable(const Sequence& s) const {
  int64_t blocks = 0;
  for (int64_t l = 0; l < num_layers(); ++l) {
    blocks += std::max<int64_t>(0, FirstNeeded(l, s.length) - s.first_held[l]);
  }
  return blocks;
}

int64_t KvCache::BlocksNeeded(SequenceId seq, int64_t length) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end())
    return num_layers() * CeilDiv(length, block_size_);
  const Sequence& s = it->second;
  // Every layer's table ends at the same block, the one holding the last
  // position; windows only move where tables start.
  const int64_t taken =
      num_layers() * std::max<int64_t>(0, CeilDiv(length, block_size_) -
                                              CeilDiv(s.length, block_size_));
  return std::max<int64_t>(0, taken - Returnable(s));
}

int64_t KvCache::GrowLimit(SequenceId seq, int64_t free_blocks) const {
  auto it = sequences_.find(seq);
  const int64_t length = it == sequences_.end() ? 0 : it->second.length;
  const int64_t returnable =
      it == sequences_.end() ? 0 : Returnable(it->second);
  // Each block_size positions past the current last block take one block
  // per layer.
  const int64_t more_blocks =
      std::max<int64_t>(0, free_blocks + returnable) / num_layers();
  return std::max(length,
                  (CeilDiv(length, block_size_) + more_blocks) * block_size_);
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
  if (s.tables.empty()) {
    s.tables.resize(num_layers());
    s.first_held.assign(num_layers(), 0);
  }
  const int64_t end_block = CeilDiv(length, block_size_);
  for (int64_t l = 0; l < num_layers(); ++l) {
    std::vector<int32_t>& table = s.tables[l];
    // Returned first, so that a step that slides past a block can reuse it.
    const int64_t first = FirstNeeded(l, s.length);
    for (int64_t b = s.first_held[l]; b < first; ++b) {
      free_.push_back(table[b]);
      table[b] = kReturned;
      --s.held;
    }
    s.first_held[l] = std::max(s.first_held[l], first);
    while (static_cast<int64_t>(table.size()) < end_block) {
      table.push_back(free_.back());
      free_.pop_back();
      ++s.held;
    }
  }
  s.length = length;
  return absl::OkStatus();
}

void KvCache::Release(SequenceId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) return;
  for (const std::vector<int32_t>& table : it->second.tables) {
    for (auto b = table.rbegin(); b != table.rend(); ++b) {
      if (*b != kReturned) free_.push_back(*b);
    }
  }
  sequences_.erase(it);
}

float* KvCache::RowBlock(SequenceId seq, int64_t layer,
                         int64_t position) const {
  return BlockBase(sequences_.at(seq).tables[layer][position / block_size_]);
}

float* KvCache::Key(SequenceId seq, int64_t layer, int64_t position) {
  return RowBlock(seq, layer, position) +
         position % block_size_ * layers_[layer].key_width;
}

float* KvCache::Value(SequenceId seq, int64_t layer, int64_t position) {
  const Layer& l = layers_[layer];
  return RowBlock(seq, layer, position) + block_size_ * l.key_width +
         position % block_size_ * l.value_width;
}

void KvCache::View(SequenceId seq, int64_t layer, LayerView* view) const {
  const std::vector<int32_t>& table = sequences_.at(seq).tables[layer];
  const Layer& l = layers_[layer];
  view->block_size = block_size_;
  view->k_blocks.resize(table.size());
  view->v_blocks.resize(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const float* base = table[i] == kReturned ? nullptr : BlockBase(table[i]);
    view->k_blocks[i] = base;
    view->v_blocks[i] = base != nullptr && l.value_width > 0
                            ? base + block_size_ * l.key_width
                            : base;
  }
}

std::vector<KvCache::Layer> KvCacheLayers(const model::ModelSpec& spec) {
  std::vector<KvCache::Layer> layers(spec.num_layers);
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    layers[l] = {spec.cache_key_width(), spec.cache_value_width(),
                 spec.SlidingWindow(l)};
  }
  return layers;
}

}  // namespace ringmoe::runtime

#include "memory_ring/expert_cache.h"

#include "absl/strings/str_cat.h"

namespace ringmoe::memory_ring {

absl::StatusOr<std::unique_ptr<ExpertCache>> ExpertCache::Create(
    Tier* tier, uint64_t capacity_bytes, uint64_t entry_bytes, RingStats* stats,
    int decay_period) {
  std::unique_ptr<ExpertCache> cache(
      new ExpertCache(tier, entry_bytes, stats, decay_period));
  const uint64_t n = entry_bytes == 0 ? 0 : capacity_bytes / entry_bytes;
  if (n > 0) {
    absl::StatusOr<std::unique_ptr<TierBuffer>> memory =
        tier->Allocate(n * entry_bytes);
    if (!memory.ok()) {
      return absl::Status(
          memory.status().code(),
          absl::StrCat("expert cache: allocating ", n * entry_bytes,
                       " bytes: ", memory.status().message()));
    }
    cache->memory_ = std::move(*memory);
    cache->entries_.resize(n);
  }
  return cache;
}

const uint8_t* ExpertCache::Lookup(Key key) {
  ++clock_;
  if (decay_period_ > 0 && clock_ % decay_period_ == 0) {
    for (auto& [k, count] : counts_) count /= 2;
  }
  ++counts_[key];
  auto it = where_.find(key);
  if (it == where_.end()) {
    ++stats_->cache_misses;
    return nullptr;
  }
  ++stats_->cache_hits;
  entries_[it->second].last_use = clock_;
  return memory_->data() + it->second * entry_bytes_;
}

absl::Status ExpertCache::Offer(Key key, const uint8_t* bytes, uint64_t size) {
  if (entries_.empty() || where_.contains(key) || size > entry_bytes_) {
    return absl::OkStatus();
  }
  // The victim: an empty entry, else the coldest (least recently used on ties).
  int victim = 0;
  for (int i = 0; i < static_cast<int>(entries_.size()); ++i) {
    const Entry& e = entries_[i];
    if (e.key < 0) {
      victim = i;
      break;
    }
    const Entry& v = entries_[victim];
    const uint32_t ce = counts_[e.key], cv = counts_[v.key];
    if (ce < cv || (ce == cv && e.last_use < v.last_use)) victim = i;
  }
  Entry& slot = entries_[victim];
  if (slot.key >= 0) {
    if (counts_[key] <= counts_[slot.key]) return absl::OkStatus();
    where_.erase(slot.key);
    ++stats_->cache_evictions;
  }
  uint8_t* dst = memory_->data() + victim * entry_bytes_;
  absl::Status status = tier_->CopyWithin(dst, bytes, size);
  if (!status.ok()) {
    slot.key = -1;
    return status;
  }
  stats_->AddMoved("slot_to_cache", size);
  slot.key = key;
  slot.last_use = clock_;
  where_[key] = victim;
  return absl::OkStatus();
}

}  // namespace ringmoe::memory_ring

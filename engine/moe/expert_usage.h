// ExpertUsage: tokens routed to each expert of each layer, counted as steps
// run (for the opt-in per-expert metrics: high cardinality). Safe to read
// from other threads while the engine counts.
#ifndef RINGMOE_ENGINE_MOE_EXPERT_USAGE_H_
#define RINGMOE_ENGINE_MOE_EXPERT_USAGE_H_

#include <atomic>
#include <cstdint>
#include <memory>

namespace ringmoe::moe {

class ExpertUsage {
 public:
  ExpertUsage(int num_layers, int num_experts)
      : num_layers_(num_layers),
        num_experts_(num_experts),
        tokens_(new std::atomic<uint64_t>[static_cast<size_t>(num_layers) *
                                          num_experts]()) {}

  void Add(int layer, int expert, uint64_t tokens) {
    tokens_[layer * num_experts_ + expert].fetch_add(tokens,
                                                     std::memory_order_relaxed);
  }
  uint64_t Tokens(int layer, int expert) const {
    return tokens_[layer * num_experts_ + expert].load(
        std::memory_order_relaxed);
  }
  int num_layers() const { return num_layers_; }
  int num_experts() const { return num_experts_; }

 private:
  const int num_layers_;
  const int num_experts_;
  std::unique_ptr<std::atomic<uint64_t>[]> tokens_;
};

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_EXPERT_USAGE_H_

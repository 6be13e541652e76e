// StreamedExperts: the memory ring behind the MoE block. Placement decides
// which experts stay resident; the rest live in the checkpoint on disk and
// stream through a SectionRing — one section per MoE layer per step — into
// RAM within the host memory budget. In layer mode a step schedules every
// layer's streamed experts up front, so layers l+1..l+d load while layer l
// computes. In expert mode a layer's section holds only the experts the
// batch routes to: predicted ones (the next layer's router applied to this
// layer's hidden state) are fetched ahead, mispredicted ones on demand; hot
// experts settle in the expert cache. Results are bitwise those of an
// all-resident run: the same bytes reach the same kernels.
#ifndef RINGMOE_ENGINE_RUNTIME_STREAMED_EXPERTS_H_
#define RINGMOE_ENGINE_RUNTIME_STREAMED_EXPERTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/architecture.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "engine/moe/expert_source.h"
#include "memory_ring/expert_cache.h"
#include "memory_ring/placement.h"
#include "memory_ring/ring_stats.h"
#include "memory_ring/section_ring.h"
#include "memory_ring/tier.h"

namespace ringmoe::runtime {

enum class RingMode { kAuto, kLayer, kExpert };

struct StreamingOptions {
  uint64_t memory_budget = 0;  // bytes; 0 = no limit (nothing streams)
  int num_slots = 3;
  int prefetch_depth = 2;
  RingMode mode = RingMode::kAuto;
  bool expert_cache = true;
  bool direct_io = true;
  int io_threads = 2;
  // Stream every routed expert even when the budget would hold them all
  // (tests and benchmarks of the ring on models that fit).
  bool force_streaming = false;
};

class StreamedExperts : public moe::ExpertSource {
 public:
  // Plans placement for `weights` (bound to `checkpoint`) under the budget.
  // Returns null when everything fits (no streaming needed). Otherwise the
  // resident matrices are copied out of the memory-mapped checkpoint into
  // RAM `weights` owns: resident means in the budget, and a checkpoint file
  // truncated underneath then fails loads instead of faulting the process.
  static absl::StatusOr<std::unique_ptr<StreamedExperts>> Create(
      const model::ModelSpec& spec, const model::Architecture& arch,
      const checkpoint::Checkpoint& checkpoint, model::ModelWeights* weights,
      const StreamingOptions& options, memory_ring::RingStats* stats,
      memory_ring::PlacementPlan* plan);
  ~StreamedExperts() override;

  void BeginStep(int64_t num_tokens) override;
  bool WantsPredictions() const override { return expert_mode_; }
  void Predict(int layer, const moe::Routing& predicted) override;
  absl::Status Acquire(int layer, absl::Span<const int32_t> experts,
                       std::vector<const model::MlpWeights*>* weights) override;
  void Release(int layer) override;
  void EndStep() override;

 private:
  // Where one streamed expert's three matrices come from and go.
  struct StreamedExpert {
    std::vector<memory_ring::CopyPiece>
        pieces;  // dst_offset relative to its place in the slot
    // Per matrix (gate, up, down): its piece of data and of block scales
    // (-1: none).
    int data_piece[3] = {-1, -1, -1};
    int scale_piece[3] = {-1, -1, -1};
  };
  struct LayerState {
    memory_ring::SectionRing::Ticket ticket =
        -1;                                // this step's section, -1 if none
    std::vector<bool> requested;           // experts in the section
    std::vector<model::MlpWeights> views;  // per expert, valid while acquired
    std::vector<int32_t>
        streamed_in_use;  // experts read from the slot this step
    uint8_t* slot = nullptr;
  };

  StreamedExperts(const model::ModelSpec& spec,
                  const model::ModelWeights& weights)
      : spec_(spec), weights_(weights) {}

  bool Streams(int layer, int expert) const {
    return !resident_[layer][expert];
  }
  memory_ring::ExpertCache::Key CacheKey(int layer, int expert) const {
    return static_cast<int64_t>(layer) * spec_.num_experts + expert;
  }
  std::vector<memory_ring::CopyPiece> PiecesFor(
      int layer, absl::Span<const int32_t> experts) const;
  model::MlpWeights ViewAt(int layer, int expert, const uint8_t* base) const;
  // Copies every matrix that stays resident into owned memory.
  void CopyResidentIntoMemory(model::ModelWeights* weights) const;

  const model::ModelSpec& spec_;
  const model::ModelWeights& weights_;
  StreamingOptions options_;
  memory_ring::RingStats* stats_ = nullptr;
  std::vector<std::vector<bool>> resident_;            // [layer][expert]
  std::vector<std::vector<StreamedExpert>> streamed_;  // [layer][expert]
  uint64_t expert_stride_ = 0;  // bytes of one expert's place (aligned)
  std::unique_ptr<memory_ring::Tier> tier_;
  std::unique_ptr<memory_ring::SectionRing> ring_;
  std::unique_ptr<memory_ring::ExpertCache> cache_;
  std::vector<LayerState> layers_;
  bool expert_mode_ = false;
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_STREAMED_EXPERTS_H_

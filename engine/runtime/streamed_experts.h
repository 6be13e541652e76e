// StreamedExperts: the expert executor of the memory ring. Placement decides
// which experts stay resident; the rest live in the checkpoint on disk and
// stream through a SectionRing into RAM within the host memory budget. A
// section is a group of one layer's experts, as many as a slot holds: all of
// a layer's, or where the budget holds less, down to one. In layer mode a
// step schedules every layer's streamed experts up front, so the sections
// after the one computing load meanwhile. In expert mode a layer's sections
// hold only the experts the batch routes to: predicted ones (the next
// layer's router applied to this layer's hidden state, most-routed first, at
// most K-1 sections) are fetched ahead; mispredicted ones ride in the room
// the layer's sections leave, then take turns in one slot. Hot experts
// settle in the expert cache. Resident and cached experts (and the shared
// expert) compute while the first section loads. Results are bitwise those
// of an all-resident run: the same bytes reach the same kernels.
#ifndef RINGMOE_ENGINE_RUNTIME_STREAMED_EXPERTS_H_
#define RINGMOE_ENGINE_RUNTIME_STREAMED_EXPERTS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "engine/moe/expert_executor.h"
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
  // Experts per ring section; 0: as many as the budget holds, up to a layer.
  int section_experts = 0;
  RingMode mode = RingMode::kAuto;
  bool expert_cache = true;
  bool direct_io = true;
  int io_threads = 2;
  // Stream every routed expert even when the budget would hold them all
  // (tests and benchmarks of the ring on models that fit).
  bool force_streaming = false;
  // The routed experts (of every MoE layer) this executor runs, ascending;
  // empty: all. The others are neither resident nor streamed: their bound
  // weights are left unread (expert parallelism runs them on other ranks),
  // and Run must not be given them.
  std::vector<int32_t> served_experts;
};

class StreamedExperts : public moe::ExpertExecutor {
 public:
  // Plans placement for `weights` (bound to `checkpoint`) under the budget.
  // Returns null when everything fits (no streaming needed). Otherwise the
  // resident matrices are copied out of the memory-mapped checkpoint into
  // RAM `weights` owns: resident means in the budget, and a checkpoint file
  // truncated underneath then fails loads instead of faulting the process.
  // A streamed expert is read from wherever its bound weights point into
  // the checkpoint (a tensor of its own, or its part of one fusing a
  // layer's experts); UNIMPLEMENTED when streaming would need an expert
  // whose weights are not the checkpoint's bytes (converted on load).
  static absl::StatusOr<std::unique_ptr<StreamedExperts>> Create(
      const model::ModelSpec& spec, const checkpoint::Checkpoint& checkpoint,
      model::ModelWeights* weights, const StreamingOptions& options,
      memory_ring::RingStats* stats, memory_ring::PlacementPlan* plan);
  ~StreamedExperts() override;

  void BeginStep(int64_t num_tokens) override;
  bool WantsPredictions() const override { return expert_mode_; }
  void Predict(int layer, const moe::Routing& predicted) override;
  absl::Status Run(int layer, absl::Span<const moe::ExpertTask> tasks,
                   absl::Span<const backend::MlpTask> alongside,
                   backend::Backend& backend) override;
  void EndStep() override;

 private:
  // Which piece holds each stored part of one matrix (-1: it has none).
  struct MatrixPieces {
    int data = -1;
    int scales = -1;
    int block_scales = -1;
    int exponents = -1;
  };
  // Where one streamed expert's matrices come from and go.
  struct StreamedExpert {
    std::vector<memory_ring::CopyPiece>
        pieces;  // dst_offset relative to its place in the slot
    std::vector<MatrixPieces> matrices;  // in model::MlpMatrices order
  };
  // Experts of one layer in one ring slot, in slot order.
  struct Section {
    memory_ring::SectionRing::Ticket ticket;
    std::vector<int32_t> experts;
  };
  struct LayerState {
    std::vector<Section> sections;         // this step's, in ticket order
    std::vector<bool> scheduled;           // [expert]: in one of the sections
    std::vector<model::MlpWeights> views;  // [expert]: valid while in use
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
  // Pieces loading `experts` of `layer` into a slot from position `first`.
  std::vector<memory_ring::CopyPiece> PiecesFor(
      int layer, absl::Span<const int32_t> experts, size_t first = 0) const;
  // Enqueues `experts` (streamed, of `layer`) in sections of up to
  // section_experts_.
  void Schedule(int layer, absl::Span<const int32_t> experts);
  // Runs the streamed tasks of `layer`; the caller adds context to errors.
  absl::Status RunStreamed(int layer,
                           absl::Span<const moe::ExpertTask* const> task_of,
                           std::vector<int32_t> missed,
                           backend::Backend& backend);
  // Runs the tasks of the experts in `slot` (slot order `experts`) and
  // offers them to the expert cache.
  void RunSlot(int layer, absl::Span<const int32_t> experts,
               const uint8_t* slot,
               absl::Span<const moe::ExpertTask* const> task_of,
               backend::Backend& backend);
  model::MlpWeights ViewAt(int layer, int expert, const uint8_t* base) const;

  const model::ModelSpec& spec_;
  const model::ModelWeights& weights_;
  StreamingOptions options_;
  memory_ring::RingStats* stats_ = nullptr;
  std::vector<bool> served_;                           // [expert]
  std::vector<std::vector<bool>> resident_;            // [layer][expert]
  std::vector<std::vector<StreamedExpert>> streamed_;  // [layer][expert]
  uint64_t expert_stride_ = 0;  // bytes of one expert's place (aligned)
  size_t section_experts_ = 0;  // experts one slot holds
  std::unique_ptr<memory_ring::Tier> tier_;
  std::unique_ptr<memory_ring::SectionRing> ring_;
  std::unique_ptr<memory_ring::ExpertCache> cache_;
  std::vector<LayerState> layers_;
  bool expert_mode_ = false;
  bool failed_ = false;  // a Run failed: the ring holds sections to drop
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_STREAMED_EXPERTS_H_

// HybridExperts: the expert executor of a device backend whose memory does
// not hold every expert (a GPU under --device_memory_budget). What every
// token needs (embeddings, attention, norms, routers, shared experts, dense
// layers) is uploaded first; the rest of the budget holds ring slots and
// either an expert cache (learning which experts the traffic uses) or,
// under --placement cpu, experts resident for good. Each routed expert a
// step touches then runs in one of three places: on the device from its
// memory; on the CPU from host memory (its rows of activations copied down
// and the results back), while the device computes the others; or streamed
// into a ring slot over the backend's copy path, overlapping the compute of
// the slot before. PlacementPolicy splits a step's experts between the CPU
// and streaming; --placement forces one. Streamed experts live packed in
// host memory the copy path reads fastest (pinned, for a GPU), and the CPU
// runs from the same bytes; past the host budget they stay in the
// checkpoint and stream from disk (three tiers: disk, pinned host, device).
// Every output is bitwise what Backend::RunMlps computes on the chosen backend
// from the expert's stored weights.
#ifndef RINGMOE_ENGINE_RUNTIME_HYBRID_EXPERTS_H_
#define RINGMOE_ENGINE_RUNTIME_HYBRID_EXPERTS_H_

#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/backend/backend.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "engine/moe/expert_executor.h"
#include "engine/runtime/placement_policy.h"
#include "memory_ring/disk_tier.h"
#include "memory_ring/expert_cache.h"
#include "memory_ring/placement.h"
#include "memory_ring/ring_stats.h"
#include "memory_ring/section_ring.h"
#include "memory_ring/tier.h"

namespace ringmoe::runtime {

struct HybridOptions {
  PlacementMode mode = PlacementMode::kAuto;
  // Device memory for weights, ring slots and cache; 0: no limit (every
  // expert resident).
  uint64_t device_budget = 0;
  int num_slots = 3;
  int prefetch_depth = 2;
  // Host memory for the experts outside device memory (0: no limit); the
  // rest stream from the checkpoint on disk through two staging buffers
  // in this budget.
  uint64_t host_budget = 0;
  memory_ring::DiskTierOptions disk;
  // Path costs to start from; measured at start-up when absent.
  std::optional<PathCosts> costs;
};

class HybridExperts : public moe::ExpertExecutor {
 public:
  // Uploads into `device_weights` what stays in `device`'s memory: every
  // weight but the routed experts the plan leaves out (those keep their
  // host views there; the runner must not read them on the device). Returns
  // null when every expert is resident (ResidentExperts serves then).
  // RESOURCE_EXHAUSTED, naming the smallest budget that works, when the
  // budget cannot hold what must stay plus two slots, or every expert under
  // --placement gpu. `host_weights` must outlive the executor; `host` (a
  // CPU backend) runs the CPU experts.
  static absl::StatusOr<std::unique_ptr<HybridExperts>> Create(
      const model::ModelSpec& spec, const model::ModelWeights& host_weights,
      const checkpoint::Checkpoint& checkpoint, backend::Backend* device,
      backend::Backend* host, const HybridOptions& options,
      memory_ring::RingStats* stats, memory_ring::PlacementPlan* plan,
      model::ModelWeights* device_weights);
  ~HybridExperts() override;

  void BeginStep(int64_t num_tokens) override;
  // Predictions start streaming a later layer's experts during this one:
  // wanted when the step may stream (not when the policy puts a step of
  // this size on the CPU, sparing the prediction's synchronisation).
  bool WantsPredictions() const override { return predict_; }
  void Predict(int layer, const moe::Routing& predicted) override;
  absl::Status Run(int layer, absl::Span<const moe::ExpertTask> tasks,
                   absl::Span<const backend::MlpTask> alongside,
                   backend::Backend& backend) override;
  void EndStep() override;

  const PlacementPolicy& policy() const { return *policy_; }

 private:
  HybridExperts(const model::ModelSpec& spec,
                const model::ModelWeights& host_weights);

  // A section of one layer's experts in the ring.
  struct Section {
    memory_ring::SectionRing::Ticket ticket;
    std::vector<int32_t> experts;
  };
  class CpuLane;

  // Places the experts outside device memory in host memory (packed) and,
  // past options_.host_budget, on disk; makes the tier that streams them.
  // Returns up to eight host experts to calibrate on.
  absl::StatusOr<std::vector<std::pair<int, int>>> PlaceOutside(
      const checkpoint::Checkpoint& checkpoint,
      const memory_ring::PlacementPlan& plan);
  // Measures the path costs on `samples` ({layer, expert} outside device
  // memory).
  absl::StatusOr<PathCosts> Calibrate(
      absl::Span<const std::pair<int, int>> samples);
  // Runs `tasks` (device tensors) on the CPU from the packed host copies.
  void RunOnCpu(int layer, absl::Span<const moe::ExpertTask* const> tasks);
  // Streams `tasks`' experts through the ring and runs them on the device.
  // Runs `tasks` whose experts are in `slot` (at `experts`' positions) on
  // the device and offers them to the cache.
  void RunSlot(int layer, const uint8_t* slot,
               absl::Span<const int32_t> experts,
               absl::Span<const moe::ExpertTask* const> task_of,
               backend::Backend& backend);
  absl::Status RunStreamed(int layer,
                           absl::Span<const moe::ExpertTask* const> tasks,
                           backend::Backend& backend);
  // The copy pieces of `experts` of `layer` into one slot.
  std::vector<memory_ring::CopyPiece> PiecesFor(
      int layer, absl::Span<const int32_t> experts) const;
  const uint8_t* PackedOnHost(int layer, int expert) const {
    return sources_[source_of_[layer]]->data() + host_offset_[layer][expert];
  }
  memory_ring::ExpertCache::Key CacheKey(int layer, int expert) const {
    return static_cast<int64_t>(layer) * spec_.num_experts + expert;
  }

  const model::ModelSpec& spec_;
  const model::ModelWeights& host_weights_;
  const model::ModelWeights* device_weights_ = nullptr;
  backend::Backend* device_ = nullptr;
  backend::Backend* host_ = nullptr;
  HybridOptions options_;
  memory_ring::RingStats* stats_ = nullptr;
  std::vector<std::vector<bool>> on_device_;  // [layer][expert]: resident
  uint64_t expert_stride_ = 0;                // packed bytes of one expert
  // The experts outside device memory, packed: one source per layer that
  // has any (the tier's source index source_of_[layer]).
  std::vector<std::unique_ptr<memory_ring::TierBuffer>> sources_;
  std::vector<int> source_of_;                      // [layer], or -1
  std::vector<std::vector<uint64_t>> host_offset_;  // [layer][expert]
  std::vector<std::vector<bool>> on_disk_;          // [layer][expert]
  // [layer][expert]: what loads an expert outside device memory into a
  // slot (dst_offset relative to its place there).
  std::vector<std::vector<std::vector<memory_ring::CopyPiece>>> pieces_;
  std::unique_ptr<memory_ring::Tier> tier_;
  std::unique_ptr<memory_ring::SectionRing> ring_;
  std::unique_ptr<memory_ring::ExpertCache> cache_;
  size_t section_experts_ = 1;
  std::unique_ptr<PlacementPolicy> policy_;
  std::unique_ptr<CpuLane> cpu_lane_;
  // Per layer, the sections Predict scheduled ahead of its Run.
  std::vector<std::vector<Section>> prefetched_;
  bool any_on_disk_ = false;
  bool predict_ = false;  // this step's WantsPredictions
  bool failed_ = false;
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_HYBRID_EXPERTS_H_

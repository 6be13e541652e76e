// Engine: a loaded model — checkpoint, spec, weights, tokenizer and KV cache —
// and the step that runs a batch of sequence chunks through it.
#ifndef RINGMOE_ENGINE_RUNTIME_ENGINE_H_
#define RINGMOE_ENGINE_RUNTIME_ENGINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/thread_pool.h"
#include "engine/backend/backend.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/model_spec.h"
#include "engine/model/model_weights.h"
#include "engine/moe/expert_executor.h"
#include "engine/moe/expert_parallel.h"
#include "engine/moe/expert_placement.h"
#include "engine/moe/expert_usage.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/metered_communicator.h"
#include "engine/runtime/hybrid_experts.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/model_runner.h"
#include "engine/runtime/placement_policy.h"
#include "engine/runtime/streamed_experts.h"
#include "engine/tokenizer/tokenizer.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/probes.h"
#include "memory_ring/placement.h"
#include "memory_ring/ring_stats.h"

namespace ringmoe::runtime {

// Where the CPU reads the weights it keeps as the checkpoint stores them
// when every weight is resident (where experts stream through the memory
// ring, what stays resident is always copied).
enum class ResidentWeights {
  // In place, from the checkpoint's mapping: page-cache pages, shared with
  // other processes, nothing copied at load.
  kMapped,
  // Copied at load into memory of their own (model::CopyOutOfCheckpoint),
  // in 2 MiB pages where the host gives them.
  kCopied,
  // Copied where the host gives memory huge pages and the mapping, its
  // pages read, holds less than kMostlyHugePages of them in huge pages (the
  // page cache keeps a file written or first read in small pieces in 4 KiB
  // pages, whose TLB misses cost decode about a fifth of its speed on the
  // machines measured: docs/PERFORMANCE.md); else mapped.
  kAuto,
};
inline constexpr double kMostlyHugePages = 0.9;

struct EngineOptions {
  std::string model_dir;
  // KV-cache capacity in tokens over all sequences, counted as positions of
  // every layer (sliding-window layers give blocks back, so sequences of
  // such models fit more); 0 picks the model's max_position_embeddings (one
  // full-length sequence), at least 4096.
  int64_t kv_cache_tokens = 0;
  int64_t kv_block_size = 16;
  // Where the forward pass runs: "cpu", "cuda:N" or "standin"
  // (backend_factory.h).
  std::string device = "cpu";
  // With a device: the most device memory the weights, ring slots and
  // expert cache may take (0: as much as the device has, every weight
  // resident). Routed experts that do not fit run hybrid (HybridExperts).
  int64_t device_memory_budget = 0;
  // With a device budget: where experts outside device memory run.
  PlacementMode placement = PlacementMode::kAuto;
  // Path costs for the placement policy; measured at start-up when absent.
  std::optional<PathCosts> placement_costs;
  // MoE layers whose experts all lie in the backend's weight memory (a GPU
  // holding every expert) route and run them there, with no host
  // synchronisation per layer; false routes every layer on the host.
  bool route_on_device = true;
  // Decode steps of such models (at most 8 tokens) replay CUDA graphs
  // recorded from their operations (Backend::BeginGraphStep); false issues
  // every operation from the host.
  bool cuda_graphs = true;
  // Threads for the forward pass, the caller's included; 0 = all cores.
  int threads = 0;
  // Conversion (quantization) of the weights on load.
  model::WeightConversion weight_conversion;
  // The precision of the activations in the CPU's products of bf16 and
  // mxfp4 weights (kernels::ActivationPrecision): kBf16 rounds them to bf16
  // where the CPU multiplies bf16 natively, for faster prefill; kInt8 also
  // quantizes mxfp4 products' to one int8 level, for faster decode.
  kernels::ActivationPrecision activation_precision =
      kernels::ActivationPrecision::kF32;
  // Whether the CPU's decode products prefetch weights in software or
  // leave it to the hardware (kernels::WeightPrefetch), for every weight
  // type: absent = the faster for each type the model's products read,
  // measured on this machine at the first load in the process that reads
  // 64 MiB or more of the type (kernels::TuneWeightPrefetch, about 0.15 s
  // a type; smaller models keep the kernels' default, software) and kept;
  // the server and the CLI ask by default (--weight_prefetch=auto).
  // Outputs do not depend on it.
  std::optional<kernels::WeightPrefetch> weight_prefetch =
      kernels::WeightPrefetch::kSoftware;
  // Memory budget and ring settings; with no budget everything is resident.
  StreamingOptions streaming;
  // With every weight resident on the CPU: where the weights kept as
  // stored are read.
  ResidentWeights resident_weights = ResidentWeights::kAuto;
  // Count the tokens routed to each expert (expert_usage()).
  bool count_expert_tokens = false;
  // Expert parallelism: the job (null, or one rank: every expert here)
  // whose ranks share the routed experts (ExpertPlacement::Contiguous),
  // attention replicated: every rank loads the model, runs every step on
  // the same chunks and gets the same logits (ExpertParallelExecutor).
  // On the CPU each rank reads only its own experts (prefaulted, resident
  // within the budget or streamed); a device still uploads every expert its
  // budget holds. Must outlive the engine; a failed step must end the job
  // (Communicator::Abort).
  parallel::Communicator* expert_parallel = nullptr;
  // With expert_parallel over several ranks: attention data-parallel
  // instead of replicated. Every rank is still handed every step's chunks
  // (the same on every rank), but runs only those of the sequences homed
  // on it — each sequence is homed, at its first chunk, on the rank whose
  // sequences hold the fewest positions (ties: the lowest rank), and its
  // KV cache lives there alone — and sends its tokens to their experts'
  // ranks at every MoE layer (TokenDispatchExecutor). Every rank's Step
  // still returns every chunk's logits, so callers are unchanged, except
  // that sequences must be released through Engine::Release on every rank.
  bool data_parallel_attention = false;
  // With expert_parallel over several ranks: where the experts go, read
  // from this placement file (ExpertPlacement::ReadFile; it must be for
  // the model's experts over the job's ranks) when it exists, else
  // contiguous ranges. Also counts the tokens routed to each expert, for
  // BalancedPlacement. Replicas of an expert share its tokens under
  // data-parallel attention; with replicated attention only the first
  // replica runs.
  std::string expert_placement_file;
};

class Engine {
 public:
  // Loads DIR/config.json (+ generation_config.json), the safetensors
  // weights (checked against the architecture before anything runs) and
  // DIR/tokenizer.json when present.
  static absl::StatusOr<std::unique_ptr<Engine>> Load(
      const EngineOptions& options);

  const model::ModelSpec& spec() const { return spec_; }
  // Null when the model directory has no tokenizer.json.
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  // This rank's KV cache.
  KvCache& kv_cache() { return *kv_cache_; }
  // Under data-parallel attention each rank's KV cache holds its own
  // sequences: num_kv_caches() is the number of ranks, and kv_cache_of(r)
  // is this rank's cache for r == its rank and otherwise a ledger
  // (KvCache::Ledger) that follows rank r's cache block for block, as
  // every rank runs the same steps. Otherwise one cache, kv_cache().
  int num_kv_caches() const;
  KvCache& kv_cache_of(int rank);
  // Token ids that end generation: generation_config/config eos ids, else
  // the tokenizer's eos token.
  const std::vector<int32_t>& eos_token_ids() const { return eos_token_ids_; }

  // The weights as loaded, in host memory.
  const model::ModelWeights& weights() const { return weights_; }
  // The backend that runs the forward pass.
  const backend::Backend& backend() const { return *backend_; }
  // The CPU's threads: the forward pass's on the CPU backend, and load-time
  // conversion's.
  ThreadPool* pool() const { return pool_.get(); }

  // Where the weights live (what is resident, what streams) and the ring's
  // counters.
  const memory_ring::PlacementPlan& placement() const { return placement_; }
  const memory_ring::RingStats& ring_stats() const { return ring_stats_; }
  // The weight prefetch of each type this engine's products read, with the
  // figures it was chosen by (zero where EngineOptions forced it).
  const std::vector<kernels::WeightPrefetchTuning>& weight_prefetch() const {
    return weight_prefetch_;
  }
  // Whether the weights kept as stored were copied out of the checkpoint's
  // mapping at load (ResidentWeights; always so where experts stream).
  bool resident_weights_copied() const { return resident_weights_copied_; }
  // On a device with experts outside its memory: where each expert runs,
  // as calibrated at start-up and refined by the steps so far; else null.
  const PlacementPolicy* placement_policy() const {
    return hybrid_experts_ ? &hybrid_experts_->policy() : nullptr;
  }
  // Tokens routed per (layer, expert); null unless count_expert_tokens.
  const moe::ExpertUsage* expert_usage() const { return expert_usage_.get(); }

  // This rank's part in expert parallelism: the traffic of the engine's
  // collectives (expert exchanges; logits under data-parallel attention),
  // the expert replicas it holds per MoE layer and the rows it ran for
  // experts another rank owns. Null without expert parallelism over
  // several ranks.
  struct ExpertParallelStats {
    parallel::CollectiveTraffic traffic;
    int64_t experts_held = 0;
    uint64_t replica_rows = 0;
  };
  std::optional<ExpertParallelStats> expert_parallel_stats() const;

  // Runs one step (see ModelRunner::Forward). Under data-parallel
  // attention every rank must run the same steps: a failure on one rank
  // (an invalid chunk is found by its home rank only) leaves the others in
  // a collective, so it must end the job.
  absl::Status Step(absl::Span<const SequenceChunk> chunks,
                    std::vector<float>* logits, backend::Work* work = nullptr,
                    std::vector<int32_t>* greedy_tokens = nullptr);

  // A balanced placement of the experts over the job's ranks from the
  // tokens routed to each expert so far (summed over layers, and over ranks
  // under data-parallel attention, where each rank routes its own tokens:
  // then every rank must call it, as a collective), with `extra_replicas`
  // copies of the hottest experts (ExpertPlacement::Balanced).
  // FAILED_PRECONDITION without expert parallelism over several ranks.
  absl::StatusOr<moe::ExpertPlacement> BalancedPlacement(int extra_replicas);

  // Frees the KV positions of `sequence` (nothing if it holds none) and,
  // under data-parallel attention, its home; callers release on every rank.
  void Release(SequenceId sequence);

 private:
  Engine() = default;

  std::unique_ptr<checkpoint::Checkpoint> checkpoint_;
  model::ModelSpec spec_;
  model::ModelWeights weights_;
  // The weights the backend reads: weights_ itself on the CPU, a copy in
  // device memory on a device.
  model::ModelWeights device_weights_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<kernels::WeightPrefetchTuning> weight_prefetch_;
  bool resident_weights_copied_ = false;
  std::unique_ptr<backend::Backend> backend_;
  memory_ring::RingStats ring_stats_;
  memory_ring::PlacementPlan placement_;
  std::unique_ptr<StreamedExperts> streamed_experts_;
  // On a device: the CPU that runs experts outside device memory.
  std::unique_ptr<backend::Backend> host_backend_;
  std::unique_ptr<HybridExperts> hybrid_experts_;
  // Expert parallelism: this rank's experts when neither the ring nor the
  // hybrid executor runs them, and the executor spreading the experts.
  std::unique_ptr<moe::ResidentExperts> resident_experts_;
  std::unique_ptr<moe::DistributedExpertExecutor> parallel_experts_;
  // Data-parallel attention: the job, each live sequence's home rank and
  // length, and the positions each rank's sequences hold.
  struct Home {
    int rank = 0;
    int64_t length = 0;
  };
  // The job's communicator as the engine uses it: metered.
  std::unique_ptr<parallel::MeteredCommunicator> expert_parallel_;
  // Expert rows between the ranks' backends: a communicator of the
  // backend's memory where one was made (NCCL), metered too; else the
  // job's, or none (staged through the host).
  std::unique_ptr<parallel::Communicator> device_communicator_;
  std::unique_ptr<parallel::MeteredCommunicator> device_traffic_;
  parallel::Communicator* data_parallel_ = nullptr;
  absl::flat_hash_map<SequenceId, Home> homes_;
  std::vector<int64_t> rank_positions_;
  std::vector<std::unique_ptr<KvCache>> rank_ledgers_;  // null at own rank
  // Home sequences for new ones among `chunks`, and their chunks of this
  // rank; then the step, and every rank's logits and greedy tokens
  // exchanged.
  absl::Status DataParallelStep(absl::Span<const SequenceChunk> chunks,
                                std::vector<float>* logits, backend::Work* work,
                                std::vector<int32_t>* greedy_tokens);
  std::unique_ptr<moe::ExpertUsage> expert_usage_;
  std::unique_ptr<ModelRunner> runner_;
  std::unique_ptr<KvCache> kv_cache_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::vector<int32_t> eos_token_ids_;
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_ENGINE_H_

#include "engine/runtime/engine.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/host_memory.h"
#include "base/status_macros.h"
#include "engine/backend/backend_factory.h"
#include "engine/backend/cpu_backend.h"
#include "engine/model/architecture.h"
#include "engine/model/config.h"
#include "engine/moe/expert_parallel.h"
#include "engine/moe/expert_placement.h"
#include "engine/moe/token_dispatch.h"

namespace ringmoe::runtime {
namespace {

struct KvCacheShape {
  std::vector<KvCache::Layer> layers;
  int64_t block_size = 0;
  int64_t num_blocks = 0;
};

// A block holds `block_size` positions of one layer: room for the cache's
// tokens at every layer, one full-attention sequence of that length.
// RESOURCE_EXHAUSTED when it would not fit in this machine's memory.
absl::StatusOr<KvCacheShape> PlanKvCache(const model::ModelSpec& spec,
                                         const EngineOptions& options) {
  KvCacheShape kv;
  kv.block_size = std::max<int64_t>(1, options.kv_block_size);
  const int64_t tokens =
      options.kv_cache_tokens > 0
          ? options.kv_cache_tokens
          : std::max<int64_t>(4096, spec.max_position_embeddings);
  kv.layers = KvCacheLayers(spec);
  kv.num_blocks =
      spec.num_layers * ((tokens + kv.block_size - 1) / kv.block_size);
  const double bytes = KvCache::Bytes(kv.layers, kv.block_size, kv.num_blocks);
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                        static_cast<double>(sysconf(_SC_PAGESIZE));
  if (bytes > memory) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the KV cache for %d tokens (%s) needs %.1f GiB, more than this "
        "machine's memory (%.1f GiB); set --kv_cache_tokens lower",
        tokens,
        options.kv_cache_tokens > 0
            ? "--kv_cache_tokens"
            : "max(4096, max_position_embeddings) by default",
        bytes / (1 << 30), memory / (1 << 30)));
  }
  return kv;
}

// Below this many bytes of a type, its products mostly read the caches of
// a large machine, and measuring them (about 0.15 s a type) would cost a
// short-lived process more than the choice could gain.
constexpr int64_t kMinWeightPrefetchTuningBytes = int64_t{64} << 20;

// For each type of `weights` (ProductWeightBytes), the weight prefetch
// `forced` names, or the one measured faster by the first load in the
// process that needed the type (every engine in a process shares the
// kernels' choices); types of less than kMinWeightPrefetchTuningBytes keep
// the kernels' choice, unmeasured.
std::vector<kernels::WeightPrefetchTuning> ChooseWeightPrefetch(
    const std::vector<std::pair<kernels::WeightType, int64_t>>& weights,
    std::optional<kernels::WeightPrefetch> forced, ThreadPool* pool) {
  std::vector<kernels::WeightPrefetchTuning> chosen;
  static absl::Mutex mu;
  static auto* tuned = new absl::flat_hash_map<kernels::WeightType,
                                               kernels::WeightPrefetchTuning>();
  absl::MutexLock lock(&mu);
  for (const auto& [type, bytes] : weights) {
    if (forced) kernels::SetWeightPrefetch(type, *forced);
    auto it = tuned->find(type);
    if (forced ||
        (it == tuned->end() && bytes < kMinWeightPrefetchTuningBytes)) {
      chosen.push_back({type, kernels::GetWeightPrefetch(type), 0, 0});
      continue;
    }
    if (it == tuned->end()) {
      const kernels::WeightPrefetchTuning tuning =
          kernels::TuneWeightPrefetch(type, pool);
      if (tuning.software_bytes_per_s > 0) {
        std::fprintf(stderr,
                     "ringmoe: %s weight prefetch: %s (decode products from "
                     "memory: software prefetch %.1f GB/s, hardware alone "
                     "%.1f GB/s)\n",
                     kernels::WeightTypeName(type),
                     kernels::WeightPrefetchName(tuning.chosen),
                     tuning.software_bytes_per_s / 1e9,
                     tuning.hardware_only_bytes_per_s / 1e9);
      }
      it = tuned->emplace(type, tuning).first;
    }
    kernels::SetWeightPrefetch(type, it->second.chosen);
    chosen.push_back(it->second);
  }
  return chosen;
}

// Whether `mode` copies the weights kept as stored out of `checkpoint`'s
// mapping, its pages already read in (ResidentWeights).
bool CopiesResidentWeights(ResidentWeights mode,
                           const checkpoint::Checkpoint& checkpoint) {
  switch (mode) {
    case ResidentWeights::kMapped:
      return false;
    case ResidentWeights::kCopied:
      return true;
    case ResidentWeights::kAuto:
      break;
  }
  if (!TransparentHugePagesAvailable()) return false;
  ResidentPages mapped;
  for (const auto& file : checkpoint.files()) {
    const std::optional<ResidentPages> pages =
        ResidentPagesOf(file->mapping(), file->file_size());
    if (!pages) return false;
    mapped.bytes += pages->bytes;
    mapped.huge_bytes += pages->huge_bytes;
  }
  return mapped.huge_bytes < kMostlyHugePages * mapped.bytes;
}

// Maps in every page of the weights a step reads (of the routed experts
// only `served`, where given), then copies them out of the checkpoint's
// mapping where `mode` says so: whether it did.
absl::StatusOr<bool> KeepResidentWeights(
    ResidentWeights mode, const checkpoint::Checkpoint& checkpoint,
    const std::vector<int32_t>* served, ThreadPool* pool,
    model::ModelWeights* weights) {
  model::PrefaultWeights(*weights, served);
  if (!CopiesResidentWeights(mode, checkpoint)) return false;
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(model::CopyOutOfCheckpoint(
      checkpoint,
      [served](int, int e) {
        return served == nullptr ||
               std::find(served->begin(), served->end(), e) != served->end();
      },
      pool, weights));
  std::fprintf(
      stderr,
      "ringmoe: weights copied out of the checkpoint's mapping into "
      "memory of their own in %.2f s (--resident_weights)\n",
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Load(
    const EngineOptions& options) {
  std::unique_ptr<Engine> engine(new Engine());
  ASSIGN_OR_RETURN(engine->spec_, model::LoadModelConfig(options.model_dir));
  // Checked before any weight is read: a cache that cannot fit fails fast.
  ASSIGN_OR_RETURN(KvCacheShape kv, PlanKvCache(engine->spec_, options));
  ASSIGN_OR_RETURN(const model::Architecture* arch,
                   model::FindArchitecture(engine->spec_.architecture));
  ASSIGN_OR_RETURN(engine->checkpoint_,
                   checkpoint::Checkpoint::Open(options.model_dir));
  ASSIGN_OR_RETURN(
      engine->weights_,
      model::BindModelWeights(engine->spec_, *arch, *engine->checkpoint_));
  engine->pool_ = std::make_unique<ThreadPool>(options.threads);
  RETURN_IF_ERROR(model::ConvertWeights(
      options.weight_conversion, engine->pool_.get(), &engine->weights_));
  engine->weight_prefetch_ =
      ChooseWeightPrefetch(model::ProductWeightBytes(engine->weights_),
                           options.weight_prefetch, engine->pool_.get());
  if (std::filesystem::exists(options.model_dir + "/tokenizer.json")) {
    ASSIGN_OR_RETURN(engine->tokenizer_,
                     tokenizer::Tokenizer::FromDirectory(options.model_dir));
  }
  engine->eos_token_ids_ = engine->spec_.eos_token_ids;
  if (engine->eos_token_ids_.empty() && engine->tokenizer_ &&
      engine->tokenizer_->eos_token_id()) {
    engine->eos_token_ids_.push_back(*engine->tokenizer_->eos_token_id());
  }
  ASSIGN_OR_RETURN(engine->backend_,
                   backend::CreateBackend(options.device, engine->pool_.get(),
                                          options.device_memory_budget,
                                          options.activation_precision));
  const bool on_device =
      engine->backend_->weight_memory() == backend::MemorySpace::kDevice;
  if (!on_device && options.placement != PlacementMode::kAuto) {
    return absl::InvalidArgumentError(
        absl::StrCat("--placement ", PlacementModeName(options.placement),
                     " places experts relative to a device (--device cuda:N)"));
  }
  if (on_device && options.device_memory_budget == 0 &&
      (options.placement == PlacementMode::kCpu ||
       options.placement == PlacementMode::kStream)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--placement ", PlacementModeName(options.placement),
        " needs --device_memory_budget: without one every expert is resident "
        "on the device"));
  }
  if (options.count_expert_tokens || !options.expert_placement_file.empty()) {
    engine->expert_usage_ = std::make_unique<moe::ExpertUsage>(
        static_cast<int>(engine->spec_.num_layers),
        static_cast<int>(engine->spec_.num_experts));
  }
  std::optional<moe::ExpertPlacement> expert_placement;
  std::vector<int32_t> own_experts;
  if (options.expert_parallel != nullptr &&
      options.expert_parallel->size() > 1) {
    const int num_experts = static_cast<int>(engine->spec_.num_experts);
    const int ranks = options.expert_parallel->size();
    const std::string& file = options.expert_placement_file;
    const bool from_file = !file.empty() && std::filesystem::exists(file);
    if (from_file) {
      ASSIGN_OR_RETURN(expert_placement, moe::ExpertPlacement::ReadFile(
                                             file, num_experts, ranks));
    } else {
      expert_placement = moe::ExpertPlacement::Contiguous(num_experts, ranks);
    }
    if (options.expert_parallel->rank() == 0) {
      std::fprintf(stderr, "ringmoe: expert placement (%s): %s\n",
                   from_file ? file.c_str() : "contiguous",
                   expert_placement->Summary().c_str());
    }
    engine->expert_parallel_ = std::make_unique<parallel::MeteredCommunicator>(
        options.expert_parallel);
    own_experts = expert_placement->experts_of(options.expert_parallel->rank());
  }
  moe::ExpertExecutor* experts = nullptr;
  if (on_device) {
    engine->host_backend_ = std::make_unique<backend::CpuBackend>(
        engine->pool_.get(), options.activation_precision);
    HybridOptions hybrid;
    hybrid.mode = options.placement;
    hybrid.device_budget = static_cast<uint64_t>(options.device_memory_budget);
    hybrid.num_slots = options.streaming.num_slots;
    hybrid.prefetch_depth = options.streaming.prefetch_depth;
    hybrid.costs = options.placement_costs;
    hybrid.host_budget = options.streaming.memory_budget;
    hybrid.disk = {options.streaming.io_threads, options.streaming.direct_io};
    ASSIGN_OR_RETURN(engine->hybrid_experts_,
                     HybridExperts::Create(
                         engine->spec_, engine->weights_, *engine->checkpoint_,
                         engine->backend_.get(), engine->host_backend_.get(),
                         hybrid, &engine->ring_stats_, &engine->placement_,
                         &engine->device_weights_));
    experts = engine->hybrid_experts_.get();
  } else {
    StreamingOptions streaming = options.streaming;
    streaming.served_experts = own_experts;
    ASSIGN_OR_RETURN(engine->streamed_experts_,
                     StreamedExperts::Create(
                         engine->spec_, *engine->checkpoint_, &engine->weights_,
                         streaming, &engine->ring_stats_, &engine->placement_));
    if (options.streaming.memory_budget > 0) {
      std::fprintf(stderr, "ringmoe: %s\n",
                   engine->placement_.Summary().c_str());
    }
    if (engine->streamed_experts_ != nullptr) {
      // What stays resident was copied out of the mapping (StreamedExperts).
      engine->resident_weights_copied_ = true;
    } else {
      ASSIGN_OR_RETURN(
          engine->resident_weights_copied_,
          KeepResidentWeights(options.resident_weights, *engine->checkpoint_,
                              expert_placement ? &own_experts : nullptr,
                              engine->pool_.get(), &engine->weights_));
    }
    experts = engine->streamed_experts_.get();
  }
  if (expert_placement) {
    ASSIGN_OR_RETURN(backend::RowTransport rows,
                     backend::RowTransportFor(*engine->backend_,
                                              engine->expert_parallel_.get()));
    parallel::Communicator* rows_communicator = rows.communicator;
    if (rows.owned != nullptr) {
      engine->device_communicator_ = std::move(rows.owned);
      engine->device_traffic_ = std::make_unique<parallel::MeteredCommunicator>(
          engine->device_communicator_.get());
      rows_communicator = engine->device_traffic_.get();
    }
    if (experts == nullptr) {
      engine->resident_experts_ = std::make_unique<moe::ResidentExperts>(
          on_device ? engine->device_weights_ : engine->weights_);
      experts = engine->resident_experts_.get();
    }
    if (options.data_parallel_attention) {
      engine->parallel_experts_ = std::make_unique<moe::TokenDispatchExecutor>(
          engine->expert_parallel_.get(), rows_communicator,
          *std::move(expert_placement), experts, engine->spec_.hidden_size);
      engine->data_parallel_ = engine->expert_parallel_.get();
      engine->rank_positions_.assign(engine->data_parallel_->size(), 0);
    } else {
      engine->parallel_experts_ = std::make_unique<moe::ExpertParallelExecutor>(
          engine->expert_parallel_.get(), rows_communicator,
          *std::move(expert_placement), experts);
    }
    experts = engine->parallel_experts_.get();
  }
  engine->ring_stats_.bytes_device_weights =
      engine->backend_->weight_memory_used();
  engine->runner_ = std::make_unique<ModelRunner>(
      engine->spec_, on_device ? engine->device_weights_ : engine->weights_,
      engine->backend_.get(), experts, engine->expert_usage_.get(),
      options.route_on_device, options.cuda_graphs);
  if (engine->data_parallel_ != nullptr) {
    engine->rank_ledgers_.resize(engine->data_parallel_->size());
    for (int p = 0; p < engine->data_parallel_->size(); ++p) {
      if (p == engine->data_parallel_->rank()) continue;
      engine->rank_ledgers_[p] = std::make_unique<KvCache>(
          KvCache::Ledger(kv.layers, kv.block_size, kv.num_blocks));
    }
  }
  engine->kv_cache_ = std::make_unique<KvCache>(
      std::move(kv.layers), kv.block_size, kv.num_blocks,
      on_device ? engine->backend_.get() : nullptr);
  return engine;
}

absl::Status Engine::Step(absl::Span<const SequenceChunk> chunks,
                          std::vector<float>* logits, backend::Work* work,
                          std::vector<int32_t>* greedy_tokens) {
  if (data_parallel_ != nullptr) {
    return DataParallelStep(chunks, logits, work, greedy_tokens);
  }
  return runner_->Forward(chunks, kv_cache_.get(), logits, work, {},
                          greedy_tokens);
}

int Engine::num_kv_caches() const {
  return data_parallel_ != nullptr ? data_parallel_->size() : 1;
}

KvCache& Engine::kv_cache_of(int rank) {
  if (data_parallel_ == nullptr || rank == data_parallel_->rank()) {
    return *kv_cache_;
  }
  return *rank_ledgers_[rank];
}

std::optional<Engine::ExpertParallelStats> Engine::expert_parallel_stats()
    const {
  if (expert_parallel_ == nullptr) return std::nullopt;
  ExpertParallelStats stats;
  stats.traffic = expert_parallel_->traffic();
  if (device_traffic_ != nullptr) stats.traffic += device_traffic_->traffic();
  stats.experts_held =
      static_cast<int64_t>(parallel_experts_->placement()
                               .experts_of(expert_parallel_->rank())
                               .size());
  stats.replica_rows = parallel_experts_->replica_rows();
  return stats;
}

absl::StatusOr<moe::ExpertPlacement> Engine::BalancedPlacement(
    int extra_replicas) {
  if (expert_parallel_ == nullptr || expert_usage_ == nullptr) {
    return absl::FailedPreconditionError(
        "a balanced expert placement needs expert parallelism over several "
        "ranks and an expert placement file");
  }
  std::vector<uint64_t> tokens(expert_usage_->num_experts(), 0);
  for (int l = 0; l < expert_usage_->num_layers(); ++l) {
    for (int e = 0; e < expert_usage_->num_experts(); ++e) {
      tokens[e] += expert_usage_->Tokens(l, e);
    }
  }
  if (data_parallel_ != nullptr) {
    const int ranks = data_parallel_->size();
    std::vector<uint64_t> every(tokens.size() * ranks);
    if (absl::Status s = data_parallel_->AllGather(
            parallel::AsBytes(tokens), parallel::AsWritableBytes(every));
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("gathering the ranks' routed-token "
                                       "counts: ",
                                       s.message()));
    }
    std::fill(tokens.begin(), tokens.end(), 0);
    for (int p = 0; p < ranks; ++p) {
      for (size_t e = 0; e < tokens.size(); ++e) {
        tokens[e] += every[p * tokens.size() + e];
      }
    }
  }
  return moe::ExpertPlacement::Balanced(tokens, expert_parallel_->size(),
                                        extra_replicas);
}

void Engine::Release(SequenceId sequence) {
  kv_cache_->Release(sequence);
  const auto home = homes_.find(sequence);
  if (home == homes_.end()) return;
  if (KvCache* ledger = rank_ledgers_[home->second.rank].get()) {
    ledger->Release(sequence);
  }
  rank_positions_[home->second.rank] -= home->second.length;
  homes_.erase(home);
}

absl::Status Engine::DataParallelStep(absl::Span<const SequenceChunk> chunks,
                                      std::vector<float>* logits,
                                      backend::Work* work,
                                      std::vector<int32_t>* greedy_tokens) {
  const int rank = data_parallel_->rank(), ranks = data_parallel_->size();
  const int64_t vocab = spec_.vocab_size;
  // Every rank is handed the same chunks, so every rank homes them alike.
  std::vector<int> home_of(chunks.size());
  std::vector<SequenceChunk> local;
  // Per rank: its chunks' logits rows and greedy tokens.
  std::vector<uint64_t> rows_of_rank(ranks, 0), greedy_of_rank(ranks, 0);
  StepShare share;
  // Homes given by the caller are checked before any is taken, so a
  // refused step changes nothing.
  RETURN_IF_ERROR(CheckGreedyOutput(chunks, greedy_tokens));
  for (const SequenceChunk& c : chunks) {
    if (c.home >= ranks) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", c.sequence, ": home rank ", c.home,
                       " in a job of ", ranks, " ranks"));
    }
    const auto held = homes_.find(c.sequence);
    if (c.home >= 0 && held != homes_.end() && held->second.rank != c.home) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", c.sequence, " is held by rank ",
                       held->second.rank, ", not ", c.home));
    }
  }
  for (size_t i = 0; i < chunks.size(); ++i) {
    const SequenceChunk& c = chunks[i];
    auto [home, added] = homes_.try_emplace(c.sequence);
    if (added) {
      home->second.rank =
          c.home >= 0
              ? c.home
              : static_cast<int>(std::min_element(rank_positions_.begin(),
                                                  rank_positions_.end()) -
                                 rank_positions_.begin());
    }
    const int64_t length = static_cast<int64_t>(c.tokens.size());
    home->second.length += length;
    rank_positions_[home->second.rank] += length;
    home_of[i] = home->second.rank;
    if (c.greedy_token) {
      ++greedy_of_rank[home_of[i]];
    } else {
      rows_of_rank[home_of[i]] += c.all_logits ? length : 1;
    }
    share.tokens += length;
    share.logits_rows += c.all_logits ? length : 1;
    if (home_of[i] == rank) local.push_back(c);
  }
  std::vector<float> local_logits;
  std::vector<int32_t> local_greedy;
  if (local.empty()) {
    RETURN_IF_ERROR(runner_->ForwardWithoutTokens());
  } else {
    RETURN_IF_ERROR(runner_->Forward(local, kv_cache_.get(), &local_logits,
                                     work, share, &local_greedy));
  }
  // The other ranks' caches grew as their steps ran: their ledgers too.
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (home_of[i] == rank) continue;
    KvCache& ledger = *rank_ledgers_[home_of[i]];
    const SequenceChunk& c = chunks[i];
    if (absl::Status s =
            ledger.Grow(c.sequence, ledger.Length(c.sequence) +
                                        static_cast<int64_t>(c.tokens.size()));
        !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("rank ", home_of[i],
                                                 "'s KV cache: ", s.message()));
    }
  }

  // Each rank's block, its logits rows then its greedy tokens (int32 bits in
  // float slots), sent to every rank by one broadcast per rank that has
  // any.
  std::vector<uint64_t> first(ranks + 1, 0);
  for (int p = 0; p < ranks; ++p) {
    first[p + 1] = first[p] + rows_of_rank[p] * vocab + greedy_of_rank[p];
  }
  std::vector<float> blocks(first[ranks]);
  std::copy(local_logits.begin(), local_logits.end(),
            blocks.begin() + first[rank]);
  if (!local_greedy.empty()) {
    std::memcpy(blocks.data() + first[rank] + rows_of_rank[rank] * vocab,
                local_greedy.data(), local_greedy.size() * sizeof(int32_t));
  }
  for (int p = 0; p < ranks; ++p) {
    if (first[p + 1] == first[p]) continue;
    absl::Span<float> block =
        absl::MakeSpan(blocks).subspan(first[p], first[p + 1] - first[p]);
    if (absl::Status s =
            data_parallel_->Broadcast(p, parallel::AsWritableBytes(block));
        !s.ok()) {
      return absl::Status(
          s.code(),
          absl::StrCat("sending rank ", p, "'s logits (", rows_of_rank[p],
                       " rows) and greedy tokens (", greedy_of_rank[p],
                       ") on rank ", rank, ": ", s.message()));
    }
  }
  // Back in chunk order.
  logits->clear();
  logits->reserve(
      (first[ranks] - std::accumulate(greedy_of_rank.begin(),
                                      greedy_of_rank.end(), uint64_t{0})));
  if (greedy_tokens != nullptr) greedy_tokens->clear();
  std::vector<uint64_t> next_row(ranks, 0), next_greedy(ranks, 0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int p = home_of[i];
    const float* block = blocks.data() + first[p];
    if (chunks[i].greedy_token) {
      int32_t token;
      std::memcpy(&token, block + rows_of_rank[p] * vocab + next_greedy[p]++,
                  sizeof(token));
      greedy_tokens->push_back(token);
      continue;
    }
    const int64_t rows = chunks[i].all_logits
                             ? static_cast<int64_t>(chunks[i].tokens.size())
                             : 1;
    const float* from = block + next_row[p] * vocab;
    logits->insert(logits->end(), from, from + rows * vocab);
    next_row[p] += rows;
  }
  return absl::OkStatus();
}

}  // namespace ringmoe::runtime

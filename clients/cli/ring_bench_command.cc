// ringmoe bench-ring --model DIR --host_memory_budget BYTES
//   [--prompt_tokens P] [--gen_tokens G] [--ring_slots K]
//
// The memory ring on a model larger than the budget, four ways in one run:
// (i) all resident (no budget: the compute-only time), (ii) synchronous
// on-demand loading of the routed experts (no prefetch, no cache), (iii) the
// ring streaming whole layers ahead, (iv) the ring with expert prediction and
// the expert cache. Each figure sits beside its ceiling, measured in the same
// run: a step can take no less than max(compute-only time, bytes moved /
// read bandwidth of the checkpoint's disk through the same O_DIRECT path).
// Prints one JSON object.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "clients/cli/cli_util.h"
#include "clients/cli/commands.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/engine_flags.h"
#include "memory_ring/disk_tier.h"
#include "memory_ring/read_probe.h"
#include "nlohmann/json.hpp"

ABSL_DECLARE_FLAG(int64_t, prompt_tokens);
ABSL_DECLARE_FLAG(int64_t, gen_tokens);

namespace ringmoe::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Variant {
  std::string name;
  bool streams;
  runtime::RingMode mode;
  int slots;
  int depth;
  bool cache;
};

// Counters of one phase (prefill or decode).
struct Phase {
  double seconds = 0;
  int64_t tokens = 0;
  uint64_t bytes_moved = 0;
  double stall_seconds = 0;
  uint64_t prefetch_hits = 0, prefetch_misses = 0, cache_hits = 0,
           cache_misses = 0;
};

struct Snapshot {
  uint64_t moved, hits, misses, cache_hits, cache_misses;
  double stall;
  explicit Snapshot(const memory_ring::RingStats& s)
      : moved(s.bytes_moved),
        hits(s.prefetch_hits),
        misses(s.prefetch_misses),
        cache_hits(s.cache_hits),
        cache_misses(s.cache_misses),
        stall(s.stall_seconds()) {}
};

void Account(const Snapshot& before, const memory_ring::RingStats& after,
             Phase* p) {
  p->bytes_moved = after.bytes_moved - before.moved;
  p->stall_seconds = after.stall_seconds() - before.stall;
  p->prefetch_hits = after.prefetch_hits - before.hits;
  p->prefetch_misses = after.prefetch_misses - before.misses;
  p->cache_hits = after.cache_hits - before.cache_hits;
  p->cache_misses = after.cache_misses - before.cache_misses;
}

nlohmann::json PhaseJson(const Phase& p, double compute_only_seconds,
                         double bandwidth) {
  const double transfer = p.bytes_moved / bandwidth;
  const double ceiling = std::max(compute_only_seconds, transfer);
  const uint64_t lookups = p.prefetch_hits + p.prefetch_misses;
  const uint64_t cache_lookups = p.cache_hits + p.cache_misses;
  return {
      {"tokens_per_s", p.tokens / p.seconds},
      {"seconds", p.seconds},
      {"bytes_moved", p.bytes_moved},
      {"bytes_moved_per_token", static_cast<double>(p.bytes_moved) / p.tokens},
      {"stall_seconds", p.stall_seconds},
      {"stall_fraction", p.stall_seconds / p.seconds},
      {"transfer_seconds_at_bandwidth", transfer},
      {"compute_only_seconds", compute_only_seconds},
      {"ceiling_seconds", ceiling},
      {"ceiling_ratio", ceiling / p.seconds},
      {"bound", transfer > compute_only_seconds ? "transfer" : "compute"},
      {"prefetch_hit_rate",
       lookups ? static_cast<double>(p.prefetch_hits) / lookups : 0.0},
      {"cache_hit_rate",
       cache_lookups ? static_cast<double>(p.cache_hits) / cache_lookups : 0.0},
  };
}

absl::Status RunVariant(const runtime::EngineOptions& base, const Variant& v,
                        int64_t prompt_tokens, int64_t gen_tokens,
                        Phase* prefill, Phase* decode, std::string* placement) {
  runtime::EngineOptions options = base;
  if (!v.streams) {
    options.streaming.memory_budget = 0;
  } else {
    options.streaming.mode = v.mode;
    options.streaming.num_slots = v.slots;
    options.streaming.prefetch_depth = v.depth;
    options.streaming.expert_cache = v.cache;
  }
  options.kv_cache_tokens = prompt_tokens + gen_tokens;
  absl::StatusOr<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::Load(options);
  if (!engine.ok()) return engine.status();
  runtime::Engine& e = **engine;
  *placement = e.placement().Summary();
  const int64_t vocab = e.spec().vocab_size;
  const std::vector<int32_t> prompt = SyntheticTokens(prompt_tokens, vocab, 7);
  std::vector<float> logits;
  if (!v.streams) {
    // Resident weights are memory-mapped: fault them in first, or the
    // compute-only times would include reading the file.
    absl::Status warm = e.Step({{0, prompt, false}}, &logits);
    if (!warm.ok()) return warm;
    e.Release(0);
  }

  Snapshot before(e.ring_stats());
  auto start = Clock::now();
  absl::Status status = e.Step({{1, prompt, false}}, &logits);
  if (!status.ok()) return status;
  prefill->seconds = Since(start);
  prefill->tokens = prompt_tokens;
  Account(before, e.ring_stats(), prefill);

  Snapshot decode_before(e.ring_stats());
  start = Clock::now();
  for (int64_t i = 0; i < gen_tokens; ++i) {
    const int32_t next = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin());
    std::vector<int32_t> token = {next};
    status = e.Step({{1, token, false}}, &logits);
    if (!status.ok()) return status;
  }
  decode->seconds = Since(start);
  decode->tokens = gen_tokens;
  Account(decode_before, e.ring_stats(), decode);
  return absl::OkStatus();
}

}  // namespace

int RunRingBench() {
  auto base = runtime::EngineOptionsFromFlags();
  if (!base.ok()) return Fail("bench-ring", base.status());
  if (base->streaming.memory_budget == 0) {
    return Fail(
        "bench-ring",
        absl::InvalidArgumentError(
            "--host_memory_budget is required (smaller than the model)"));
  }
  const int64_t prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  const int64_t gen_tokens = absl::GetFlag(FLAGS_gen_tokens);
  if (prompt_tokens < 1 || gen_tokens < 1) {
    return Fail("bench-ring",
                absl::InvalidArgumentError(
                    "--prompt_tokens and --gen_tokens must be positive"));
  }
  const int slots = base->streaming.num_slots;

  // The disk's read bandwidth through the ring's own copy path.
  auto checkpoint = checkpoint::Checkpoint::Open(base->model_dir);
  if (!checkpoint.ok()) return Fail("bench-ring", checkpoint.status());
  std::vector<std::string> paths;
  uint64_t largest = 0;
  int largest_source = 0;
  for (const auto& f : (*checkpoint)->files()) {
    if (f->file_size() > largest) {
      largest = f->file_size();
      largest_source = static_cast<int>(paths.size());
    }
    paths.push_back(f->path());
  }
  const uint64_t model_bytes = (*checkpoint)->total_bytes();
  checkpoint->reset();
  auto tier = memory_ring::CreateDiskTier(
      paths, {base->streaming.io_threads, base->streaming.direct_io});
  if (!tier.ok()) return Fail("bench-ring", tier.status());
  const uint64_t probe_bytes =
      std::min<uint64_t>(largest, 2ull << 30) / 4096 * 4096;
  auto probe = [&]() {
    return memory_ring::MeasureReadBandwidth(tier->get(), largest_source, 0,
                                             probe_bytes);
  };
  // Virtual disks run faster once the host has cached the file: probe before
  // and after the variants and take the faster, so no ratio flatters.
  auto bandwidth_before = probe();
  if (!bandwidth_before.ok())
    return Fail("bench-ring", bandwidth_before.status());

  const std::vector<Variant> variants = {
      {"all_resident", false, runtime::RingMode::kAuto, slots, 0, false},
      {"on_demand", true, runtime::RingMode::kExpert, 2, 0, false},
      {"ring_layers", true, runtime::RingMode::kLayer, slots, slots - 1, false},
      {"ring_predicted_experts_cache", true, runtime::RingMode::kExpert, slots,
       slots - 1, true},
  };
  nlohmann::json out = {
      {"model", base->model_dir},
      {"model_weight_bytes", model_bytes},
      {"host_memory_budget", base->streaming.memory_budget},
      {"direct_io", base->streaming.direct_io},
      {"prompt_tokens", prompt_tokens},
      {"gen_tokens", gen_tokens},
  };
  struct Result {
    std::string placement;
    Phase prefill, decode;
  };
  std::vector<Result> results(variants.size());
  for (size_t i = 0; i < variants.size(); ++i) {
    Result& r = results[i];
    absl::Status status =
        RunVariant(*base, variants[i], prompt_tokens, gen_tokens, &r.prefill,
                   &r.decode, &r.placement);
    if (!status.ok()) return Fail("bench-ring", status);
    std::fprintf(stderr, "bench-ring: %s done\n", variants[i].name.c_str());
  }
  auto bandwidth_after = probe();
  tier->reset();
  if (!bandwidth_after.ok())
    return Fail("bench-ring", bandwidth_after.status());
  const double bandwidth = std::max(*bandwidth_before, *bandwidth_after);
  out["read_bandwidth_bytes_per_s"] = bandwidth;
  out["read_bandwidth_probes_bytes_per_s"] = {*bandwidth_before,
                                              *bandwidth_after};
  // Variant 0 is all resident: its times are the compute-only times.
  for (size_t i = 0; i < variants.size(); ++i) {
    out["variants"][variants[i].name] = {
        {"placement", results[i].placement},
        {"prefill",
         PhaseJson(results[i].prefill, results[0].prefill.seconds, bandwidth)},
        {"decode",
         PhaseJson(results[i].decode, results[0].decode.seconds, bandwidth)},
    };
  }
  const double layer_bytes =
      out["variants"]["ring_layers"]["decode"]["bytes_moved_per_token"];
  const double expert_bytes = out["variants"]["ring_predicted_experts_cache"]
                                 ["decode"]["bytes_moved_per_token"];
  out["decode_bytes_reduction_expert_vs_layer"] =
      expert_bytes > 0 ? layer_bytes / expert_bytes : 0.0;
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace ringmoe::cli

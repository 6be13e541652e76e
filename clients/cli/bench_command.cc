// ringmoe bench --model DIR [--prompt_tokens P] [--gen_tokens G] [--batch B]
//
// Engine throughput on this machine, next to its ceilings measured in the
// same run: prefill tokens/s against the peak-FLOP probe, decode tokens/s
// against the streaming-read bandwidth (decode reads every weight it uses
// once per step, so tokens/s cannot exceed bandwidth / weight bytes per
// token). This machine's memory speed drifts over seconds to minutes, so
// decode runs in rounds, each bracketed by bandwidth probes, and its ratio
// to the ceiling is the median over rounds of each round's rate against the
// faster of its two probes. Prints one JSON object.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "base/statistics.h"
#include "clients/cli/cli_util.h"
#include "clients/cli/commands.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/engine_flags.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/probes.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(int64_t, prompt_tokens, 512, "bench: prompt length per sequence.");
ABSL_FLAG(int64_t, gen_tokens, 32, "bench: decode steps after the prompt.");
ABSL_FLAG(int64_t, batch, 1, "bench: sequences run together.");
ABSL_FLAG(int, bench_repetitions, 3,
          "bench: prefill repetitions (the median is reported).");
ABSL_FLAG(int, competing_processes, 0,
          "bench: processes that keep a core busy for the whole run, each "
          "spinning on one, as a neighbour on a shared machine would.");
ABSL_FLAG(int, bench_rounds, 4,
          "bench: decode rounds, each between two bandwidth probes.");

namespace ringmoe::cli {
namespace {

// Per weight type: the weight prefetch its decode products use and the
// read rates it was chosen by (zero where --weight_prefetch forced it).
nlohmann::json WeightPrefetchJson(
    const std::vector<kernels::WeightPrefetchTuning>& tunings) {
  nlohmann::json out = nlohmann::json::object();
  for (const kernels::WeightPrefetchTuning& t : tunings) {
    out[kernels::WeightTypeName(t.type)] = {
        {"chosen", kernels::WeightPrefetchName(t.chosen)},
        {"software_bytes_per_s", t.software_bytes_per_s},
        {"hardware_only_bytes_per_s", t.hardware_only_bytes_per_s}};
  }
  return out;
}

// The share of the weight bytes of `work`'s products that each kernel path
// read, by path name.
nlohmann::json PathShares(const backend::Work& work) {
  int64_t total = 0;
  for (const auto& [kernel, bytes] : work.weight_bytes_by_kernel) {
    total += bytes;
  }
  nlohmann::json shares = nlohmann::json::object();
  for (const auto& [kernel, bytes] : work.weight_bytes_by_kernel) {
    if (bytes > 0) {
      shares[kernel] = static_cast<double>(bytes) / static_cast<double>(total);
    }
  }
  return shares;
}

// Child processes that spin until the bench ends (or dies: they ask the
// kernel for SIGKILL when their parent goes).
class CompetingProcesses {
 public:
  explicit CompetingProcesses(int count) {
    for (int i = 0; i < count; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        volatile uint64_t spins = 0;
        while (true) spins = spins + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  CompetingProcesses(const CompetingProcesses&) = delete;
  CompetingProcesses& operator=(const CompetingProcesses&) = delete;
  ~CompetingProcesses() {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  int started() const { return static_cast<int>(pids_.size()); }

 private:
  std::vector<pid_t> pids_;
};

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int RunBench() {
  auto options = runtime::EngineOptionsFromFlags();
  if (!options.ok()) return Fail("bench", options.status());
  const int64_t prompt = absl::GetFlag(FLAGS_prompt_tokens);
  const int64_t gen = absl::GetFlag(FLAGS_gen_tokens);
  const int64_t batch = absl::GetFlag(FLAGS_batch);
  const int reps = absl::GetFlag(FLAGS_bench_repetitions);
  const int rounds = absl::GetFlag(FLAGS_bench_rounds);
  if (prompt < 1 || gen < 1 || batch < 1 || reps < 1 || rounds < 1) {
    return Fail("bench", absl::InvalidArgumentError(
                             "--prompt_tokens, --gen_tokens, --batch, "
                             "--bench_repetitions and --bench_rounds must be "
                             "positive"));
  }
  if (rounds > gen) {
    return Fail("bench", absl::InvalidArgumentError(absl::StrCat(
                             "--bench_rounds (", rounds,
                             ") exceeds --gen_tokens (", gen, ")")));
  }
  const int competing = absl::GetFlag(FLAGS_competing_processes);
  if (competing < 0) {
    return Fail("bench", absl::InvalidArgumentError(
                             "--competing_processes must not be negative"));
  }
  // Started before the engine, so that they run through every phase.
  const CompetingProcesses competitors(competing);
  if (competitors.started() != competing) {
    return Fail("bench", absl::InternalError(absl::StrCat(
                             "started ", competitors.started(), " of ",
                             competing, " competing processes")));
  }
  if (options->kv_cache_tokens == 0) {
    options->kv_cache_tokens = batch * (prompt + gen + 16);
  }
  const auto load_start = std::chrono::steady_clock::now();
  auto loaded = runtime::Engine::Load(*options);
  if (!loaded.ok()) return Fail("bench", loaded.status());
  runtime::Engine& engine = **loaded;
  const double load_seconds = SecondsSince(load_start);
  const int64_t vocab = engine.spec().vocab_size;

  std::vector<std::vector<int32_t>> prompts;
  for (int64_t b = 0; b < batch; ++b)
    prompts.push_back(SyntheticTokens(prompt, vocab, static_cast<uint32_t>(b)));
  // Steps return greedy tokens, as the server's greedy requests do: only
  // they reach the host.
  std::vector<float> logits;
  std::vector<int32_t> greedy;
  runtime::SequenceId next_id = 0;
  // One prefill of the whole batch; returns the sequence ids it used.
  auto prefill = [&](backend::Work* work)
      -> absl::StatusOr<std::vector<runtime::SequenceId>> {
    std::vector<runtime::SequenceChunk> chunks;
    std::vector<runtime::SequenceId> ids;
    for (int64_t b = 0; b < batch; ++b) {
      ids.push_back(next_id++);
      chunks.push_back({ids.back(), prompts[b]});
      chunks.back().greedy_token = true;
    }
    absl::Status status = engine.Step(chunks, &logits, work, &greedy);
    if (!status.ok()) return status;
    return ids;
  };
  auto release = [&](const std::vector<runtime::SequenceId>& ids) {
    for (runtime::SequenceId id : ids) engine.Release(id);
  };

  // Warm-up: touches the memory-mapped weights so page faults are not timed.
  {
    auto ids = prefill(nullptr);
    if (!ids.ok()) return Fail("bench", ids.status());
    release(*ids);
  }
  const double peak_flops = kernels::MeasurePeakFlops(engine.pool());
  // bf16-rounded products' own ceiling, where they run.
  const double peak_bf16_flops =
      options->activation_precision != kernels::ActivationPrecision::kF32
          ? kernels::MeasurePeakBf16Flops(engine.pool())
          : 0;

  std::vector<double> prefill_seconds;
  backend::Work prefill_work;
  std::vector<runtime::SequenceId> ids;
  for (int r = 0; r < reps; ++r) {
    if (!ids.empty()) release(ids);
    backend::Work work;
    const auto start = std::chrono::steady_clock::now();
    auto step_ids = prefill(&work);
    prefill_seconds.push_back(SecondsSince(start));
    if (!step_ids.ok()) return Fail("bench", step_ids.status());
    ids = *step_ids;
    prefill_work = work;
  }

  // Decode: greedy next tokens of every sequence, one step per token, in
  // rounds between bandwidth probes.
  std::vector<double> step_seconds;
  std::vector<int64_t> step_bytes;
  std::vector<double> probes = {kernels::MeasureReadBandwidth(engine.pool())};
  std::vector<double> round_ratios;
  backend::Work decode_work;
  std::vector<std::vector<int32_t>> next(batch);
  for (int round = 0; round < rounds; ++round) {
    double round_seconds = 0, round_bytes = 0;
    for (int64_t g = gen * round / rounds; g < gen * (round + 1) / rounds;
         ++g) {
      std::vector<runtime::SequenceChunk> chunks;
      for (int64_t b = 0; b < batch; ++b) {
        next[b] = {greedy[b]};
        chunks.push_back({ids[b], next[b]});
        chunks.back().greedy_token = true;
      }
      backend::Work work;
      const auto start = std::chrono::steady_clock::now();
      absl::Status status = engine.Step(chunks, &logits, &work, &greedy);
      step_seconds.push_back(SecondsSince(start));
      if (!status.ok()) return Fail("bench", status);
      step_bytes.push_back(work.weight_bytes);
      decode_work.Add(work);
      round_seconds += step_seconds.back();
      round_bytes += static_cast<double>(work.weight_bytes);
    }
    probes.push_back(kernels::MeasureReadBandwidth(engine.pool()));
    round_ratios.push_back(round_bytes / round_seconds /
                           std::max(probes[round], probes[round + 1]));
  }
  release(ids);

  const double bandwidth = Median(probes);
  const double prefill_s = Median(prefill_seconds);
  const double step_s = Median(step_seconds);
  double mean_step_bytes = 0;
  for (int64_t b : step_bytes) mean_step_bytes += static_cast<double>(b);
  mean_step_bytes /= static_cast<double>(step_bytes.size());
  const double decode_bytes_per_s = mean_step_bytes / step_s;
  const double prefill_flops_per_s = prefill_work.flops / prefill_s;

  const std::string conversion =
      options->weight_conversion.mlp_type
          ? kernels::WeightTypeName(*options->weight_conversion.mlp_type)
          : "auto";
  std::vector<std::string> features;
  for (const kernels::CpuFeature& f : kernels::CpuFeatures()) {
    if (f.present) features.push_back(f.name);
  }
  nlohmann::json out = {
      {"model", options->model_dir},
      {"weight_dtype", conversion},
      {"quantize_attention", options->weight_conversion.attention},
      {"quantize_lm_head", options->weight_conversion.lm_head},
      {"activation_precision",
       kernels::ActivationPrecisionName(options->activation_precision)},
      {"threads", engine.pool()->num_threads()},
      {"competing_processes", competing},
      {"cpu", kernels::CpuBrand()},
      {"cpu_features", features},
      {"kernel_paths",
       {{"prefill_products", PathShares(prefill_work)},
        {"decode_products", PathShares(decode_work)},
        {"attention", kernels::KernelPathName(kernels::VectorPath())}}},
      {"weight_prefetch", WeightPrefetchJson(engine.weight_prefetch())},
      {"batch", batch},
      {"prompt_tokens", prompt},
      {"gen_tokens", gen},
      {"load_seconds", load_seconds},
      {"resident_weights_copied", engine.resident_weights_copied()},
      {"prefill_tokens_per_s", batch * prompt / prefill_s},
      {"prefill_flops_per_token", prefill_work.flops / (batch * prompt)},
      {"prefill_flops_per_s", prefill_flops_per_s},
      {"peak_flops_per_s", peak_flops},
      {"prefill_peak_ratio", prefill_flops_per_s / peak_flops},
      {"peak_bf16_flops_per_s", peak_bf16_flops},
      {"prefill_bf16_peak_ratio",
       peak_bf16_flops > 0 ? prefill_flops_per_s / peak_bf16_flops : 0},
      {"decode_tokens_per_s", batch / step_s},
      {"decode_step_seconds_median", step_s},
      {"weight_bytes_per_step", mean_step_bytes},
      {"weight_bytes_per_token", mean_step_bytes / batch},
      {"decode_weight_bytes_per_s", decode_bytes_per_s},
      {"bandwidth_bytes_per_s", bandwidth},
      {"bandwidth_probes_bytes_per_s", probes},
      {"decode_ceiling_tokens_per_s", bandwidth / (mean_step_bytes / batch)},
      {"decode_round_ceiling_ratios", round_ratios},
      {"decode_ceiling_ratio", Median(round_ratios)},
  };
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace ringmoe::cli

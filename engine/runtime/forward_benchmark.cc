// forward_benchmark: the forward pass of a checkpoint through the engine on
// one device: prefill of --prompt tokens, then decode steps at each batch
// size of --batches, each figure beside the ceilings measured in the same
// run (device memory bandwidth for decode, matrix-product rate for
// prefill). With --device_memory_budget the routed experts that do not fit
// run hybrid, once per --placements entry, and each decode figure also
// stands beside its bound: the bytes of the experts outside device memory
// that a step touched, moved at the host's read bandwidth and the
// host-to-device bandwidth together (the CPU and the copy engine in
// parallel); --host_memory_budget adds the third tier (experts beyond it
// stream from disk); each hybrid run carries its placement model, as
// calibrated at start-up and as the run left it. --steps_as runs each
// configuration in turn with decode steps replayed as CUDA graphs
// ("graphs"), issued from the host with the MoE layers routed on the
// device ("device") and routed on the host ("host").
// Prints one JSON object. Needs no tokenizer, so GPU machines run it from
// tools/gpu_check.sh's bundle.
//
//   forward_benchmark --model DIR --device cuda:0 --batches 1,32
//       --steps_as graphs,device,host
//   forward_benchmark --model DIR --device cuda:0 --device_memory_budget 1GiB
//       --placements auto,cpu,stream
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/statistics.h"
#include "base/status_macros.h"
#include "base/thread_pool.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/placement_policy.h"
#include "kernels/cpu/probes.h"
#include "kernels/cuda/device_info.h"
#include "memory_ring/placement.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "Checkpoint directory.");
ABSL_FLAG(std::string, device, "cuda:0", "cpu, cuda:N or standin.");
ABSL_FLAG(std::string, batches, "1,32", "Decode batch sizes.");
ABSL_FLAG(int, prompt, 512, "Prefill tokens (one sequence).");
ABSL_FLAG(int, context, 64, "Positions each decode sequence holds first.");
ABSL_FLAG(int, steps, 20, "Timed decode steps per batch size.");
ABSL_FLAG(std::string, device_memory_budget, "",
          "Device memory for weights; empty: every weight resident.");
ABSL_FLAG(std::string, placements, "auto",
          "With a budget: the --placement values to run, in turn.");
ABSL_FLAG(std::string, steps_as, "graphs",
          "How steps run, in turn: graphs (CUDA graphs where they apply), "
          "device (--cuda_graphs=false) and/or host (--route_on_device="
          "false).");
ABSL_FLAG(std::string, host_memory_budget, "",
          "With a device budget: pinned RAM for the experts outside device "
          "memory; the rest stream from disk. Empty: no limit.");

namespace ringmoe {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "forward_benchmark: %s\n", status.ToString().c_str());
  return 1;
}

struct Ceilings {
  double device_copy = 0;     // bytes/s
  double host_to_device = 0;  // bytes/s
  double matmul = 0;          // FLOP/s
  double host_read = 0;       // bytes/s
};

uint64_t OutsideRuns(const memory_ring::RingStats& s) {
  return s.expert_runs_cpu + s.expert_runs_streamed;
}

// Prefill and decode figures of one engine.
absl::StatusOr<nlohmann::json> Measure(runtime::Engine& engine,
                                       const Ceilings& ceilings,
                                       const std::vector<int64_t>& batches) {
  const model::ModelSpec& spec = engine.spec();
  const int prompt = absl::GetFlag(FLAGS_prompt);
  const int context = absl::GetFlag(FLAGS_context);
  const int steps = absl::GetFlag(FLAGS_steps);
  const memory_ring::RingStats& stats = engine.ring_stats();
  const double expert_bytes = engine.placement().expert_bytes;
  nlohmann::json out;
  std::vector<float> logits;
  // Prefill: one sequence of `prompt` tokens, four runs (the first warms
  // up), median.
  std::vector<int32_t> tokens(prompt);
  for (int i = 0; i < prompt; ++i) {
    tokens[i] = (i * 7919 + 13) % spec.vocab_size;
  }
  std::vector<double> prefill_times;
  backend::Work prefill_work;
  for (int r = 0; r < 4; ++r) {
    backend::Work work;
    const auto start = Clock::now();
    RETURN_IF_ERROR(engine.Step({{1000 + r, tokens, false}}, &logits, &work));
    const double t = SecondsSince(start);
    engine.kv_cache().Release(1000 + r);
    if (r > 0) prefill_times.push_back(t);
    prefill_work = work;
  }
  const double prefill_s = Median(prefill_times);
  nlohmann::json& prefill = out["prefill"];
  prefill = {{"tokens", prompt},
             {"seconds", prefill_s},
             {"tokens_per_s", prompt / prefill_s},
             {"TFLOPs", prefill_work.flops / prefill_s / 1e12}};
  if (ceilings.matmul > 0) {
    prefill["ratio_to_sgemm"] =
        prefill_work.flops / prefill_s / ceilings.matmul;
  }

  for (const int64_t batch : batches) {
    std::vector<std::vector<int32_t>> prefix(batch), next(batch);
    std::vector<runtime::SequenceChunk> chunks;
    for (int64_t s = 0; s < batch; ++s) {
      prefix[s].resize(context);
      for (int i = 0; i < context; ++i) {
        prefix[s][i] = ((s + 1) * 104729 + i * 31) % spec.vocab_size;
      }
      chunks.push_back({s, prefix[s], false});
    }
    RETURN_IF_ERROR(engine.Step(chunks, &logits));
    std::vector<double> times, outside_bytes;
    backend::Work step_work;
    for (int step = 0; step < steps + 1; ++step) {
      chunks.clear();
      for (int64_t s = 0; s < batch; ++s) {
        next[s] = {static_cast<int32_t>((step * 17 + s) % spec.vocab_size)};
        chunks.push_back({s, next[s], false});
      }
      backend::Work work;
      const uint64_t runs_before = OutsideRuns(stats);
      const auto start = Clock::now();
      RETURN_IF_ERROR(engine.Step(chunks, &logits, &work));
      const double t = SecondsSince(start);
      if (step == 0) continue;  // warm-up
      times.push_back(t);
      outside_bytes.push_back((OutsideRuns(stats) - runs_before) *
                              expert_bytes);
      step_work = work;
    }
    for (int64_t s = 0; s < batch; ++s) engine.kv_cache().Release(s);
    const double t = Median(times);
    const double bandwidth = step_work.weight_bytes / t;
    nlohmann::json figure = {{"batch", batch},
                             {"step_seconds", t},
                             {"tokens_per_s", batch / t},
                             {"weight_bytes_per_step", step_work.weight_bytes},
                             {"weight_GBps", bandwidth / 1e9}};
    if (ceilings.device_copy > 0) {
      figure["ratio_to_copy"] = bandwidth / ceilings.device_copy;
    }
    const double outside = Median(outside_bytes);
    if (engine.placement().streams() && ceilings.host_read > 0) {
      // The experts outside device memory, over both paths at once.
      const double bound =
          outside / (ceilings.host_read + ceilings.host_to_device);
      figure["outside_expert_bytes_per_step"] = outside;
      figure["bound_seconds"] = bound;
      figure["ratio_to_bound"] = bound / t;
    }
    out["decode"].push_back(figure);
  }
  out["expert_runs"] = {{"gpu", stats.expert_runs_device.load()},
                        {"cpu", stats.expert_runs_cpu.load()},
                        {"stream", stats.expert_runs_streamed.load()}};
  out["host_to_device_bytes"] = stats.bytes_host_to_device.load();
  return out;
}

int Run() {
  std::vector<int64_t> batches;
  for (absl::string_view b :
       absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(b, &v) || v <= 0) {
      return Fail(absl::InvalidArgumentError("--batches: positive integers"));
    }
    batches.push_back(v);
  }
  runtime::EngineOptions options;
  options.model_dir = absl::GetFlag(FLAGS_model);
  options.device = absl::GetFlag(FLAGS_device);
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  options.kv_cache_tokens =
      std::max<int64_t>(absl::GetFlag(FLAGS_prompt),
                        max_batch * (absl::GetFlag(FLAGS_context) +
                                     absl::GetFlag(FLAGS_steps) + 2) +
                            max_batch * options.kv_block_size);
  std::vector<runtime::PlacementMode> placements = {
      runtime::PlacementMode::kAuto};
  if (const std::string budget = absl::GetFlag(FLAGS_device_memory_budget);
      !budget.empty()) {
    absl::StatusOr<uint64_t> bytes = memory_ring::ParseByteSize(budget);
    if (!bytes.ok()) return Fail(bytes.status());
    options.device_memory_budget = static_cast<int64_t>(*bytes);
    if (const std::string host = absl::GetFlag(FLAGS_host_memory_budget);
        !host.empty()) {
      absl::StatusOr<uint64_t> host_bytes = memory_ring::ParseByteSize(host);
      if (!host_bytes.ok()) return Fail(host_bytes.status());
      options.streaming.memory_budget = *host_bytes;
    }
    placements.clear();
    for (absl::string_view p :
         absl::StrSplit(absl::GetFlag(FLAGS_placements), ',')) {
      absl::StatusOr<runtime::PlacementMode> mode =
          runtime::ParsePlacementMode(p);
      if (!mode.ok()) return Fail(mode.status());
      placements.push_back(*mode);
    }
  }

  nlohmann::json out = {{"device", options.device},
                        {"model", options.model_dir}};
  Ceilings ceilings;
  {
    ThreadPool probe_pool(0);
    ceilings.host_read = kernels::MeasureReadBandwidth(&probe_pool);
  }
  if (options.device.rfind("cuda:", 0) == 0) {
    const cuda::DeviceCeilings c =
        cuda::MeasureCeilings(std::stoi(options.device.substr(5)));
    ceilings.device_copy = c.device_copy_bytes_per_s;
    ceilings.host_to_device = c.host_to_device_bytes_per_s;
    ceilings.matmul = c.sgemm_flops_per_s;
  }
  out["ceilings"] = {{"host_read_GBps", ceilings.host_read / 1e9},
                     {"device_copy_GBps", ceilings.device_copy / 1e9},
                     {"host_to_device_GBps", ceilings.host_to_device / 1e9},
                     {"sgemm_TFLOPs", ceilings.matmul / 1e12}};
  if (options.device_memory_budget > 0) {
    out["device_memory_budget"] = options.device_memory_budget;
  }
  if (options.streaming.memory_budget > 0) {
    out["host_memory_budget"] = options.streaming.memory_budget;
  }
  std::vector<std::string> steps_as;
  for (absl::string_view v :
       absl::StrSplit(absl::GetFlag(FLAGS_steps_as), ',')) {
    if (v != "graphs" && v != "device" && v != "host") {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--steps_as: graphs, device or host, not ", v)));
    }
    steps_as.emplace_back(v);
  }
  for (const runtime::PlacementMode mode : placements) {
    for (const std::string& variant : steps_as) {
      options.placement = mode;
      options.route_on_device = variant != "host";
      options.cuda_graphs = variant == "graphs";
      absl::StatusOr<std::unique_ptr<runtime::Engine>> engine =
          runtime::Engine::Load(options);
      if (!engine.ok()) return Fail(engine.status());
      const runtime::PlacementPolicy* policy = (*engine)->placement_policy();
      const std::string calibrated = policy ? policy->Describe() : "";
      absl::StatusOr<nlohmann::json> run = Measure(**engine, ceilings, batches);
      if (!run.ok()) return Fail(run.status());
      (*run)["placement"] = runtime::PlacementModeName(mode);
      (*run)["steps_as"] = variant;
      (*run)["plan"] = (*engine)->placement().Summary();
      // The path costs at start-up and as the run left them (auto refines
      // them from measured layers).
      if (policy != nullptr) {
        (*run)["placement_model"] = {{"calibrated", calibrated},
                                     {"refined", policy->Describe()}};
      }
      out["runs"].push_back(*run);
    }
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace ringmoe

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return ringmoe::Run();
}

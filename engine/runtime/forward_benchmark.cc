// forward_benchmark: the forward pass of a checkpoint on one backend, every
// weight resident: prefill of --prompt tokens, then decode steps at each
// batch size of --batches, each figure beside the device's ceilings
// measured in the same run (memory bandwidth for decode, matrix-product
// rate for prefill). Prints one JSON object. Needs no tokenizer, so GPU
// machines run it from tools/gpu_check.sh's bundle.
//
//   forward_benchmark --model DIR --device cuda:0 --batches 1,32
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/backend/backend_factory.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/architecture.h"
#include "engine/model/config.h"
#include "engine/model/model_weights.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/model_runner.h"
#include "kernels/cuda/device_info.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, model, "", "Checkpoint directory.");
ABSL_FLAG(std::string, device, "cuda:0", "cpu or cuda:N.");
ABSL_FLAG(std::string, batches, "1,32", "Decode batch sizes.");
ABSL_FLAG(int, prompt, 512, "Prefill tokens (one sequence).");
ABSL_FLAG(int, context, 64, "Positions each decode sequence holds first.");
ABSL_FLAG(int, steps, 20, "Timed decode steps per batch size.");

namespace ringmoe {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "forward_benchmark: %s\n", status.ToString().c_str());
  return 1;
}

int Run() {
  const std::string dir = absl::GetFlag(FLAGS_model);
  const std::string device = absl::GetFlag(FLAGS_device);
  auto spec = model::LoadModelConfig(dir);
  if (!spec.ok()) return Fail(spec.status());
  auto arch = model::FindArchitecture(spec->architecture);
  if (!arch.ok()) return Fail(arch.status());
  auto checkpoint = checkpoint::Checkpoint::Open(dir);
  if (!checkpoint.ok()) return Fail(checkpoint.status());
  auto host = model::BindModelWeights(*spec, **arch, **checkpoint);
  if (!host.ok()) return Fail(host.status());
  ThreadPool pool(0);
  auto backend = backend::CreateBackend(device, &pool);
  if (!backend.ok()) return Fail(backend.status());
  const bool on_device =
      (*backend)->weight_memory() == backend::MemorySpace::kDevice;
  model::ModelWeights weights;
  if (on_device) {
    auto uploaded = model::UploadWeights(*host, **backend);
    if (!uploaded.ok()) return Fail(uploaded.status());
    weights = std::move(*uploaded);
  } else {
    model::PrefaultWeights(*host);
  }
  const runtime::ModelRunner runner(*spec, on_device ? weights : *host,
                                    backend->get());
  std::vector<int64_t> batches;
  for (absl::string_view b :
       absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(b, &v) || v <= 0) {
      return Fail(absl::InvalidArgumentError("--batches: positive integers"));
    }
    batches.push_back(v);
  }
  const int prompt = absl::GetFlag(FLAGS_prompt);
  const int context = absl::GetFlag(FLAGS_context);
  const int steps = absl::GetFlag(FLAGS_steps);
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  const int64_t block = 16;
  const int64_t positions =
      std::max<int64_t>(prompt, max_batch * (context + steps + 2));
  runtime::KvCache cache(runtime::KvCacheLayers(*spec), block,
                         spec->num_layers * (positions / block + max_batch + 1),
                         on_device ? backend->get() : nullptr);

  nlohmann::json out = {{"device", device}, {"model", dir}};
  double copy_bandwidth = 0, matmul_rate = 0;
  if (on_device) {
    const cuda::DeviceCeilings c =
        cuda::MeasureCeilings(std::stoi(device.substr(5)));
    copy_bandwidth = c.device_copy_bytes_per_s;
    matmul_rate = c.sgemm_flops_per_s;
    out["ceilings"] = {
        {"device_copy_GBps", c.device_copy_bytes_per_s / 1e9},
        {"host_to_device_GBps", c.host_to_device_bytes_per_s / 1e9},
        {"sgemm_TFLOPs", c.sgemm_flops_per_s / 1e12}};
  }

  std::vector<float> logits;
  // Prefill: one sequence of `prompt` tokens, three runs, median.
  std::vector<int32_t> tokens(prompt);
  for (int i = 0; i < prompt; ++i)
    tokens[i] = (i * 7919 + 13) % spec->vocab_size;
  std::vector<double> prefill_times;
  backend::Work prefill_work;
  for (int r = 0; r < 4; ++r) {
    backend::Work work;
    const auto start = Clock::now();
    if (absl::Status s =
            runner.Forward({{1000 + r, tokens, false}}, &cache, &logits, &work);
        !s.ok()) {
      return Fail(s);
    }
    const double t =
        std::chrono::duration<double>(Clock::now() - start).count();
    cache.Release(1000 + r);
    if (r > 0) prefill_times.push_back(t);  // the first run warms up
    prefill_work = work;
  }
  const double prefill_s = Median(prefill_times);
  nlohmann::json& prefill = out["prefill"];
  prefill = {{"tokens", prompt},
             {"seconds", prefill_s},
             {"tokens_per_s", prompt / prefill_s},
             {"TFLOPs", prefill_work.flops / prefill_s / 1e12}};
  if (matmul_rate > 0) {
    prefill["ratio_to_sgemm"] = prefill_work.flops / prefill_s / matmul_rate;
  }

  for (size_t bi = 0; bi < batches.size(); ++bi) {
    const int64_t batch = batches[bi];
    std::vector<std::vector<int32_t>> next(batch);
    std::vector<runtime::SequenceChunk> chunks;
    std::vector<std::vector<int32_t>> prefix(batch);
    for (int64_t s = 0; s < batch; ++s) {
      prefix[s].resize(context);
      for (int i = 0; i < context; ++i) {
        prefix[s][i] = ((s + 1) * 104729 + i * 31) % spec->vocab_size;
      }
      chunks.push_back({s, prefix[s], false});
    }
    if (absl::Status s = runner.Forward(chunks, &cache, &logits); !s.ok()) {
      return Fail(s);
    }
    std::vector<double> times;
    backend::Work step_work;
    for (int step = 0; step < steps + 1; ++step) {
      chunks.clear();
      for (int64_t s = 0; s < batch; ++s) {
        next[s] = {static_cast<int32_t>((step * 17 + s) % spec->vocab_size)};
        chunks.push_back({s, next[s], false});
      }
      backend::Work work;
      const auto start = Clock::now();
      if (absl::Status s = runner.Forward(chunks, &cache, &logits, &work);
          !s.ok()) {
        return Fail(s);
      }
      const double t =
          std::chrono::duration<double>(Clock::now() - start).count();
      if (step > 0) times.push_back(t);
      step_work = work;
    }
    for (int64_t s = 0; s < batch; ++s) cache.Release(s);
    const double t = Median(times);
    const double bandwidth = step_work.weight_bytes / t;
    nlohmann::json figure = {{"batch", batch},
                             {"step_seconds", t},
                             {"tokens_per_s", batch / t},
                             {"weight_bytes_per_step", step_work.weight_bytes},
                             {"weight_GBps", bandwidth / 1e9}};
    if (copy_bandwidth > 0)
      figure["ratio_to_copy"] = bandwidth / copy_bandwidth;
    out["decode"].push_back(figure);
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

#include "engine/runtime/hybrid_experts.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/model/packed_mlp.h"
#include "memory_ring/disk_tier.h"
#include "memory_ring/staged_tier.h"

namespace ringmoe::runtime {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

// One thread that runs a layer's CPU experts while the caller drives the
// device: made once, not per layer.
class HybridExperts::CpuLane {
 public:
  CpuLane() : thread_([this] { Loop(); }) {}
  ~CpuLane() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  void Start(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = std::move(job);
    }
    changed_.notify_all();
  }

  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return !job_; });
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      changed_.wait(lock, [this] { return stop_ || job_; });
      if (stop_) return;
      lock.unlock();
      job_();
      lock.lock();
      job_ = nullptr;
      changed_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable changed_;
  std::function<void()> job_;  // set: running or about to
  bool stop_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

HybridExperts::HybridExperts(const model::ModelSpec& spec,
                             const model::ModelWeights& host_weights)
    : spec_(spec), host_weights_(host_weights) {}

absl::StatusOr<std::unique_ptr<HybridExperts>> HybridExperts::Create(
    const model::ModelSpec& spec, const model::ModelWeights& host_weights,
    const checkpoint::Checkpoint& checkpoint, backend::Backend* device,
    backend::Backend* host, const HybridOptions& options,
    memory_ring::RingStats* stats, memory_ring::PlacementPlan* plan,
    model::ModelWeights* device_weights) {
  std::unique_ptr<HybridExperts> h(new HybridExperts(spec, host_weights));
  h->device_ = device;
  h->host_ = host;
  h->options_ = options;
  h->stats_ = stats;
  const int num_layers = static_cast<int>(spec.num_layers);
  const int num_experts = static_cast<int>(spec.num_experts);

  memory_ring::PlacementInput input;
  input.always_resident_bytes = model::NonExpertBytes(host_weights);
  input.num_layers = num_layers;
  input.experts_per_layer = num_experts;
  for (int l = 0; l < num_layers; ++l) {
    if (!spec.layer_is_moe[l]) continue;
    for (const model::MlpWeights& e : host_weights.layers[l].experts) {
      h->expert_stride_ = std::max(h->expert_stride_, model::PackedMlpBytes(e));
    }
  }
  for (int l = 0; l < num_layers; ++l) {
    if (!spec.layer_is_moe[l]) continue;
    for (int e = 0; e < num_experts; ++e) {
      input.experts.push_back({l, e, h->expert_stride_});
    }
  }
  input.budget_bytes = options.device_budget;
  // Under --placement cpu nothing streams: no ring, and what the budget
  // leaves holds experts for good rather than a cache fed by streaming.
  input.num_slots = options.mode == PlacementMode::kCpu ? 0 : options.num_slots;
  input.experts_per_token = static_cast<int>(spec.experts_per_token);
  input.expert_cache = options.mode != PlacementMode::kCpu;
  input.force_streaming = options.mode == PlacementMode::kCpu ||
                          options.mode == PlacementMode::kStream;
  ASSIGN_OR_RETURN(*plan, memory_ring::PlanPlacement(input));
  if (options.mode == PlacementMode::kGpu && plan->streams()) {
    const uint64_t all =
        input.always_resident_bytes + input.experts.size() * h->expert_stride_;
    return absl::ResourceExhaustedError(absl::StrCat(
        "--placement gpu keeps every expert in device memory: ", all,
        " bytes, more than the device memory budget of ", options.device_budget,
        " bytes"));
  }
  if (!plan->streams()) {
    ASSIGN_OR_RETURN(*device_weights,
                     model::UploadWeights(host_weights, *device));
    return std::unique_ptr<HybridExperts>();
  }
  h->on_device_ = plan->expert_resident;
  stats->bytes_resident = plan->resident_bytes;
  stats->bytes_streamed = plan->streamed_bytes;

  h->cpu_lane_ = std::make_unique<CpuLane>();
  using Samples = std::vector<std::pair<int, int>>;
  ASSIGN_OR_RETURN(Samples samples, h->PlaceOutside(checkpoint, *plan));
  PathCosts costs;
  if (options.costs) {
    costs = *options.costs;
  } else if (samples.empty()) {
    // Every expert outside device memory is on disk: none can run on the
    // CPU, every one streams.
    costs.cpu_seconds_fixed = std::numeric_limits<double>::infinity();
  } else {
    ASSIGN_OR_RETURN(costs, h->Calibrate(samples));
  }
  h->policy_ = std::make_unique<PlacementPolicy>(costs, h->expert_stride_);
  // Uploaded after calibrating, whose buffer then has room in any budget.
  ASSIGN_OR_RETURN(*device_weights,
                   model::UploadWeights(host_weights, *device, &h->on_device_));
  h->device_weights_ = device_weights;
  if (options.mode != PlacementMode::kCpu) {
    const int depth = std::min(options.prefetch_depth, plan->num_slots - 1);
    h->section_experts_ = plan->section_experts;
    ASSIGN_OR_RETURN(h->ring_, memory_ring::SectionRing::Create(
                                   h->tier_.get(), plan->slot_bytes,
                                   {plan->num_slots, depth}, stats));
    if (plan->cache_bytes >= h->expert_stride_) {
      ASSIGN_OR_RETURN(h->cache_, memory_ring::ExpertCache::Create(
                                      h->tier_.get(), plan->cache_bytes,
                                      h->expert_stride_, stats));
    }
  }
  h->prefetched_.resize(num_layers);
  std::fprintf(stderr,
               "ringmoe: %s\nringmoe: hybrid experts (--placement %s): %s\n",
               plan->Summary().c_str(),
               std::string(PlacementModeName(options.mode)).c_str(),
               h->policy_->Describe().c_str());
  return h;
}

absl::StatusOr<std::vector<std::pair<int, int>>> HybridExperts::PlaceOutside(
    const checkpoint::Checkpoint& checkpoint,
    const memory_ring::PlacementPlan& plan) {
  const int num_layers = static_cast<int>(spec_.num_layers);
  const int num_experts = static_cast<int>(spec_.num_experts);
  std::vector<std::pair<int, int>> outside;
  for (int l = 0; l < num_layers; ++l) {
    if (!spec_.layer_is_moe[l]) continue;
    for (int e = 0; e < num_experts; ++e) {
      if (!on_device_[l][e]) outside.push_back({l, e});
    }
  }
  // Host memory holds as many of them as the host budget leaves beside two
  // staging buffers; the rest stay in the checkpoint and stream from disk,
  // their parts read where the checkpoint stores them (parts it does not
  // store, such as widened biases, come from host memory).
  const uint64_t budget = options_.host_budget;
  const uint64_t staging_bytes = 2 * plan.slot_bytes;
  size_t in_host = outside.size();
  if (budget > 0 && outside.size() * expert_stride_ > budget) {
    if (options_.mode == PlacementMode::kCpu) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--placement cpu runs the experts outside device memory from host "
          "RAM, but --host_memory_budget (",
          budget, " bytes) holds ", budget / expert_stride_, " of their ",
          outside.size(),
          ": use auto or stream, which stream the rest from "
          "disk"));
    }
    if (budget < staging_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "host memory budget of ", budget,
          " bytes is too small: experts streamed from disk need two staging "
          "buffers of ",
          plan.slot_bytes, " bytes; the smallest budget that works is ",
          staging_bytes, " bytes"));
    }
    in_host = (budget - staging_bytes) / expert_stride_;
  }
  on_disk_.assign(num_layers, std::vector<bool>(num_experts, false));
  pieces_.assign(num_layers,
                 std::vector<std::vector<memory_ring::CopyPiece>>(num_experts));
  host_offset_.assign(num_layers, std::vector<uint64_t>(num_experts, 0));
  source_of_.assign(num_layers, -1);
  std::vector<memory_ring::TierBuffer*> sources;
  std::vector<std::pair<int, int>> samples;  // to calibrate on
  std::vector<uint64_t> layer_bytes(num_layers, 0);
  for (size_t i = 0; i < outside.size(); ++i) {
    const auto [l, e] = outside[i];
    if (i >= in_host) {
      on_disk_[l][e] = true;
      any_on_disk_ = true;
      continue;
    }
    host_offset_[l][e] = layer_bytes[l];
    layer_bytes[l] += expert_stride_;
    if (samples.size() < 8) samples.push_back({l, e});
  }
  for (int l = 0; l < num_layers; ++l) {
    if (layer_bytes[l] == 0) continue;
    ASSIGN_OR_RETURN(std::unique_ptr<memory_ring::TierBuffer> source,
                     device_->AllocateStreamingSource(layer_bytes[l]));
    source_of_[l] = static_cast<int>(sources.size());
    for (int e = 0; e < num_experts; ++e) {
      if (on_device_[l][e] || on_disk_[l][e]) continue;
      model::PackMlp(host_weights_.layers[l].experts[e],
                     source->data() + host_offset_[l][e]);
      pieces_[l][e] = {{source_of_[l], host_offset_[l][e], expert_stride_, 0}};
    }
    sources.push_back(source.get());
    sources_.push_back(std::move(source));
  }
  if (in_host == outside.size()) {
    ASSIGN_OR_RETURN(tier_, device_->CreateStreamingTier(sources));
    return samples;
  }

  // Disk experts: their parts' places in the checkpoint's files (sources
  // numbered after the host's), the others packed into one host buffer.
  std::vector<model::PackedPart> in_memory;
  uint64_t in_memory_bytes = 0;
  const int extras_source = static_cast<int>(sources.size());
  for (size_t i = in_host; i < outside.size(); ++i) {
    const auto [l, e] = outside[i];
    for (const model::PackedPart& part :
         model::PackedMlpParts(host_weights_.layers[l].experts[e])) {
      const auto copy = host_weights_.aligned_copy_of.find(part.data);
      const std::optional<checkpoint::Checkpoint::FileLocation> at =
          checkpoint.Locate(copy == host_weights_.aligned_copy_of.end()
                                ? part.data
                                : copy->second,
                            part.bytes);
      if (at) {
        pieces_[l][e].push_back(
            {-1 - at->file, at->offset, part.bytes, part.offset});
      } else {
        pieces_[l][e].push_back(
            {extras_source, in_memory_bytes, part.bytes, part.offset});
        in_memory.push_back(part);
        in_memory_bytes += part.bytes;
      }
    }
  }
  if (in_memory_bytes > 0) {
    ASSIGN_OR_RETURN(std::unique_ptr<memory_ring::TierBuffer> extras,
                     device_->AllocateStreamingSource(in_memory_bytes));
    uint64_t offset = 0;
    for (const model::PackedPart& part : in_memory) {
      std::memcpy(extras->data() + offset, part.data, part.bytes);
      offset += part.bytes;
    }
    sources.push_back(extras.get());
    sources_.push_back(std::move(extras));
  }
  const int host_sources = static_cast<int>(sources.size());
  // File f is the staged tier's source host_sources + f.
  for (auto& layer : pieces_) {
    for (auto& expert : layer) {
      for (memory_ring::CopyPiece& p : expert) {
        if (p.source < 0) p.source = host_sources + (-1 - p.source);
      }
    }
  }
  std::vector<memory_ring::TierBuffer*> staging;
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<memory_ring::TierBuffer> stage,
                     device_->AllocateStreamingSource(plan.slot_bytes));
    staging.push_back(stage.get());
    sources.push_back(stage.get());
    sources_.push_back(std::move(stage));
  }
  std::vector<std::string> paths;
  for (const auto& file : checkpoint.files()) paths.push_back(file->path());
  ASSIGN_OR_RETURN(std::unique_ptr<memory_ring::Tier> disk,
                   memory_ring::CreateDiskTier(paths, options_.disk));
  ASSIGN_OR_RETURN(std::unique_ptr<memory_ring::Tier> upper,
                   device_->CreateStreamingTier(sources));
  tier_ = memory_ring::CreateStagedTier(std::move(upper), host_sources, staging,
                                        std::move(disk));
  std::fprintf(stderr,
               "ringmoe: %zu of the %zu experts outside device memory in "
               "host RAM, %zu streamed from disk\n",
               in_host, outside.size(), outside.size() - in_host);
  return samples;
}

HybridExperts::~HybridExperts() {
  // Beside the start-up line, what the measured layers taught the model:
  // together they explain the choices of a run.
  if (policy_ && options_.mode == PlacementMode::kAuto) {
    std::fprintf(stderr, "ringmoe: hybrid experts at exit: %s\n",
                 policy_->Describe().c_str());
  }
  // The ring waits for loads in flight before the tier goes away.
  if (ring_) ring_->Reset();
  ring_.reset();
  cache_.reset();
}

absl::StatusOr<PathCosts> HybridExperts::Calibrate(
    absl::Span<const std::pair<int, int>> samples) {
  const int64_t hidden = spec_.hidden_size;
  constexpr int64_t kMany = 16;
  // Each probe runs once per distinct expert, so the weights come from
  // memory as in a step, not from the caches; a first pass over them is
  // not timed (it wakes threads and faults pages a step finds ready), then
  // kRounds passes give the median and the spread. A single pass, its
  // first run cold, left two start-ups on an H200 a minute apart further
  // apart than the paths are at one token.
  constexpr int kRounds = 3;
  auto probe = [&](auto&& run_one) {
    std::vector<double> times;
    for (int round = -1; round < kRounds; ++round) {
      for (const auto& [layer, expert] : samples) {
        const auto start = std::chrono::steady_clock::now();
        run_one(layer, expert);
        if (round >= 0) times.push_back(SecondsSince(start));
      }
    }
    return SummariseProbe(std::move(times));
  };
  auto median_over_samples = [&](auto&& run_one) {
    return probe(run_one).median;
  };
  PathCosts costs;
  std::vector<float> x(kMany * hidden, 0.01f), out(kMany * hidden);
  auto cpu = [&](int64_t n) {
    return probe([&](int layer, int expert) {
      const model::MlpWeights on_host = model::PackedMlpView(
          host_weights_.layers[layer].experts[expert],
          PackedOnHost(layer, expert), backend::MemorySpace::kHost);
      const backend::MlpTask task{
          &on_host, {x.data(), n, hidden}, {out.data(), n, hidden}};
      host_->RunMlps({&task, 1});
    });
  };
  const Probe cpu_one = cpu(1);
  const double cpu_many = cpu(kMany).median;
  costs.cpu_seconds_per_token =
      std::max(0.0, (cpu_many - cpu_one.median) / (kMany - 1));
  costs.cpu_seconds_fixed =
      std::max(0.0, cpu_one.median - costs.cpu_seconds_per_token);

  // Copies over the streaming path into a buffer of the device's, then
  // the device's compute on what landed.
  ASSIGN_OR_RETURN(std::unique_ptr<memory_ring::TierBuffer> slot,
                   tier_->Allocate(expert_stride_));
  auto copy_in = [&](std::vector<memory_ring::CopyPiece> pieces) {
    std::promise<absl::Status> done;
    tier_->CopyAsync(pieces, slot->data(), tier_->RecordComputeFence(),
                     [&](absl::Status s) { done.set_value(std::move(s)); });
    return done.get_future().get();
  };
  absl::Status copied = absl::OkStatus();
  const Probe copy = probe([&](int layer, int expert) {
    copied.Update(copy_in(pieces_[layer][expert]));
  });
  // A copy of a few bytes: what a layer that streams waits for besides the
  // bytes (the fence, the copy's start, its completion reaching the host),
  // paid once per layer rather than per expert.
  const double latency = median_over_samples([&](int layer, int expert) {
    memory_ring::CopyPiece piece = pieces_[layer][expert].front();
    piece.size = std::min<uint64_t>(piece.size, 4096);
    piece.dst_offset = 0;
    copied.Update(copy_in({piece}));
  });
  RETURN_IF_ERROR(copied);
  costs.stream_seconds_setup = std::min(latency, copy.median);
  costs.copy_bytes_per_second =
      expert_stride_ / std::max(copy.median - costs.stream_seconds_setup, 1e-9);
  const backend::Backend::Buffer dx = device_->NewTensor(kMany, hidden);
  const backend::Backend::Buffer dout = device_->NewTensor(kMany, hidden);
  device_->CopyFromHost(x.data(), dx);
  const auto [layer, expert] = samples.back();
  RETURN_IF_ERROR(copy_in(pieces_[layer][expert]));  // whole again
  const model::MlpWeights on_device =
      model::PackedMlpView(host_weights_.layers[layer].experts[expert],
                           slot->data(), device_->weight_memory());
  // The probes synchronise after each expert; a step does not (streamed
  // experts queue on the device), so the synchronisation is left out.
  const double sync =
      median_over_samples([&](int, int) { device_->Synchronize(); });
  auto on_gpu = [&](int64_t n) {
    const backend::MlpTask task{&on_device, dx.tensor().Rows(0, n),
                                dout.tensor().Rows(0, n)};
    return median_over_samples([&](int, int) {
      device_->RunMlps({&task, 1});
      device_->Synchronize();
    });
  };
  const double gpu_one = on_gpu(1), gpu_many = on_gpu(kMany);
  costs.device_seconds_per_token =
      std::max(0.0, (gpu_many - gpu_one) / (kMany - 1));
  costs.device_seconds_fixed =
      std::max(0.0, gpu_one - sync - costs.device_seconds_per_token);
  // The CPU path's setup in a layer: a row down (after the device drains),
  // the CPU thread woken, a row back.
  std::vector<float> row(hidden);
  costs.cpu_seconds_setup = median_over_samples([&](int, int) {
    device_->CopyToHost(dx.tensor().Rows(0, 1), row.data());
    cpu_lane_->Start([] {});
    cpu_lane_->Wait();
    device_->CopyFromHost(row.data(), dout.tensor().Rows(0, 1));
    device_->Synchronize();
  });
  RETURN_IF_ERROR(device_->TakeError());
  // The error of the probes that decide a one-token expert (the CPU's
  // run, the copy; the others are small beside them). At least timers'
  // and scheduling's few percent; past a half, ties would freeze the
  // first choice.
  costs.relative_error =
      std::clamp(std::max(cpu_one.spread, copy.spread), 0.05, 0.5);
  return costs;
}

void HybridExperts::BeginStep(int64_t num_tokens) {
  failed_ = false;
  // A step's experts have about n·k/E tokens each.
  const int64_t k = spec_.experts_per_token;
  const int64_t per_expert =
      std::max<int64_t>(1, num_tokens * k / spec_.num_experts);
  predict_ = ring_ != nullptr &&
             (options_.mode != PlacementMode::kAuto || any_on_disk_ ||
              policy_->StreamsAny(std::vector<int64_t>(k, per_expert)));
}

absl::Status HybridExperts::Run(int layer,
                                absl::Span<const moe::ExpertTask> tasks,
                                absl::Span<const backend::MlpTask> alongside,
                                backend::Backend& backend) {
  std::vector<backend::MlpTask> now(alongside.begin(), alongside.end());
  std::vector<model::MlpWeights> cached(tasks.size());
  std::vector<const moe::ExpertTask*> outside, prefetched, from_disk;
  std::vector<int64_t> tokens;
  std::vector<bool> coming(spec_.num_experts, false);
  for (const Section& section : prefetched_[layer]) {
    for (int32_t e : section.experts) coming[e] = true;
  }
  for (size_t i = 0; i < tasks.size(); ++i) {
    const moe::ExpertTask& t = tasks[i];
    const model::MlpWeights& stored =
        host_weights_.layers[layer].experts[t.expert];
    if (on_device_[layer][t.expert]) {
      now.push_back(
          {&device_weights_->layers[layer].experts[t.expert], t.x, t.out});
    } else if (const uint8_t* in_cache =
                   cache_ ? cache_->Lookup(CacheKey(layer, t.expert))
                          : nullptr) {
      cached[i] =
          model::PackedMlpView(stored, in_cache, backend.weight_memory());
      now.push_back({&cached[i], t.x, t.out});
    } else if (coming[t.expert]) {
      prefetched.push_back(&t);  // already on its way: it streams
    } else if (on_disk_[layer][t.expert]) {
      from_disk.push_back(&t);  // only the ring reaches it
    } else {
      outside.push_back(&t);
      tokens.push_back(t.x.rows);
    }
  }
  stats_->expert_runs_device +=
      tasks.size() - outside.size() - prefetched.size() - from_disk.size();
  stats_->prefetch_hits += prefetched.size();

  std::vector<ExpertPlace> places;
  switch (options_.mode) {
    case PlacementMode::kCpu:
      places.assign(outside.size(), ExpertPlace::kCpu);
      break;
    case PlacementMode::kStream:
    case PlacementMode::kGpu:
      places.assign(outside.size(), ExpertPlace::kStream);
      break;
    case PlacementMode::kAuto:
      places = policy_->Plan(tokens);
      break;
  }
  std::vector<const moe::ExpertTask*> on_cpu, streamed = prefetched;
  streamed.insert(streamed.end(), from_disk.begin(), from_disk.end());
  std::vector<int64_t> cpu_tokens, stream_tokens;
  for (size_t i = 0; i < outside.size(); ++i) {
    if (places[i] == ExpertPlace::kCpu) {
      on_cpu.push_back(outside[i]);
      cpu_tokens.push_back(tokens[i]);
    } else {
      streamed.push_back(outside[i]);
      stream_tokens.push_back(tokens[i]);
    }
  }
  stats_->expert_runs_cpu += on_cpu.size();
  stats_->expert_runs_streamed += streamed.size();
  stats_->prefetch_misses += streamed.size() - prefetched.size();

  // The CPU experts' rows come down first (this waits for the device to
  // produce them); the CPU then runs them while the device runs the rest.
  const int64_t hidden = spec_.hidden_size;
  int64_t cpu_rows = 0;
  for (const moe::ExpertTask* t : on_cpu) cpu_rows += t->x.rows;
  std::vector<float> x_host(cpu_rows * hidden), out_host(cpu_rows * hidden);
  std::vector<model::MlpWeights> host_views(on_cpu.size());
  std::vector<backend::MlpTask> host_tasks;
  int64_t row = 0;
  for (size_t i = 0; i < on_cpu.size(); ++i) {
    const moe::ExpertTask& t = *on_cpu[i];
    backend.CopyToHost(t.x, x_host.data() + row * hidden);
    host_views[i] = model::PackedMlpView(
        host_weights_.layers[layer].experts[t.expert],
        PackedOnHost(layer, t.expert), backend::MemorySpace::kHost);
    host_tasks.push_back({&host_views[i],
                          {x_host.data() + row * hidden, t.x.rows, hidden},
                          {out_host.data() + row * hidden, t.x.rows, hidden}});
    row += t.x.rows;
  }
  double cpu_seconds = 0;
  if (!host_tasks.empty()) {
    cpu_lane_->Start([&] {
      const auto start = std::chrono::steady_clock::now();
      host_->RunMlps(host_tasks);
      cpu_seconds = SecondsSince(start);
    });
  }
  backend.RunMlps(now);
  const auto stream_start = std::chrono::steady_clock::now();
  absl::Status status = RunStreamed(layer, streamed, backend);
  const double stream_seconds = SecondsSince(stream_start);
  if (!host_tasks.empty()) cpu_lane_->Wait();
  row = 0;
  for (const moe::ExpertTask* t : on_cpu) {
    backend.CopyFromHost(out_host.data() + row * hidden, t->out);
    row += t->x.rows;
  }
  if (!status.ok()) {
    failed_ = true;
    return absl::Status(status.code(),
                        absl::StrCat("streaming the experts of layer ", layer,
                                     ": ", status.message()));
  }
  if (options_.mode == PlacementMode::kAuto) {
    policy_->Observe(ExpertPlace::kCpu, cpu_tokens, cpu_seconds);
    // Copies that began during the layer before (predicted experts) hide
    // part of their cost, and reads from disk add one the policy does not
    // choose: such a layer says nothing of what streaming an expert from
    // host memory costs.
    if (prefetched.empty() && from_disk.empty()) {
      policy_->Observe(ExpertPlace::kStream, stream_tokens, stream_seconds);
    }
  }
  return absl::OkStatus();
}

std::vector<memory_ring::CopyPiece> HybridExperts::PiecesFor(
    int layer, absl::Span<const int32_t> experts) const {
  std::vector<memory_ring::CopyPiece> pieces;
  for (size_t i = 0; i < experts.size(); ++i) {
    for (memory_ring::CopyPiece p : pieces_[layer][experts[i]]) {
      p.dst_offset += i * expert_stride_;
      pieces.push_back(p);
    }
  }
  return pieces;
}

void HybridExperts::Predict(int layer, const moe::Routing& predicted) {
  if (layer >= static_cast<int>(prefetched_.size()) ||
      !spec_.layer_is_moe[layer] || !prefetched_[layer].empty()) {
    return;
  }
  std::vector<int64_t> tokens_of(spec_.num_experts, 0);
  for (int32_t e : predicted.experts) ++tokens_of[e];
  std::vector<int32_t> candidates;
  std::vector<int64_t> tokens;
  for (int e = 0; e < spec_.num_experts; ++e) {
    if (tokens_of[e] == 0 || on_device_[layer][e] ||
        (cache_ && cache_->Contains(CacheKey(layer, e)))) {
      continue;
    }
    candidates.push_back(e);
    tokens.push_back(tokens_of[e]);
  }
  // Those the policy would stream, the busiest first; at most K-1
  // sections, so this layer's own misses always find a slot.
  const std::vector<ExpertPlace> places =
      options_.mode == PlacementMode::kAuto
          ? policy_->Plan(tokens)
          : std::vector<ExpertPlace>(tokens.size(), ExpertPlace::kStream);
  std::vector<int32_t> ahead;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (places[i] == ExpertPlace::kStream || on_disk_[layer][candidates[i]]) {
      ahead.push_back(candidates[i]);
    }
  }
  std::stable_sort(ahead.begin(), ahead.end(), [&](int32_t a, int32_t b) {
    return tokens_of[a] > tokens_of[b];
  });
  ahead.resize(
      std::min(ahead.size(), (ring_->num_slots() - 1) * section_experts_));
  for (size_t first = 0; first < ahead.size(); first += section_experts_) {
    const absl::Span<const int32_t> group =
        absl::MakeConstSpan(ahead).subspan(first, section_experts_);
    prefetched_[layer].push_back(
        {ring_->Enqueue(PiecesFor(layer, group)),
         std::vector<int32_t>(group.begin(), group.end())});
  }
}

void HybridExperts::RunSlot(int layer, const uint8_t* slot,
                            absl::Span<const int32_t> experts,
                            absl::Span<const moe::ExpertTask* const> task_of,
                            backend::Backend& backend) {
  std::vector<model::MlpWeights> views(experts.size());
  std::vector<backend::MlpTask> mlps;
  for (size_t i = 0; i < experts.size(); ++i) {
    const moe::ExpertTask* t = task_of[experts[i]];
    if (t == nullptr) continue;
    views[i] = model::PackedMlpView(
        host_weights_.layers[layer].experts[t->expert],
        slot + i * expert_stride_, backend.weight_memory());
    mlps.push_back({&views[i], t->x, t->out});
  }
  backend.RunMlps(mlps);
  if (!cache_) return;
  // A failed copy into the cache only costs a later transfer.
  for (size_t i = 0; i < experts.size(); ++i) {
    if (task_of[experts[i]] == nullptr) continue;
    cache_
        ->Offer(CacheKey(layer, experts[i]), slot + i * expert_stride_,
                expert_stride_)
        .IgnoreError();
  }
}

absl::Status HybridExperts::RunStreamed(
    int layer, absl::Span<const moe::ExpertTask* const> tasks,
    backend::Backend& backend) {
  std::vector<const moe::ExpertTask*> task_of(spec_.num_experts, nullptr);
  for (const moe::ExpertTask* t : tasks) task_of[t->expert] = t;
  // The sections predicted for this layer, in ticket order; those it did
  // not need are dropped (not loaded if they had not started).
  std::vector<Section> sections = std::move(prefetched_[layer]);
  prefetched_[layer].clear();
  std::vector<bool> done(spec_.num_experts, false);
  for (const Section& section : sections) {
    if (std::none_of(section.experts.begin(), section.experts.end(),
                     [&](int32_t e) { return task_of[e] != nullptr; })) {
      ring_->Release(section.ticket);
      continue;
    }
    // On failure EndStep drops the sections still held.
    ASSIGN_OR_RETURN(uint8_t * slot, ring_->Acquire(section.ticket));
    RunSlot(layer, slot, section.experts, task_of, backend);
    for (int32_t e : section.experts) done[e] = true;
    ring_->Release(section.ticket);
  }
  // The rest take turns in one slot: its ticket follows at most K-1
  // predicted sections of the next layer, so the section that last used
  // its slot is one already released.
  std::vector<int32_t> missed;
  for (const moe::ExpertTask* t : tasks) {
    if (!done[t->expert]) missed.push_back(t->expert);
  }
  memory_ring::SectionRing::Ticket ticket = -1;
  absl::Status status;
  for (size_t first = 0; first < missed.size(); first += section_experts_) {
    const absl::Span<const int32_t> group =
        absl::MakeConstSpan(missed).subspan(first, section_experts_);
    absl::StatusOr<uint8_t*> slot;
    if (ticket < 0) {
      ticket = ring_->Enqueue(PiecesFor(layer, group));
      slot = ring_->Acquire(ticket);
    } else {
      slot = ring_->Refill(ticket, PiecesFor(layer, group));
    }
    if (!slot.ok()) {
      status = slot.status();
      break;
    }
    RunSlot(layer, *slot, group, task_of, backend);
  }
  if (ticket >= 0) ring_->Release(ticket);
  return status;
}

void HybridExperts::EndStep() {
  // Sections scheduled but never used (a failed step, a prediction for a
  // layer that did not run): drop them all.
  bool outstanding = failed_;
  for (const std::vector<Section>& layer : prefetched_) {
    outstanding |= !layer.empty();
  }
  if (outstanding && ring_) ring_->Reset();
  for (std::vector<Section>& layer : prefetched_) layer.clear();
  failed_ = false;
}

}  // namespace ringmoe::runtime

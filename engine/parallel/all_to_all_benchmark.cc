// all_to_all_benchmark: expert parallelism's communication per MoE layer,
// through the real executors and the job's communicator, with expert work
// that only copies (so what is timed is the exchange and its packing).
//
//   - Data-parallel attention (TokenDispatchExecutor): each rank's own
//     decode tokens go to their experts' ranks and come back: an AllGather
//     of every rank's rows per expert, an AllToAllV of input rows (hidden
//     floats each, ordered by expert), an AllToAllV of output rows. Flat
//     (MpiCommunicator) and, with --ranks_per_node K, hierarchical
//     (HierarchicalCommunicator over it, ranks grouped K to a pretend node;
//     the collectives it makes of its base are counted too).
//   - Replicated attention (ExpertParallelExecutor): every rank has the
//     same tokens and one AllGatherV gives every rank every output row
//     (hierarchical forwards AllGatherV to its base, so only flat is run).
//
// Routing is synthetic: each token picks top-k distinct experts uniformly
// at random (seeded; per rank under data-parallel attention, the same on
// every rank under replicated attention), the experts placed contiguously
// (ExpertPlacement::Contiguous); a new routing every repetition, identical
// for the flat and hierarchical runs of one configuration. Rows are
// float32, as they travel today.
//
// Per configuration: warm-up, then repetitions, each started after a
// Barrier; a repetition's time is the slowest rank's. Reported: median and
// p90 of the layer's exchange (TokenDispatchExecutor::Run or
// ExpertParallelExecutor::Run, packing included) and of each collective;
// bytes this rank sends to other ranks per token beside the minimum;
// messages (non-empty blocks to other ranks) per layer per rank; the
// between-node messages per ordered node pair. Ceilings measured in the
// same run on the flat communicator: a large AllToAllV's bandwidth, the
// latency of a Barrier and of an AllToAll of 8 bytes per peer (and, with
// --ranks_per_node, of a hierarchical AllToAllV of 8 bytes per peer).
//
// Rank 0 writes one JSON object to --json_out and a table on stderr.
//
//   mpirun -np 4 all_to_all_benchmark --json_out=a2a.json --ranks_per_node 2
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "engine/backend/cpu_backend.h"
#include "engine/moe/expert_executor.h"
#include "engine/moe/expert_parallel.h"
#include "engine/moe/expert_placement.h"
#include "engine/moe/token_dispatch.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/hierarchical_communicator.h"
#include "engine/parallel/metered_communicator.h"
#include "engine/parallel/mpi_communicator.h"
#include "engine/parallel/node_grouping.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, json_out, "", "Where rank 0 writes the JSON.");
ABSL_FLAG(int, ranks_per_node, 0,
          "Group the ranks K to a pretend node and run the hierarchical "
          "all-to-all beside the flat one; 0: flat only.");
ABSL_FLAG(std::string, tokens, "1,4,16,64,256",
          "Tokens per rank (data-parallel attention) or per batch "
          "(replicated attention).");
ABSL_FLAG(std::string, shapes, "mixtral,deepseek-v3",
          "Model shapes: mixtral (hidden 4096, 8 experts, top-2), "
          "deepseek-v3 (hidden 7168, 256 experts, top-8), synthetic-mixtral "
          "(hidden 2048, 8 experts, top-2).");
ABSL_FLAG(std::string, attention, "data_parallel,replicated",
          "Which exchanges: data_parallel (TokenDispatchExecutor), "
          "replicated (ExpertParallelExecutor).");
ABSL_FLAG(int, warmup, 10, "Warm-up repetitions per configuration.");
ABSL_FLAG(int, reps, 200, "Most timed repetitions per configuration.");
ABSL_FLAG(int, min_reps, 10, "Fewest timed repetitions per configuration.");
ABSL_FLAG(double, seconds_per_config, 3,
          "Timed repetitions per configuration are cut to fit about this "
          "long (judged from the warm-up), down to --min_reps.");
ABSL_FLAG(int, ceiling_mib, 64,
          "Bandwidth ceiling: MiB each rank sends in one AllToAllV.");
ABSL_FLAG(int, ceiling_reps, 10, "Timed repetitions of the bandwidth probe.");
ABSL_FLAG(int, latency_reps, 200,
          "Timed repetitions of each empty-collective probe.");
ABSL_FLAG(uint64_t, seed, 1, "Routing seed.");
ABSL_FLAG(int, timeout_s, 120, "Communicator timeout per collective.");

namespace ringmoe {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
using parallel::Communicator;

constexpr int kElementBytes = sizeof(float);

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The p-quantile (nearest rank) of `v`; 0 when empty.
double Quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::ceil(p * v.size()));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

json Summary(const std::vector<double>& seconds) {
  return {{"median_us", Quantile(seconds, 0.5) * 1e6},
          {"p90_us", Quantile(seconds, 0.9) * 1e6}};
}

struct Shape {
  std::string name;
  int64_t hidden;
  int experts;
  int top_k;
};

absl::StatusOr<Shape> ShapeNamed(const std::string& name) {
  if (name == "mixtral") return Shape{name, 4096, 8, 2};
  if (name == "deepseek-v3") return Shape{name, 7168, 256, 8};
  // tools/make_synthetic_moe.py's model, whose decode time
  // docs/PERFORMANCE.md measures (the modelled scaling uses both).
  if (name == "synthetic-mixtral") return Shape{name, 2048, 8, 2};
  return absl::InvalidArgumentError(
      absl::StrCat("--shapes: unknown shape \"", name,
                   "\" (mixtral, deepseek-v3 or synthetic-mixtral)"));
}

absl::StatusOr<std::vector<int>> ParseInts(const std::string& flag,
                                           const std::string& text) {
  std::vector<int> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", flag, ": \"", part, "\" is not a positive integer"));
    }
    values.push_back(v);
  }
  if (values.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  }
  return values;
}

// A Communicator that forwards to `base` and records, for each call since
// Reset(), its wall time and the bytes it hands for each rank (the logical
// blocks: an AllGather(V)'s block counts once per other rank, whatever
// algorithm the base uses).
class RecordingCommunicator : public Communicator {
 public:
  struct Call {
    std::string collective;
    double seconds = 0;
    std::vector<uint64_t> bytes_to;  // [rank]; this rank's own block too
  };

  explicit RecordingCommunicator(Communicator* base) : base_(*base) {}

  int rank() const override { return base_.rank(); }
  int size() const override { return base_.size(); }
  absl::Duration timeout() const override { return base_.timeout(); }

  absl::Status AllToAll(absl::Span<const uint8_t> send,
                        absl::Span<uint8_t> recv) override {
    std::vector<uint64_t> to(size(), send.size() / size());
    return Record("AllToAll", std::move(to),
                  [&] { return base_.AllToAll(send, recv); });
  }
  absl::Status AllToAllV(absl::Span<const uint8_t> send,
                         absl::Span<const uint64_t> send_counts,
                         absl::Span<uint8_t> recv,
                         absl::Span<const uint64_t> recv_counts) override {
    std::vector<uint64_t> to(send_counts.begin(), send_counts.end());
    return Record("AllToAllV", std::move(to), [&] {
      return base_.AllToAllV(send, send_counts, recv, recv_counts);
    });
  }
  // Forwarded as such, so that the hierarchical communicator skips its
  // gather of counts as it does in the engine.
  absl::Status AllToAllVWithMatrix(
      absl::Span<const uint8_t> send, absl::Span<uint8_t> recv,
      const parallel::CountMatrix& counts) override {
    return Record(
        "AllToAllVWithMatrix", counts.SendCounts(size(), rank()),
        [&] { return base_.AllToAllVWithMatrix(send, recv, counts); });
  }
  absl::Status Broadcast(int root, absl::Span<uint8_t> buffer) override {
    std::vector<uint64_t> to(size(), root == rank() ? buffer.size() : 0);
    return Record("Broadcast", std::move(to),
                  [&] { return base_.Broadcast(root, buffer); });
  }
  absl::Status AllGather(absl::Span<const uint8_t> send,
                         absl::Span<uint8_t> recv) override {
    std::vector<uint64_t> to(size(), send.size());
    return Record("AllGather", std::move(to),
                  [&] { return base_.AllGather(send, recv); });
  }
  absl::Status AllGatherV(absl::Span<const uint8_t> send,
                          absl::Span<uint8_t> recv,
                          absl::Span<const uint64_t> recv_counts) override {
    std::vector<uint64_t> to(size(), send.size());
    return Record("AllGatherV", std::move(to),
                  [&] { return base_.AllGatherV(send, recv, recv_counts); });
  }
  absl::Status Barrier() override {
    return Record("Barrier", std::vector<uint64_t>(size(), 0),
                  [&] { return base_.Barrier(); });
  }
  [[noreturn]] void Abort(const absl::Status& status) override {
    base_.Abort(status);
    std::abort();  // Communicator::Abort never returns.
  }

  const std::vector<Call>& calls() const { return calls_; }
  void Reset() { calls_.clear(); }

 private:
  template <typename Fn>
  absl::Status Record(const char* collective, std::vector<uint64_t> bytes_to,
                      Fn&& fn) {
    const Clock::time_point start = Clock::now();
    absl::Status status = fn();
    calls_.push_back({collective, SecondsSince(start), std::move(bytes_to)});
    return status;
  }

  Communicator& base_;
  std::vector<Call> calls_;
};

// The experts' work done by copying: out = x, so only the exchange costs.
class CopyingExperts : public moe::ExpertExecutor {
 public:
  void BeginStep(int64_t) override {}
  bool WantsPredictions() const override { return false; }
  void Predict(int, const moe::Routing&) override {}
  absl::Status Run(int, absl::Span<const moe::ExpertTask> tasks,
                   absl::Span<const backend::MlpTask>,
                   backend::Backend&) override {
    for (const moe::ExpertTask& t : tasks) {
      std::memcpy(t.out.data, t.x.data, t.x.size() * sizeof(float));
    }
    return absl::OkStatus();
  }
  void EndStep() override {}
};

// `tokens` tokens' top-k picks of distinct experts, uniformly at random.
std::vector<int32_t> DrawPicks(const Shape& shape, int tokens,
                               std::mt19937_64& rng) {
  std::vector<int32_t> experts(shape.experts);
  std::vector<int32_t> picks;
  picks.reserve(static_cast<size_t>(tokens) * shape.top_k);
  for (int t = 0; t < tokens; ++t) {
    std::iota(experts.begin(), experts.end(), 0);
    for (int j = 0; j < shape.top_k; ++j) {
      std::uniform_int_distribution<int> pick(j, shape.experts - 1);
      std::swap(experts[j], experts[pick(rng)]);
      picks.push_back(experts[j]);
    }
  }
  return picks;
}

// The MoE block's tasks for `picks`: one per picked expert, its rows
// consecutive in `x` and `out` (each picks.size() rows of hidden floats).
std::vector<moe::ExpertTask> TasksFor(const std::vector<int32_t>& picks,
                                      int num_experts, const backend::Tensor& x,
                                      const backend::Tensor& out) {
  std::vector<int64_t> rows(num_experts, 0);
  for (int32_t e : picks) ++rows[e];
  std::vector<moe::ExpertTask> tasks;
  int64_t first = 0;
  for (int e = 0; e < num_experts; ++e) {
    if (rows[e] == 0) continue;
    tasks.push_back({e, x.Rows(first, rows[e]), out.Rows(first, rows[e])});
    first += rows[e];
  }
  return tasks;
}

// Each rank's `values` gathered on every rank, rank after rank.
absl::StatusOr<std::vector<double>> GatherAll(Communicator& comm,
                                              const std::vector<double>& values,
                                              const char* what) {
  std::vector<double> all(values.size() * comm.size());
  if (absl::Status s = comm.AllGather(parallel::AsBytes(values),
                                      parallel::AsWritableBytes(all));
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("gathering ", what, ": ", s.message()));
  }
  return all;
}

// Per repetition, the slowest rank's value: `all` holds each rank's `reps`
// values, rank after rank.
std::vector<double> SlowestRank(const std::vector<double>& all, int ranks,
                                int reps) {
  std::vector<double> slowest(reps, 0);
  for (int r = 0; r < ranks; ++r) {
    for (int i = 0; i < reps; ++i) {
      slowest[i] = std::max(slowest[i], all[r * reps + i]);
    }
  }
  return slowest;
}

// Times `fn` (one collective on every rank) `reps` times after `warmup`,
// each after a Barrier; returns the slowest rank's seconds per repetition.
template <typename Fn>
absl::StatusOr<std::vector<double>> TimeCollective(Communicator& comm,
                                                   int warmup, int reps,
                                                   const char* what, Fn&& fn) {
  std::vector<double> seconds;
  for (int i = 0; i < warmup + reps; ++i) {
    if (absl::Status s = comm.Barrier(); !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat(what, ": Barrier before: ", s.message()));
    }
    const Clock::time_point start = Clock::now();
    if (absl::Status s = fn(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
    }
    if (i >= warmup) seconds.push_back(SecondsSince(start));
  }
  ASSIGN_OR_RETURN(std::vector<double> all, GatherAll(comm, seconds, what));
  return SlowestRank(all, comm.size(), reps);
}

struct Job {
  Communicator* flat = nullptr;
  // With --ranks_per_node: the pretend nodes, and the hierarchical
  // communicator over `flat`, through a meter that counts the collectives
  // it makes.
  std::unique_ptr<parallel::NodeGrouping> nodes;
  std::unique_ptr<parallel::MeteredCommunicator> hierarchical_base;
  std::unique_ptr<parallel::HierarchicalCommunicator> hierarchical;
};

// The loopback ceilings, on the flat communicator (and the hierarchical
// one's latency floor).
absl::StatusOr<json> MeasureCeilings(Job& job) {
  Communicator& comm = *job.flat;
  const int n = comm.size();
  const int latency_reps = absl::GetFlag(FLAGS_latency_reps);
  json out;

  ASSIGN_OR_RETURN(std::vector<double> barrier,
                   TimeCollective(comm, 10, latency_reps, "Barrier probe",
                                  [&] { return comm.Barrier(); }));
  out["barrier"] = Summary(barrier);

  std::vector<uint64_t> tiny_send(n, 1), tiny_recv(n, 0);
  ASSIGN_OR_RETURN(
      std::vector<double> tiny,
      TimeCollective(comm, 10, latency_reps, "8-byte AllToAll probe", [&] {
        return comm.AllToAll(parallel::AsBytes(tiny_send),
                             parallel::AsWritableBytes(tiny_recv));
      }));
  out["alltoall_8_bytes_per_peer"] = Summary(tiny);

  if (job.hierarchical != nullptr) {
    std::vector<uint64_t> counts(n, sizeof(uint64_t));
    ASSIGN_OR_RETURN(std::vector<double> hier,
                     TimeCollective(comm, 10, latency_reps,
                                    "hierarchical 8-byte AllToAllV probe", [&] {
                                      return job.hierarchical->AllToAllV(
                                          parallel::AsBytes(tiny_send), counts,
                                          parallel::AsWritableBytes(tiny_recv),
                                          counts);
                                    }));
    out["hierarchical_alltoallv_8_bytes_per_peer"] = Summary(hier);
  }

  // Each rank sends --ceiling_mib MiB in n equal blocks (its own block a
  // local copy); bandwidth counts the blocks to other ranks.
  const uint64_t block =
      (static_cast<uint64_t>(absl::GetFlag(FLAGS_ceiling_mib)) << 20) / n;
  std::vector<uint8_t> big_send(block * n, 1), big_recv(block * n);
  std::vector<uint64_t> big_counts(n, block);
  ASSIGN_OR_RETURN(std::vector<double> big,
                   TimeCollective(comm, 2, absl::GetFlag(FLAGS_ceiling_reps),
                                  "large AllToAllV probe", [&] {
                                    return comm.AllToAllV(
                                        big_send, big_counts,
                                        absl::MakeSpan(big_recv), big_counts);
                                  }));
  const double remote_bytes = static_cast<double>(block) * (n - 1);
  const double median = Quantile(big, 0.5);
  out["alltoallv_large"] = Summary(big);
  out["alltoallv_large"]["bytes_per_rank"] = block * n;
  out["alltoallv_large"]["remote_bytes_per_rank"] = remote_bytes;
  out["alltoallv_large"]["send_bandwidth_per_rank_GBps"] =
      median > 0 ? remote_bytes / median / 1e9 : 0;
  out["alltoallv_large"]["aggregate_bandwidth_GBps"] =
      median > 0 ? remote_bytes * n / median / 1e9 : 0;
  return out;
}

// What one configuration runs.
struct Config {
  Shape shape;
  int tokens = 0;
  bool replicated = false;    // ExpertParallelExecutor, else TokenDispatch
  bool hierarchical = false;  // through job.hierarchical
};

// Sums over this rank's timed repetitions (all gathered at the end).
enum Sum {
  kPicks,
  kRemotePicks,
  kOwnRows,  // replicated: rows this rank's experts computed
  kBytes0,   // remote bytes handed to collective 0, 1, 2
  kBytes1,
  kBytes2,
  kMessages0,  // non-empty blocks to other ranks, collective 0, 1, 2
  kMessages1,
  kMessages2,
  kBetweenNodes0,  // of those, to ranks on other nodes
  kBetweenNodes1,
  kBetweenNodes2,
  kHierIntraMessages,
  kHierIntraBytes,
  kHierBetweenMessages,
  kHierBetweenBytes,
  kHierBaseCollectives,  // the hierarchical communicator's, of its base
  kNumSums
};

constexpr int kMaxCollectives = 3;

absl::StatusOr<json> RunConfig(Job& job, const Config& config,
                               size_t config_index) {
  Communicator& flat = *job.flat;
  const int n = flat.size(), rank = flat.rank();
  const Shape& shape = config.shape;
  const int64_t hidden = shape.hidden;
  const int64_t rows = static_cast<int64_t>(config.tokens) * shape.top_k;
  const moe::ExpertPlacement placement =
      moe::ExpertPlacement::Contiguous(shape.experts, n);

  Communicator* used = config.hierarchical ? job.hierarchical.get() : job.flat;
  RecordingCommunicator recorder(used);
  CopyingExperts copying;
  // Before the executor, which keeps buffers in its memory.
  backend::CpuBackend backend(nullptr);
  std::unique_ptr<moe::ExpertExecutor> executor;
  if (config.replicated) {
    executor = std::make_unique<moe::ExpertParallelExecutor>(
        &recorder, &recorder, placement, &copying);
  } else {
    executor = std::make_unique<moe::TokenDispatchExecutor>(
        &recorder, &recorder, placement, &copying, hidden);
  }

  std::vector<float> x(rows * hidden), out(rows * hidden);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 977);
  const backend::Tensor x_tensor{x.data(), rows, hidden};
  const backend::Tensor out_tensor{out.data(), rows, hidden};

  const int warmup = absl::GetFlag(FLAGS_warmup);
  int reps = absl::GetFlag(FLAGS_reps);
  std::vector<double> sums(kNumSums, 0);
  std::vector<double> layer_seconds;
  std::vector<std::vector<double>> collective_seconds(kMaxCollectives);
  std::vector<std::string> collective_names;
  parallel::HierarchicalTraffic traffic_before;
  uint64_t base_collectives_before = 0;

  // One repetition's routing: the same on every rank under replicated
  // attention, each rank's own otherwise; the same for flat and
  // hierarchical runs.
  auto routing_seed = [&](int rep) {
    return absl::GetFlag(FLAGS_seed) * 1000003u + config_index * 7919u +
           static_cast<uint64_t>(rep) * 104729u +
           (config.replicated ? 0u : static_cast<uint64_t>(rank) + 1);
  };

  for (int rep = 0; rep < warmup + reps; ++rep) {
    if (rep == warmup) {
      // Repetitions to fit --seconds_per_config, judged by rank 0 from the
      // warm-up and broadcast so every rank runs as many.
      const double budget = absl::GetFlag(FLAGS_seconds_per_config);
      const double per_rep = warmup > 0 ? Quantile(layer_seconds, 0.5) : 0;
      int64_t fit = per_rep > 0 ? static_cast<int64_t>(budget / per_rep)
                                : static_cast<int64_t>(reps);
      fit = std::clamp<int64_t>(fit, absl::GetFlag(FLAGS_min_reps), reps);
      if (absl::Status s = flat.Broadcast(
              0, parallel::AsWritableBytes(absl::MakeSpan(&fit, 1)));
          !s.ok()) {
        return absl::Status(
            s.code(), absl::StrCat("broadcasting repetitions: ", s.message()));
      }
      reps = static_cast<int>(fit);
      layer_seconds.clear();
      for (auto& c : collective_seconds) c.clear();
      if (job.hierarchical != nullptr) {
        traffic_before = job.hierarchical->traffic();
        base_collectives_before = job.hierarchical_base->traffic().collectives;
      }
    }
    const bool timed = rep >= warmup;
    const int stored_rep = timed ? rep - warmup : rep;
    std::mt19937_64 rng(routing_seed(stored_rep));
    const std::vector<int32_t> picks = DrawPicks(shape, config.tokens, rng);
    const std::vector<moe::ExpertTask> tasks =
        TasksFor(picks, shape.experts, x_tensor, out_tensor);

    if (absl::Status s = flat.Barrier(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("Barrier before repetition ",
                                                 rep, ": ", s.message()));
    }
    recorder.Reset();
    const Clock::time_point start = Clock::now();
    executor->BeginStep(config.tokens);
    absl::Status status = executor->Run(/*layer=*/0, tasks, {}, backend);
    executor->EndStep();
    const double seconds = SecondsSince(start);
    if (!status.ok()) return status;
    layer_seconds.push_back(seconds);

    const std::vector<RecordingCommunicator::Call>& calls = recorder.calls();
    if (static_cast<int>(calls.size()) > kMaxCollectives) {
      return absl::InternalError(
          absl::StrCat("the executor made ", calls.size(),
                       " collectives; at most ", kMaxCollectives, " expected"));
    }
    if (collective_names.empty()) {
      for (const auto& c : calls) collective_names.push_back(c.collective);
    }
    for (size_t c = 0; c < calls.size(); ++c) {
      collective_seconds[c].push_back(calls[c].seconds);
    }
    if (!timed) continue;

    for (int32_t e : picks) {
      sums[kPicks] += 1;
      if (placement.owner(e) != rank) sums[kRemotePicks] += 1;
      if (config.replicated && placement.owner(e) == rank) sums[kOwnRows] += 1;
    }
    for (size_t c = 0; c < calls.size(); ++c) {
      for (int p = 0; p < n; ++p) {
        const uint64_t b = calls[c].bytes_to[p];
        if (p == rank || b == 0) continue;
        sums[kBytes0 + c] += b;
        sums[kMessages0 + c] += 1;
        if (job.nodes != nullptr &&
            job.nodes->node_of(p) != job.nodes->node_of(rank)) {
          sums[kBetweenNodes0 + c] += 1;
        }
      }
    }
  }
  if (job.hierarchical != nullptr && config.hierarchical) {
    const parallel::HierarchicalTraffic& t = job.hierarchical->traffic();
    sums[kHierIntraMessages] =
        t.intra_node.messages - traffic_before.intra_node.messages;
    sums[kHierIntraBytes] =
        t.intra_node.bytes - traffic_before.intra_node.bytes;
    sums[kHierBetweenMessages] =
        t.between_nodes.messages - traffic_before.between_nodes.messages;
    sums[kHierBetweenBytes] =
        t.between_nodes.bytes - traffic_before.between_nodes.bytes;
    sums[kHierBaseCollectives] =
        job.hierarchical_base->traffic().collectives - base_collectives_before;
  }

  // Every rank's figures, gathered.
  ASSIGN_OR_RETURN(std::vector<double> all_sums,
                   GatherAll(flat, sums, "the traffic sums"));
  std::vector<double> total(kNumSums, 0);
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < kNumSums; ++k) total[k] += all_sums[r * kNumSums + k];
  }
  ASSIGN_OR_RETURN(std::vector<double> all_layer,
                   GatherAll(flat, layer_seconds, "the layer times"));
  const std::vector<double> layer = SlowestRank(all_layer, n, reps);
  const int num_collectives = static_cast<int>(collective_names.size());
  std::vector<std::vector<double>> per_collective;
  std::vector<double> collectives_sum(reps, 0);
  for (int c = 0; c < num_collectives; ++c) {
    // Every rank made the same collectives (the executors' contract).
    ASSIGN_OR_RETURN(
        std::vector<double> all_c,
        GatherAll(flat, collective_seconds[c], "the collective times"));
    per_collective.push_back(SlowestRank(all_c, n, reps));
  }
  // The three together, per rank and repetition, then the slowest rank.
  {
    std::vector<double> sum_mine(reps, 0);
    for (int c = 0; c < num_collectives; ++c) {
      for (int i = 0; i < reps; ++i) sum_mine[i] += collective_seconds[c][i];
    }
    ASSIGN_OR_RETURN(std::vector<double> all_sum,
                     GatherAll(flat, sum_mine, "the collectives' sums"));
    collectives_sum = SlowestRank(all_sum, n, reps);
  }

  // Per rank per layer (means over ranks and repetitions), per token.
  const double rank_reps = static_cast<double>(n) * reps;
  const double tokens_total = rank_reps * config.tokens;
  const double remote_fraction =
      total[kPicks] > 0 ? total[kRemotePicks] / total[kPicks] : 0;
  const double naive =
      static_cast<double>(hidden) * shape.top_k * kElementBytes;  // per token
  json j;
  j["shape"] = shape.name;
  j["hidden"] = hidden;
  j["experts"] = shape.experts;
  j["top_k"] = shape.top_k;
  j["attention"] = config.replicated ? "replicated" : "data_parallel";
  j["executor"] =
      config.replicated ? "ExpertParallelExecutor" : "TokenDispatchExecutor";
  j["all_to_all"] = config.hierarchical ? "hierarchical" : "flat";
  j[config.replicated ? "tokens_per_batch" : "tokens_per_rank"] = config.tokens;
  j["warmup"] = warmup;
  j["repetitions"] = reps;

  json latency;
  latency["layer_exchange"] = Summary(layer);
  latency["collectives_sum"] = Summary(collectives_sum);
  static constexpr const char* kDispatchNames[] = {
      "row counts AllGather", "input rows AllToAllV", "output rows AllToAllV"};
  json per = json::array();
  for (int c = 0; c < num_collectives; ++c) {
    json one = Summary(per_collective[c]);
    one["collective"] = collective_names[c];
    one["what"] =
        config.replicated ? "output rows AllGatherV" : kDispatchNames[c];
    per.push_back(one);
  }
  latency["collectives"] = per;
  j["latency"] = latency;

  double logical_bytes = 0, logical_messages = 0, logical_between = 0;
  json bytes_by = json::object(), messages_by = json::object();
  for (int c = 0; c < num_collectives; ++c) {
    const std::string what =
        config.replicated ? "output rows AllGatherV" : kDispatchNames[c];
    bytes_by[what] = total[kBytes0 + c] / tokens_total;
    messages_by[what] = total[kMessages0 + c] / rank_reps;
    logical_bytes += total[kBytes0 + c];
    logical_messages += total[kMessages0 + c];
    logical_between += total[kBetweenNodes0 + c];
  }

  json bytes;
  bytes["element_bytes"] = kElementBytes;
  bytes["naive_minimum"] = naive;
  bytes["remote_fraction"] = remote_fraction;
  bytes["remote_minimum"] = naive * remote_fraction;
  if (config.replicated) {
    // Each rank's own experts' rows, to each of the n - 1 others.
    const double own_rows_per_rank = total[kOwnRows] / rank_reps;
    bytes["replicated_minimum"] =
        own_rows_per_rank * hidden * kElementBytes * (n - 1) / config.tokens;
  } else {
    bytes["round_trip_remote_minimum"] = 2 * naive * remote_fraction;
  }
  bytes["flat_by_collective"] = bytes_by;
  bytes["flat_measured"] = logical_bytes / tokens_total;
  if (config.hierarchical) {
    // Phases 1-3 (through the leaders) and the row-count matrix's AllGather
    // (forwarded flat; logical blocks), the only count exchange.
    bytes["hierarchical_measured"] =
        (total[kHierIntraBytes] + total[kHierBetweenBytes] + total[kBytes0]) /
        tokens_total;
    bytes["hierarchical_between_nodes"] =
        total[kHierBetweenBytes] / tokens_total;
  }
  const double measured = config.hierarchical
                              ? bytes["hierarchical_measured"].get<double>()
                              : bytes["flat_measured"].get<double>();
  bytes["measured"] = measured;
  if (!config.replicated && remote_fraction > 0) {
    bytes["measured_over_round_trip_minimum"] =
        measured / (2 * naive * remote_fraction);
  }
  j["bytes_per_token_per_rank"] = bytes;

  json messages;
  messages_by["total"] = logical_messages / rank_reps;
  messages["flat"] = messages_by;
  if (config.hierarchical) {
    json h;
    h["row counts AllGather (flat, logical)"] = total[kMessages0] / rank_reps;
    h["intra_node (phases 1, 3)"] = total[kHierIntraMessages] / rank_reps;
    h["between_nodes (phase 2)"] = total[kHierBetweenMessages] / rank_reps;
    h["total"] = h["row counts AllGather (flat, logical)"].get<double>() +
                 h["intra_node (phases 1, 3)"].get<double>() +
                 h["between_nodes (phase 2)"].get<double>();
    messages["hierarchical"] = h;
    // Collectives the hierarchical communicator made of its base per
    // layer: the forwarded gather and 3 phases per AllToAllV (no count
    // gathers of its own).
    j["hierarchical_base_collectives_per_layer"] =
        total[kHierBaseCollectives] / rank_reps;
  }
  j["messages_per_layer_per_rank"] = messages;

  if (job.nodes != nullptr && job.nodes->num_nodes() > 1) {
    const int m = job.nodes->num_nodes();
    const double pairs = static_cast<double>(m) * (m - 1) * reps;
    json between;
    between["nodes"] = m;
    // Data: the row AllToAllVs (or the AllGather of output rows); control:
    // the AllGather of row counts.
    const double flat_control =
        config.replicated ? 0 : total[kBetweenNodes0] / pairs;
    between["flat_data"] = logical_between / pairs - flat_control;
    between["flat_control"] = flat_control;
    if (config.hierarchical) {
      between["hierarchical_data"] = total[kHierBetweenMessages] / pairs;
      // The gather of row counts is forwarded flat, the only control.
      between["hierarchical_control"] = flat_control;
    }
    j["between_node_messages_per_node_pair_per_layer"] = between;
  }
  return j;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

void PrintTable(const json& result) {
  std::fprintf(stderr,
               "%-11s %-14s %-12s %5s | %9s %9s %9s | %9s %9s %6s | "
               "%6s %6s | %6s %6s\n",
               "shape", "attention", "all-to-all", "tok", "layer p50", "p90",
               "coll p50", "B/tok", "rt min", "ratio", "msg/r", "hier",
               "xn flat", "xn hier");
  for (const json& c : result["configurations"]) {
    const json& b = c["bytes_per_token_per_rank"];
    const json& m = c["messages_per_layer_per_rank"];
    const int tokens = c.contains("tokens_per_rank")
                           ? c["tokens_per_rank"].get<int>()
                           : c["tokens_per_batch"].get<int>();
    const double minimum = b.contains("round_trip_remote_minimum")
                               ? b["round_trip_remote_minimum"].get<double>()
                               : b["replicated_minimum"].get<double>();
    std::string xn_flat = "-", xn_hier = "-";
    if (c.contains("between_node_messages_per_node_pair_per_layer")) {
      const json& x = c["between_node_messages_per_node_pair_per_layer"];
      xn_flat = absl::StrFormat("%.2f", x["flat_data"].get<double>());
      if (x.contains("hierarchical_data")) {
        xn_hier = absl::StrFormat("%.2f", x["hierarchical_data"].get<double>());
      }
    }
    std::fprintf(
        stderr,
        "%-11s %-14s %-12s %5d | %9.1f %9.1f %9.1f | %9.0f %9.0f %6.2f | "
        "%6.2f %6s | %6s %6s\n",
        c["shape"].get<std::string>().c_str(),
        c["attention"].get<std::string>().c_str(),
        c["all_to_all"].get<std::string>().c_str(), tokens,
        c["latency"]["layer_exchange"]["median_us"].get<double>(),
        c["latency"]["layer_exchange"]["p90_us"].get<double>(),
        c["latency"]["collectives_sum"]["median_us"].get<double>(),
        b["measured"].get<double>(), minimum,
        minimum > 0 ? b["measured"].get<double>() / minimum : 0.0,
        m["flat"]["total"].get<double>(),
        m.contains("hierarchical")
            ? absl::StrFormat("%.2f", m["hierarchical"]["total"].get<double>())
                  .c_str()
            : "-",
        xn_flat.c_str(), xn_hier.c_str());
  }
  const json& ceil = result["ceilings"];
  std::fprintf(
      stderr,
      "ceilings: Barrier %.1f us, 8-byte AllToAll %.1f us, large AllToAllV "
      "%.2f GB/s sent per rank (%.1f us for %.0f MiB per rank)\n",
      ceil["barrier"]["median_us"].get<double>(),
      ceil["alltoall_8_bytes_per_peer"]["median_us"].get<double>(),
      ceil["alltoallv_large"]["send_bandwidth_per_rank_GBps"].get<double>(),
      ceil["alltoallv_large"]["median_us"].get<double>(),
      ceil["alltoallv_large"]["bytes_per_rank"].get<double>() / (1 << 20));
}

absl::Status Benchmark(Communicator& flat, const std::string& json_out,
                       const std::vector<int>& tokens,
                       const std::vector<Shape>& shapes, bool data_parallel,
                       bool replicated, int ranks_per_node);

absl::Status Main() {
  const std::string json_out = absl::GetFlag(FLAGS_json_out);
  if (json_out.empty()) {
    return absl::InvalidArgumentError("--json_out is required");
  }
  ASSIGN_OR_RETURN(std::vector<int> tokens,
                   ParseInts("tokens", absl::GetFlag(FLAGS_tokens)));
  std::vector<Shape> shapes;
  for (absl::string_view name :
       absl::StrSplit(absl::GetFlag(FLAGS_shapes), ',', absl::SkipEmpty())) {
    ASSIGN_OR_RETURN(Shape shape, ShapeNamed(std::string(name)));
    shapes.push_back(shape);
  }
  bool data_parallel = false, replicated = false;
  for (absl::string_view a :
       absl::StrSplit(absl::GetFlag(FLAGS_attention), ',', absl::SkipEmpty())) {
    if (a == "data_parallel") {
      data_parallel = true;
    } else if (a == "replicated") {
      replicated = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--attention: unknown \"", a, "\" (data_parallel or replicated)"));
    }
  }
  if (absl::GetFlag(FLAGS_warmup) < 1 || absl::GetFlag(FLAGS_min_reps) < 1 ||
      absl::GetFlag(FLAGS_reps) < absl::GetFlag(FLAGS_min_reps) ||
      absl::GetFlag(FLAGS_ceiling_mib) < 1 ||
      absl::GetFlag(FLAGS_ceiling_reps) < 1 ||
      absl::GetFlag(FLAGS_latency_reps) < 1) {
    return absl::InvalidArgumentError(
        "--warmup, --min_reps, --ceiling_mib, --ceiling_reps and "
        "--latency_reps must be at least 1, and --reps at least --min_reps");
  }
  const int ranks_per_node = absl::GetFlag(FLAGS_ranks_per_node);
  if (ranks_per_node < 0) {
    return absl::InvalidArgumentError("--ranks_per_node must be at least 0");
  }

  absl::StatusOr<std::unique_ptr<Communicator>> started =
      parallel::CreateJobCommunicator(
          absl::Seconds(absl::GetFlag(FLAGS_timeout_s)));
  if (!started.ok()) {
    return absl::Status(started.status().code(),
                        absl::StrCat("starting the job's communicator: ",
                                     started.status().message()));
  }
  std::unique_ptr<Communicator> comm = *std::move(started);
  // From here on a failure may leave peers inside a collective: the job
  // ends with Abort.
  absl::Status status = Benchmark(*comm, json_out, tokens, shapes,
                                  data_parallel, replicated, ranks_per_node);
  if (!status.ok()) comm->Abort(status);
  return status;
}

absl::Status Benchmark(Communicator& flat, const std::string& json_out,
                       const std::vector<int>& tokens,
                       const std::vector<Shape>& shapes, bool data_parallel,
                       bool replicated, int ranks_per_node) {
  Communicator* comm = &flat;
  Job job;
  job.flat = comm;
  if (ranks_per_node > 0) {
    ASSIGN_OR_RETURN(
        parallel::NodeGrouping nodes,
        parallel::NodeGrouping::Consecutive(comm->size(), ranks_per_node));
    job.nodes = std::make_unique<parallel::NodeGrouping>(nodes);
    job.hierarchical_base =
        std::make_unique<parallel::MeteredCommunicator>(comm);
    ASSIGN_OR_RETURN(job.hierarchical,
                     parallel::HierarchicalCommunicator::Create(
                         job.hierarchical_base.get(), nodes));
  }
  const bool run_hierarchical =
      job.nodes != nullptr && parallel::HierarchicalAllToAllPays(*job.nodes);

  json result;
  result["benchmark"] = "all_to_all_benchmark";
  result["date"] =
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  result["cpu"] = CpuModel();
  result["ranks"] = comm->size();
  result["ranks_per_node"] = ranks_per_node;
  if (job.nodes != nullptr) result["nodes"] = job.nodes->ToString();
  result["element_bytes"] = kElementBytes;
  result["timing"] =
      "after a Barrier; per repetition the slowest rank's time; median and "
      "p90 over repetitions";

  absl::StatusOr<json> ceilings = MeasureCeilings(job);
  if (!ceilings.ok()) {
    return absl::Status(ceilings.status().code(),
                        absl::StrCat("measuring the loopback ceilings: ",
                                     ceilings.status().message()));
  }
  result["ceilings"] = *std::move(ceilings);

  std::vector<Config> configs;
  for (const Shape& shape : shapes) {
    for (int t : tokens) {
      if (data_parallel) {
        configs.push_back({shape, t, false, false});
        if (run_hierarchical) configs.push_back({shape, t, false, true});
      }
      if (replicated) configs.push_back({shape, t, true, false});
    }
  }
  json configurations = json::array();
  for (size_t i = 0; i < configs.size(); ++i) {
    const Config& c = configs[i];
    // The flat and hierarchical runs of one configuration share routings.
    const size_t routing_index = i - (c.hierarchical ? 1 : 0);
    absl::StatusOr<json> one = RunConfig(job, c, routing_index);
    if (!one.ok()) {
      return absl::Status(
          one.status().code(),
          absl::StrCat(c.shape.name, ", ", c.tokens, " tokens, ",
                       c.replicated ? "replicated" : "data-parallel",
                       " attention, ", c.hierarchical ? "hierarchical" : "flat",
                       ": ", one.status().message()));
    }
    configurations.push_back(*std::move(one));
  }
  result["configurations"] = configurations;

  if (comm->rank() == 0) {
    std::ofstream out(json_out);
    out << result.dump(2) << "\n";
    out.close();
    if (!out) {
      return absl::InternalError(
          absl::StrCat("writing --json_out ", json_out, " failed"));
    }
    PrintTable(result);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace ringmoe

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  if (absl::Status status = ringmoe::Main(); !status.ok()) {
    std::fprintf(stderr, "all_to_all_benchmark: %s\n",
                 status.ToString().c_str());
    return 1;
  }
  return 0;
}

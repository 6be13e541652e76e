#include "server/ring_metrics.h"

#include <string>
#include <utility>

#include "server/stream_buffers.h"

namespace ringmoe::server {
namespace {

prometheus::MetricFamily Family(std::string name, std::string help,
                                prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

void AddValue(prometheus::MetricFamily* family, double value,
              std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  if (family->type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family->metric.push_back(std::move(metric));
}

prometheus::MetricFamily Counter(std::string name, std::string help,
                                 double value) {
  auto family =
      Family(std::move(name), std::move(help), prometheus::MetricType::Counter);
  AddValue(&family, value);
  return family;
}

}  // namespace

std::vector<prometheus::MetricFamily> RingMetrics::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  auto moved = Family("ringmoe_ring_bytes_moved_total",
                      "Weight bytes the memory ring copied, by tier pair.",
                      prometheus::MetricType::Counter);
  AddValue(&moved, stats_.bytes_disk_to_host.load(),
           {{"tier_pair", "disk_to_host"}});
  AddValue(&moved, stats_.bytes_host_to_device.load(),
           {{"tier_pair", "host_to_device"}});
  AddValue(&moved, stats_.bytes_slot_to_cache.load(),
           {{"tier_pair", "slot_to_cache"}});
  families.push_back(std::move(moved));
  families.push_back(Counter("ringmoe_ring_stall_seconds_total",
                             "Time compute waited for weights to arrive.",
                             stats_.stall_seconds()));
  families.push_back(
      Counter("ringmoe_ring_prefetch_hits_total",
              "Streamed experts that were requested ahead of need.",
              stats_.prefetch_hits.load()));
  families.push_back(Counter("ringmoe_ring_prefetch_misses_total",
                             "Streamed experts loaded only when needed.",
                             stats_.prefetch_misses.load()));
  families.push_back(
      Counter("ringmoe_ring_load_errors_total",
              "Weight loads that failed (read errors, short reads).",
              stats_.load_errors.load()));
  families.push_back(Counter("ringmoe_expert_cache_hits_total",
                             "Streamed experts found in the expert cache.",
                             stats_.cache_hits.load()));
  families.push_back(Counter("ringmoe_expert_cache_misses_total",
                             "Streamed experts not in the expert cache.",
                             stats_.cache_misses.load()));
  families.push_back(Counter("ringmoe_expert_cache_evictions_total",
                             "Experts evicted from the expert cache.",
                             stats_.cache_evictions.load()));
  auto resident = Family("ringmoe_ring_resident_bytes",
                         "Weight bytes kept in the compute tier.",
                         prometheus::MetricType::Gauge);
  AddValue(&resident, stats_.bytes_resident.load());
  families.push_back(std::move(resident));
  auto streamed =
      Family("ringmoe_ring_streamed_bytes",
             "Weight bytes that live in the source tier and stream in.",
             prometheus::MetricType::Gauge);
  AddValue(&streamed, stats_.bytes_streamed.load());
  families.push_back(std::move(streamed));
  auto runs = Family(
      "ringmoe_expert_runs_total",
      "Routed experts a device's hybrid executor ran, by placement: gpu "
      "(from device memory), cpu (where the weights lie), stream (copied "
      "to the device).",
      prometheus::MetricType::Counter);
  AddValue(&runs, stats_.expert_runs_device.load(), {{"placement", "gpu"}});
  AddValue(&runs, stats_.expert_runs_cpu.load(), {{"placement", "cpu"}});
  AddValue(&runs, stats_.expert_runs_streamed.load(),
           {{"placement", "stream"}});
  families.push_back(std::move(runs));
  auto device = Family("ringmoe_device_weight_bytes",
                       "Device memory the weights, ring slots and expert "
                       "cache take (0 on the CPU).",
                       prometheus::MetricType::Gauge);
  AddValue(&device, stats_.bytes_device_weights.load());
  families.push_back(std::move(device));
  return families;
}

std::vector<prometheus::MetricFamily> ExpertTokenMetrics::Collect() const {
  auto family =
      Family("ringmoe_expert_tokens_total", "Tokens routed to each expert.",
             prometheus::MetricType::Counter);
  for (int l = 0; l < usage_.num_layers(); ++l) {
    for (int e = 0; e < usage_.num_experts(); ++e) {
      AddValue(&family, usage_.Tokens(l, e),
               {{"layer", std::to_string(l)}, {"expert", std::to_string(e)}});
    }
  }
  return {std::move(family)};
}

std::vector<prometheus::MetricFamily> StreamBufferMetrics::Collect() const {
  std::vector<prometheus::MetricFamily> families;
  auto buffered = Family(
      "ringmoe_stream_buffered_bytes",
      "Reply bytes waiting for slow gRPC stream readers, over all streams.",
      prometheus::MetricType::Gauge);
  AddValue(&buffered,
           static_cast<double>(StreamBuffers::buffered_bytes().load()));
  families.push_back(std::move(buffered));
  families.push_back(
      Counter("ringmoe_stream_overflows_total",
              "Streams ended with RESOURCE_EXHAUSTED because their client did "
              "not read and the waiting replies passed the limit.",
              static_cast<double>(StreamBuffers::overflows().load())));
  return families;
}

}  // namespace ringmoe::server

namespace ringmoe::server {

std::vector<prometheus::MetricFamily> ExpertParallelMetrics::Collect() const {
  const std::vector<serving::RankStats> ranks = board_.Snapshot();
  if (ranks.empty()) return {};
  struct Series {
    const char* name;
    const char* help;
    prometheus::MetricType type;
    double (*value)(const serving::RankStats&);
  };
  using serving::RankStats;
  constexpr prometheus::MetricType kCounter = prometheus::MetricType::Counter;
  const Series series[] = {
      {"ringmoe_expert_parallel_sent_bytes_total",
       "Bytes the rank's expert exchanges sent to other ranks.", kCounter,
       [](const RankStats& r) { return double(r.bytes_sent); }},
      {"ringmoe_expert_parallel_received_bytes_total",
       "Bytes the rank's expert exchanges received from other ranks.", kCounter,
       [](const RankStats& r) { return double(r.bytes_received); }},
      {"ringmoe_expert_parallel_collectives_total",
       "Collectives the rank's engine called.", kCounter,
       [](const RankStats& r) { return double(r.collectives); }},
      {"ringmoe_expert_parallel_collective_seconds_total",
       "Time the rank's engine spent in collectives, waiting for slower "
       "ranks included.",
       kCounter, [](const RankStats& r) { return r.collective_seconds; }},
      {"ringmoe_expert_parallel_steps_total", "Engine steps the rank ran.",
       kCounter, [](const RankStats& r) { return double(r.steps); }},
      {"ringmoe_expert_parallel_replica_rows_total",
       "Token rows the rank ran for experts whose owner is another rank.",
       kCounter, [](const RankStats& r) { return double(r.replica_rows); }},
      {"ringmoe_expert_parallel_ring_bytes_moved_total",
       "Weight bytes the rank's memory ring copied into its compute tier.",
       kCounter, [](const RankStats& r) { return double(r.ring_bytes_moved); }},
      {"ringmoe_expert_parallel_ring_stall_seconds_total",
       "Time the rank's compute waited for its ring's weights.", kCounter,
       [](const RankStats& r) { return r.ring_stall_seconds; }},
      {"ringmoe_expert_parallel_experts",
       "Expert replicas the rank holds per MoE layer.",
       prometheus::MetricType::Gauge,
       [](const RankStats& r) { return double(r.experts_held); }},
  };
  std::vector<prometheus::MetricFamily> families;
  for (const Series& s : series) {
    prometheus::MetricFamily family = Family(s.name, s.help, s.type);
    for (size_t rank = 0; rank < ranks.size(); ++rank) {
      AddValue(&family, s.value(ranks[rank]), {{"rank", std::to_string(rank)}});
    }
    families.push_back(std::move(family));
  }
  return families;
}

}  // namespace ringmoe::server

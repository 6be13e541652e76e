// Counters kept elsewhere as Prometheus families, read at scrape time
// (nothing to do per step): the memory ring's, the opt-in per-expert token
// counts, the replies waiting for slow stream readers, and every rank's
// expert-parallel counters.
#ifndef RINGMOE_SERVER_RING_METRICS_H_
#define RINGMOE_SERVER_RING_METRICS_H_

#include <vector>

#include "engine/moe/expert_usage.h"
#include "engine/serving/step_broadcast.h"
#include "memory_ring/ring_stats.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace ringmoe::server {

class RingMetrics : public prometheus::Collectable {
 public:
  // `stats` must outlive the collector.
  explicit RingMetrics(const memory_ring::RingStats& stats) : stats_(stats) {}

  // ringmoe_ring_bytes_moved_total{tier_pair},
  // ringmoe_ring_stall_seconds_total,
  // ringmoe_ring_prefetch_{hits,misses}_total, ringmoe_ring_load_errors_total,
  // ringmoe_expert_cache_{hits,misses,evictions}_total,
  // ringmoe_ring_resident_bytes, ringmoe_ring_streamed_bytes.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const memory_ring::RingStats& stats_;
};

// ringmoe_expert_tokens_total{layer, expert}: one series per expert of every
// MoE layer (high cardinality, hence opt-in).
class ExpertTokenMetrics : public prometheus::Collectable {
 public:
  // `usage` must outlive the collector.
  explicit ExpertTokenMetrics(const moe::ExpertUsage& usage) : usage_(usage) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const moe::ExpertUsage& usage_;
};

// ringmoe_stream_buffered_bytes (replies waiting for slow gRPC stream
// readers) and ringmoe_stream_overflows_total (streams ended because their
// client did not read), from StreamBuffers.
class StreamBufferMetrics : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override;
};

// One series per rank of an expert-parallel job (label `rank`), from the
// records rank 0 gathers (at most a heartbeat old, step_broadcast.h):
// ringmoe_expert_parallel_{sent,received}_bytes_total (the payload of the
// engine's collectives to and from other ranks),
// ringmoe_expert_parallel_collectives_total,
// ringmoe_expert_parallel_collective_seconds_total (time inside them,
// waiting for slower ranks included), ringmoe_expert_parallel_steps_total,
// ringmoe_expert_parallel_replica_rows_total (rows run for experts another
// rank owns), ringmoe_expert_parallel_ring_bytes_moved_total and
// ringmoe_expert_parallel_ring_stall_seconds_total (the rank's memory
// ring) and ringmoe_expert_parallel_experts (replicas held per MoE layer).
class ExpertParallelMetrics : public prometheus::Collectable {
 public:
  // `board` must outlive the collector.
  explicit ExpertParallelMetrics(const serving::RankStatsBoard& board)
      : board_(board) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const serving::RankStatsBoard& board_;
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_RING_METRICS_H_

// The memory ring's counters as Prometheus families, read from RingStats at
// scrape time (so they are never stale and cost nothing per step).
#ifndef RINGMOE_SERVER_RING_METRICS_H_
#define RINGMOE_SERVER_RING_METRICS_H_

#include <vector>

#include "memory_ring/ring_stats.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace ringmoe::server {

class RingMetrics : public prometheus::Collectable {
 public:
  // `stats` must outlive the collector.
  explicit RingMetrics(const memory_ring::RingStats& stats) : stats_(stats) {}

  // ringmoe_ring_bytes_moved_total{tier_pair}, ringmoe_ring_stall_seconds_total,
  // ringmoe_ring_prefetch_{hits,misses}_total, ringmoe_ring_load_errors_total,
  // ringmoe_expert_cache_{hits,misses,evictions}_total,
  // ringmoe_ring_resident_bytes, ringmoe_ring_streamed_bytes.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const memory_ring::RingStats& stats_;
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_RING_METRICS_H_

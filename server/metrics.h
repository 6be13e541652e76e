// The server's Prometheus metrics. Names follow DESIGN.md: prefix ringmoe_,
// base units (seconds), counters end in _total. The registry is shared so
// that other parts of the process (the memory ring, later) can register
// their own families next to these; see RegisterCollectable in server_main.
#ifndef RINGMOE_SERVER_METRICS_H_
#define RINGMOE_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/serving/serving_metrics.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace ringmoe::server {

class Metrics final : public serving::ServingMetrics {
 public:
  explicit Metrics(std::shared_ptr<prometheus::Registry> registry);

  const std::shared_ptr<prometheus::Registry>& registry() const {
    return registry_;
  }

  // ringmoe_requests_total{method, status}: one per finished RPC, with the
  // gRPC status it ended with (OK, INVALID_ARGUMENT, CANCELLED, ...).
  void CountRequest(absl::string_view method, absl::StatusCode code) override;

  // Request lifecycle, recorded by the scheduler.
  void ObserveQueueTime(double seconds) override {
    queue_time_.Observe(seconds);
  }
  void ObserveTimeToFirstToken(double seconds) override {
    ttft_.Observe(seconds);
  }
  void ObserveInterTokenLatency(double seconds) override {
    itl_.Observe(seconds);
  }
  void ObserveEndToEndLatency(double seconds) override {
    e2e_.Observe(seconds);
  }
  void AddPromptTokens(int64_t n) override {
    prompt_tokens_.Increment(static_cast<double>(n));
  }
  void AddGeneratedTokens(int64_t n) override {
    generated_tokens_.Increment(static_cast<double>(n));
  }
  void CountPreemption() override { preemptions_.Increment(); }

  // Scheduler state, set after every step.
  void SetQueueDepth(int64_t n) override {
    queue_depth_.Set(static_cast<double>(n));
  }
  void SetRunningSequences(int64_t n) override {
    running_.Set(static_cast<double>(n));
  }
  void SetKvCacheBlocks(int64_t used, int64_t total) override;
  void ObserveStep(int64_t sequences, int64_t tokens, double seconds) override;

  // Histogram bucket boundaries (seconds), exposed for tests and docs.
  static prometheus::Histogram::BucketBoundaries TimeToFirstTokenBuckets();
  static prometheus::Histogram::BucketBoundaries InterTokenBuckets();
  static prometheus::Histogram::BucketBoundaries RequestLatencyBuckets();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Counter& preemptions_;
  prometheus::Gauge& queue_depth_;
  prometheus::Gauge& running_;
  prometheus::Gauge& kv_usage_;
  prometheus::Gauge& kv_used_blocks_;
  prometheus::Gauge& kv_total_blocks_;
  prometheus::Histogram& queue_time_;
  prometheus::Histogram& ttft_;
  prometheus::Histogram& itl_;
  prometheus::Histogram& e2e_;
  prometheus::Histogram& batch_sequences_;
  prometheus::Histogram& batch_tokens_;
  prometheus::Histogram& step_seconds_;
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_METRICS_H_

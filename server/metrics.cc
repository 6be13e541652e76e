#include "server/metrics.h"

#include <string>
#include <utility>

namespace ringmoe::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

prometheus::Counter& Counter(prometheus::Registry& r, const std::string& name,
                             const std::string& help) {
  return BuildCounter().Name(name).Help(help).Register(r).Add({});
}

prometheus::Gauge& Gauge(prometheus::Registry& r, const std::string& name,
                         const std::string& help) {
  return BuildGauge().Name(name).Help(help).Register(r).Add({});
}

prometheus::Histogram& Hist(prometheus::Registry& r, const std::string& name,
                            const std::string& help,
                            Histogram::BucketBoundaries buckets) {
  return BuildHistogram().Name(name).Help(help).Register(r).Add(
      {}, std::move(buckets));
}

// Powers of two from 1 to `max`: batch sizes in sequences and tokens.
Histogram::BucketBoundaries PowersOfTwo(double max) {
  Histogram::BucketBoundaries b;
  for (double v = 1; v <= max; v *= 2) b.push_back(v);
  return b;
}

}  // namespace

// A tiny model answers in about a millisecond and a large offloaded one may
// take minutes to its first token, so the latency buckets span 1 ms to tens
// of minutes (vLLM's ranges, with finer steps at the low end).
Histogram::BucketBoundaries Metrics::TimeToFirstTokenBuckets() {
  return {0.001, 0.005, 0.01, 0.02,  0.04,  0.06,  0.08, 0.1,
          0.25,  0.5,   0.75, 1.0,   2.5,   5.0,   7.5,  10.0,
          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
}

Histogram::BucketBoundaries Metrics::InterTokenBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.075,  0.1,   0.15,   0.2,   0.3,  0.4,   0.5,
          0.75,   1.0,   2.5,    5.0,   10.0, 20.0,  80.0};
}

Histogram::BucketBoundaries Metrics::RequestLatencyBuckets() {
  return {0.001, 0.005, 0.01, 0.025, 0.05,  0.1,   0.3,   0.5,    0.8,
          1.0,   1.5,   2.0,  2.5,   5.0,   10.0,  15.0,  20.0,   30.0,
          40.0,  50.0,  60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

Metrics::Metrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      requests_(BuildCounter()
                    .Name("ringmoe_requests_total")
                    .Help("Finished RPCs by method and gRPC status code.")
                    .Register(*registry_)),
      prompt_tokens_(Counter(*registry_, "ringmoe_prompt_tokens_total",
                             "Prompt tokens of admitted generation requests.")),
      generated_tokens_(Counter(*registry_, "ringmoe_generated_tokens_total",
                                "Tokens generated and sent to clients.")),
      preemptions_(Counter(*registry_, "ringmoe_preemptions_total",
                           "Sequences preempted for lack of KV-cache blocks "
                           "(recomputed later).")),
      queue_depth_(Gauge(*registry_, "ringmoe_queue_depth",
                         "Requests accepted and waiting to start.")),
      running_(Gauge(*registry_, "ringmoe_running_sequences",
                     "Sequences in the running batch.")),
      kv_usage_(Gauge(*registry_, "ringmoe_kv_cache_usage_ratio",
                      "Fraction of KV-cache blocks in use (0 to 1).")),
      kv_used_blocks_(Gauge(*registry_, "ringmoe_kv_cache_used_blocks",
                            "KV-cache blocks held by sequences.")),
      kv_total_blocks_(Gauge(*registry_, "ringmoe_kv_cache_blocks",
                             "KV-cache blocks in the pool.")),
      queue_time_(Hist(*registry_, "ringmoe_queue_time_seconds",
                       "Time from arrival to the first scheduled step.",
                       RequestLatencyBuckets())),
      ttft_(Hist(*registry_, "ringmoe_time_to_first_token_seconds",
                 "Time from arrival to the first generated token.",
                 TimeToFirstTokenBuckets())),
      itl_(Hist(*registry_, "ringmoe_inter_token_latency_seconds",
                "Time between consecutive generated tokens of a sequence.",
                InterTokenBuckets())),
      e2e_(Hist(*registry_, "ringmoe_e2e_request_latency_seconds",
                "Time from arrival to the last token of a request.",
                RequestLatencyBuckets())),
      batch_sequences_(Hist(*registry_, "ringmoe_batch_size_sequences",
                            "Sequences per engine step.", PowersOfTwo(1024))),
      batch_tokens_(Hist(*registry_, "ringmoe_batch_size_tokens",
                         "Tokens (prefill and decode) per engine step.",
                         PowersOfTwo(16384))),
      step_seconds_(Hist(*registry_, "ringmoe_engine_step_seconds",
                         "Duration of one engine step.", InterTokenBuckets())) {
}

void Metrics::CountRequest(absl::string_view method, absl::StatusCode code) {
  requests_
      .Add({{"method", std::string(method)},
            {"status", absl::StatusCodeToString(code)}})
      .Increment();
}

void Metrics::SetKvCacheBlocks(int64_t used, int64_t total) {
  kv_used_blocks_.Set(static_cast<double>(used));
  kv_total_blocks_.Set(static_cast<double>(total));
  kv_usage_.Set(total > 0 ? static_cast<double>(used) / total : 0.0);
}

void Metrics::ObserveStep(int64_t sequences, int64_t tokens, double seconds) {
  batch_sequences_.Observe(static_cast<double>(sequences));
  batch_tokens_.Observe(static_cast<double>(tokens));
  step_seconds_.Observe(seconds);
}

}  // namespace ringmoe::server

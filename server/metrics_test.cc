#include "server/metrics.h"

#include <algorithm>
#include <string>

#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace ringmoe::server {
namespace {

std::string Render(prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

TEST(MetricsTest, NamesFollowTheConventions) {
  auto registry = std::make_shared<prometheus::Registry>();
  Metrics metrics(registry);
  metrics.CountRequest("Generate", absl::StatusCode::kOk);
  metrics.CountRequest("Generate", absl::StatusCode::kInvalidArgument);
  metrics.SetKvCacheBlocks(3, 12);
  metrics.ObserveTimeToFirstToken(0.2);
  const std::string text = Render(*registry);
  EXPECT_NE(
      text.find("ringmoe_requests_total{method=\"Generate\",status=\"OK\"} 1"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("status=\"INVALID_ARGUMENT\"} 1"), std::string::npos);
  EXPECT_NE(text.find("ringmoe_kv_cache_usage_ratio 0.25"), std::string::npos);
  for (const char* name :
       {"ringmoe_queue_depth", "ringmoe_running_sequences",
        "ringmoe_prompt_tokens_total", "ringmoe_generated_tokens_total",
        "ringmoe_time_to_first_token_seconds_bucket",
        "ringmoe_inter_token_latency_seconds_bucket",
        "ringmoe_e2e_request_latency_seconds_bucket",
        "ringmoe_batch_size_sequences_bucket"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
}

TEST(MetricsTest, LatencyBucketsSpanMillisecondsToMinutes) {
  for (const auto& buckets :
       {Metrics::TimeToFirstTokenBuckets(), Metrics::InterTokenBuckets(),
        Metrics::RequestLatencyBuckets()}) {
    EXPECT_TRUE(std::is_sorted(buckets.begin(), buckets.end()));
    EXPECT_LE(buckets.front(), 0.001);
    EXPECT_GE(buckets.back(), 60.0);
  }
}

}  // namespace
}  // namespace ringmoe::server

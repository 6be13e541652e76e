#include "server/ring_metrics.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace ringmoe::server {
namespace {

TEST(RingMetricsTest, ReportsTheCurrentCounters) {
  memory_ring::RingStats stats;
  RingMetrics metrics(stats);
  stats.AddMoved("disk_to_host", 1000);
  stats.AddMoved("slot_to_cache", 7);
  stats.stall_nanos = 2500000000;
  stats.prefetch_hits = 3;
  stats.cache_evictions = 2;
  stats.bytes_resident = 12345;
  stats.expert_runs_cpu = 5;
  stats.expert_runs_streamed = 4;
  stats.bytes_device_weights = 777;
  std::map<std::string, const prometheus::MetricFamily*> by_name;
  const auto families = metrics.Collect();
  for (const auto& f : families) by_name[f.name] = &f;
  const auto* moved = by_name.at("ringmoe_ring_bytes_moved_total");
  ASSERT_EQ(moved->metric.size(), 3u);
  EXPECT_EQ(moved->metric[0].label[0].value, "disk_to_host");
  EXPECT_EQ(moved->metric[0].counter.value, 1000);
  EXPECT_EQ(moved->metric[2].counter.value, 7);
  EXPECT_DOUBLE_EQ(
      by_name.at("ringmoe_ring_stall_seconds_total")->metric[0].counter.value,
      2.5);
  EXPECT_EQ(
      by_name.at("ringmoe_ring_prefetch_hits_total")->metric[0].counter.value,
      3);
  EXPECT_EQ(by_name.at("ringmoe_expert_cache_evictions_total")
                ->metric[0]
                .counter.value,
            2);
  EXPECT_EQ(by_name.at("ringmoe_ring_resident_bytes")->metric[0].gauge.value,
            12345);
  const auto* runs = by_name.at("ringmoe_expert_runs_total");
  ASSERT_EQ(runs->metric.size(), 3u);
  EXPECT_EQ(runs->metric[1].label[0].value, "cpu");
  EXPECT_EQ(runs->metric[1].counter.value, 5);
  EXPECT_EQ(runs->metric[2].label[0].value, "stream");
  EXPECT_EQ(runs->metric[2].counter.value, 4);
  EXPECT_EQ(runs->metric[0].counter.value, 0);
  EXPECT_EQ(by_name.at("ringmoe_device_weight_bytes")->metric[0].gauge.value,
            777);
  for (const auto& [name, family] : by_name) {
    EXPECT_EQ(name.rfind("ringmoe_", 0), 0u);
    if (family->type == prometheus::MetricType::Counter) {
      EXPECT_EQ(name.substr(name.size() - 6), "_total") << name;
    }
  }
  // Later changes show at the next scrape.
  stats.prefetch_hits = 10;
  for (const auto& f : metrics.Collect()) {
    if (f.name == "ringmoe_ring_prefetch_hits_total") {
      EXPECT_EQ(f.metric[0].counter.value, 10);
    }
  }
}

TEST(ExpertTokenMetricsTest, OneSeriesPerLayerAndExpert) {
  moe::ExpertUsage usage(2, 3);
  usage.Add(1, 2, 5);
  usage.Add(1, 2, 4);
  usage.Add(0, 0, 1);
  ExpertTokenMetrics metrics(usage);
  const auto families = metrics.Collect();
  ASSERT_EQ(families.size(), 1u);
  EXPECT_EQ(families[0].name, "ringmoe_expert_tokens_total");
  ASSERT_EQ(families[0].metric.size(), 6u);
  const auto& last = families[0].metric[5];
  EXPECT_EQ(last.label[0].value, "1");
  EXPECT_EQ(last.label[1].value, "2");
  EXPECT_EQ(last.counter.value, 9);
  EXPECT_EQ(families[0].metric[0].counter.value, 1);
}

TEST(ExpertParallelMetricsTest, OneSeriesPerRankFromTheBoard) {
  serving::RankStatsBoard board;
  ExpertParallelMetrics metrics(board);
  EXPECT_TRUE(metrics.Collect().empty());  // nothing gathered yet
  serving::RankStats rank0, rank1;
  rank0.bytes_sent = 100;
  rank0.experts_held = 4;
  rank0.steps = 9;
  rank1.bytes_received = 250;
  rank1.collective_seconds = 0.5;
  rank1.replica_rows = 6;
  rank1.ring_stall_seconds = 1.25;
  rank1.experts_held = 5;
  board.Publish({rank0, rank1});
  std::map<std::string, const prometheus::MetricFamily*> by_name;
  const auto families = metrics.Collect();
  for (const auto& f : families) by_name[f.name] = &f;
  EXPECT_EQ(families.size(), 9u);
  auto value = [&](const std::string& name, int rank) {
    const prometheus::MetricFamily* f = by_name.at(name);
    EXPECT_EQ(f->metric.size(), 2u) << name;
    const prometheus::ClientMetric& m = f->metric.at(rank);
    EXPECT_EQ(m.label.at(0).name, "rank");
    EXPECT_EQ(m.label.at(0).value, std::to_string(rank));
    return f->type == prometheus::MetricType::Gauge ? m.gauge.value
                                                    : m.counter.value;
  };
  EXPECT_EQ(value("ringmoe_expert_parallel_sent_bytes_total", 0), 100);
  EXPECT_EQ(value("ringmoe_expert_parallel_received_bytes_total", 1), 250);
  EXPECT_EQ(value("ringmoe_expert_parallel_collective_seconds_total", 1), 0.5);
  EXPECT_EQ(value("ringmoe_expert_parallel_steps_total", 0), 9);
  EXPECT_EQ(value("ringmoe_expert_parallel_replica_rows_total", 1), 6);
  EXPECT_EQ(value("ringmoe_expert_parallel_ring_stall_seconds_total", 1), 1.25);
  EXPECT_EQ(value("ringmoe_expert_parallel_experts", 0), 4);
  EXPECT_EQ(value("ringmoe_expert_parallel_experts", 1), 5);
}

}  // namespace
}  // namespace ringmoe::server

#include "engine/serving/scheduler.h"

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/serving/output_collector.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ringmoe::serving {
namespace {

constexpr char kModel[] = "tests/testdata/moe-tiny/mixtral";

struct Case {
  std::vector<int32_t> ids;
  std::vector<int32_t> greedy;
};

std::vector<Case> GoldenCases() {
  auto file = checkpoint::SafetensorsFile::Open(std::string(kModel) +
                                                "/golden.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  std::vector<Case> cases;
  for (int i = 0; i < 5; ++i) {
    Case c;
    for (const char* part : {"input_ids", "greedy"}) {
      auto view = (*file)->Get(absl::StrCat("case", i, ".", part));
      EXPECT_TRUE(view.ok()) << view.status();
      // The view is not aligned for int32: copy the bytes.
      std::vector<int32_t> v((*view)->NumElements());
      std::memcpy(v.data(), (*view)->data, v.size() * sizeof(int32_t));
      (std::string(part) == "greedy" ? c.greedy : c.ids) = v;
    }
    cases.push_back(c);
  }
  return cases;
}

std::unique_ptr<runtime::Engine> LoadEngine(int64_t kv_tokens) {
  runtime::EngineOptions options;
  options.model_dir = kModel;
  options.kv_cache_tokens = kv_tokens;
  auto engine = runtime::Engine::Load(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return *std::move(engine);
}

// Counts what the scheduler reports; the gauges keep their last value.
class RecordingMetrics final : public ServingMetrics {
 public:
  void CountRequest(absl::string_view, absl::StatusCode) override {}
  void ObserveQueueTime(double) override {}
  void ObserveTimeToFirstToken(double) override {}
  void ObserveInterTokenLatency(double) override {}
  void ObserveEndToEndLatency(double) override {}
  void AddPromptTokens(int64_t) override {}
  void AddGeneratedTokens(int64_t n) override { generated += n; }
  void CountPreemption() override { ++preemptions; }
  void SetQueueDepth(int64_t n) override { queue_depth = n; }
  void SetRunningSequences(int64_t n) override { running = n; }
  void SetKvCacheBlocks(int64_t used, int64_t) override { kv_used = used; }
  void ObserveStep(int64_t, int64_t, double) override {}

  std::atomic<int64_t> generated{0};
  std::atomic<int64_t> preemptions{0};
  std::atomic<int64_t> queue_depth{-1};
  std::atomic<int64_t> running{-1};
  std::atomic<int64_t> kv_used{-1};
};

using Collector = OutputCollector;

Request Greedy(const std::vector<int32_t>& ids, int max_tokens, Collector* c) {
  Request r;
  r.id = "t";
  r.prompt_ids = ids;
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.sampling.ignore_eos = true;
  r.on_output = c->Callback();
  return r;
}

TEST(SchedulerTest, ConcurrentRequestsMatchGoldenWithChunksAndPreemption) {
  // 5 blocks of 16: the 48-token case alone needs 4 with its 16 new tokens,
  // so concurrent sequences must be preempted and recomputed; an 8-token
  // step budget splits every prompt into chunks.
  auto engine = LoadEngine(80);
  RecordingMetrics metrics;
  SchedulerOptions options;
  options.max_batch_tokens = 8;
  options.max_running_sequences = 4;
  Scheduler scheduler(engine.get(), options, &metrics);
  const std::vector<Case> cases = GoldenCases();
  std::vector<std::unique_ptr<Collector>> collectors;
  for (int round = 0; round < 2; ++round) {
    for (const Case& c : cases) {
      collectors.push_back(std::make_unique<Collector>());
      ASSERT_TRUE(
          scheduler.Submit(Greedy(c.ids, 16, collectors.back().get())).ok());
    }
  }
  for (size_t i = 0; i < collectors.size(); ++i) {
    ASSERT_TRUE(collectors[i]->Wait());
    EXPECT_EQ(collectors[i]->ids, cases[i % 5].greedy) << "request " << i;
    EXPECT_EQ(collectors[i]->last.finish_reason, FinishReason::kLength);
    EXPECT_EQ(collectors[i]->last.completion_tokens, 16);
    EXPECT_GT(collectors[i]->messages, 1);
  }
  EXPECT_TRUE(scheduler.WaitUntilIdle(absl::Seconds(10)));
  EXPECT_EQ(engine->kv_cache().num_free_blocks(),
            engine->kv_cache().num_blocks());
  EXPECT_GT(metrics.preemptions.load(), 0)
      << "the cache was meant to run out of blocks";
  EXPECT_EQ(metrics.generated.load(), 16 * 10);
  EXPECT_EQ(metrics.running.load(), 0);
  EXPECT_EQ(metrics.queue_depth.load(), 0);
  EXPECT_EQ(metrics.kv_used.load(), 0);
}

// The tiny Mixtral with sliding_window set: a model directory of its own
// (under the test's temporary directory) sharing the weights.
std::string WindowedModel(int64_t window) {
  namespace fs = std::filesystem;
  const fs::path dir =
      fs::path(::testing::TempDir()) / absl::StrCat("mixtral_window", window);
  fs::create_directories(dir);
  auto config = nlohmann::json::parse(
      std::ifstream(std::string(kModel) + "/config.json"));
  config["sliding_window"] = window;
  std::ofstream(dir / "config.json") << config.dump();
  if (!fs::exists(dir / "model.safetensors")) {
    fs::create_symlink(fs::absolute(std::string(kModel) + "/model.safetensors"),
                       dir / "model.safetensors");
  }
  return dir.string();
}

std::vector<std::vector<int32_t>> Serve(runtime::Engine* engine,
                                        const std::vector<Case>& cases,
                                        int max_tokens) {
  SchedulerOptions options;
  options.max_batch_tokens = 8;
  Scheduler scheduler(engine, options, nullptr);
  std::vector<std::unique_ptr<Collector>> collectors;
  for (const Case& c : cases) {
    collectors.push_back(std::make_unique<Collector>());
    EXPECT_TRUE(
        scheduler.Submit(Greedy(c.ids, max_tokens, collectors.back().get()))
            .ok());
  }
  std::vector<std::vector<int32_t>> out;
  for (auto& c : collectors) {
    EXPECT_TRUE(c->Wait());
    EXPECT_TRUE(c->last.status.ok()) << c->last.status;
    out.push_back(c->ids);
  }
  EXPECT_TRUE(scheduler.WaitUntilIdle(absl::Seconds(10)));
  return out;
}

TEST(SchedulerTest, SlidingWindowModelServesLongRequestsFromASmallCache) {
  // Window 8, steps of at most 8 tokens: a layer never holds more than 2
  // blocks of 16 at once, so a cache of 32 tokens (2 layers x 2 blocks)
  // serves 48 + 32 positions, which full attention would need 10 blocks for;
  // two such requests take turns.
  const std::string model = WindowedModel(8);
  const std::vector<Case> cases = {GoldenCases()[3], GoldenCases()[4]};
  runtime::EngineOptions roomy;
  roomy.model_dir = model;
  auto reference = runtime::Engine::Load(roomy);
  ASSERT_TRUE(reference.ok()) << reference.status();
  const std::vector<std::vector<int32_t>> want =
      Serve(reference->get(), cases, 32);

  runtime::EngineOptions small = roomy;
  small.kv_cache_tokens = 32;
  auto engine = runtime::Engine::Load(small);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_EQ((*engine)->kv_cache().num_blocks(), 4);
  EXPECT_EQ(Serve(engine->get(), cases, 32), want);
  EXPECT_EQ((*engine)->kv_cache().num_free_blocks(), 4);

  // The same cache cannot hold the request at all under full attention.
  auto full = LoadEngine(32);
  Scheduler scheduler(full.get(), {}, nullptr);
  Collector refused;
  const absl::Status status =
      scheduler.Submit(Greedy(cases[1].ids, 32, &refused)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("needs 10 KV-cache blocks"),
            std::string::npos)
      << status;
}

TEST(SchedulerTest, LogitsOnlyReturnsTheLastRow) {
  auto engine = LoadEngine(0);
  Scheduler scheduler(engine.get(), {}, nullptr);
  Collector c;
  Request r;
  r.prompt_ids = GoldenCases()[1].ids;
  r.logits_only = true;
  r.on_output = c.Callback();
  ASSERT_TRUE(scheduler.Submit(std::move(r)).ok());
  ASSERT_TRUE(c.Wait());
  EXPECT_TRUE(c.last.status.ok());
  EXPECT_EQ(c.last.logits.size(), 512u);
  EXPECT_TRUE(c.ids.empty());
}

TEST(SchedulerTest, RejectsBadRequestsNamingTheProblem) {
  auto engine = LoadEngine(0);
  Scheduler scheduler(engine.get(), {}, nullptr);
  Collector c;
  auto submit = [&](std::vector<int32_t> ids,
                    std::optional<int32_t> max_tokens) {
    Request r = Greedy(ids, 1, &c);
    r.max_tokens = max_tokens;
    return scheduler.Submit(std::move(r)).status();
  };
  absl::Status s = submit({}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("empty"), absl::string_view::npos) << s;
  s = submit({1, 2}, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_tokens"), absl::string_view::npos) << s;
  s = submit({1, 999}, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("vocabulary"), absl::string_view::npos) << s;
  s = submit({1, 2}, 100000);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = submit(std::vector<int32_t>(600, 1), 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("limit"), absl::string_view::npos) << s;
}

TEST(SchedulerTest, CancelFreesBlocksAndQueueOverflowIsResourceExhausted) {
  auto engine = LoadEngine(0);
  SchedulerOptions options;
  options.max_queue = 1;
  options.max_running_sequences = 1;
  Scheduler scheduler(engine.get(), options, nullptr);
  Collector running, queued, refused;
  auto handle = scheduler.Submit(Greedy({1, 2, 3}, 500, &running));
  ASSERT_TRUE(handle.ok());
  // Wait until it runs so that the next one is the only one queued.
  while (scheduler.num_active() != 1 || !running.Started())
    absl::SleepFor(absl::Milliseconds(1));
  auto second = scheduler.Submit(Greedy({1, 2, 3}, 4, &queued));
  ASSERT_TRUE(second.ok());
  auto third = scheduler.Submit(Greedy({1, 2, 3}, 4, &refused));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted)
      << third.status();
  (*handle)->Cancel();
  ASSERT_TRUE(running.Wait());
  EXPECT_EQ(running.last.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(running.last.status.code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(queued.Wait());
  EXPECT_EQ(queued.last.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(scheduler.WaitUntilIdle(absl::Seconds(10)));
  EXPECT_EQ(engine->kv_cache().num_free_blocks(),
            engine->kv_cache().num_blocks());
}

TEST(SchedulerTest, DeadlineAndShutdown) {
  auto engine = LoadEngine(0);
  Scheduler scheduler(engine.get(), {}, nullptr);
  Collector late;
  Request r = Greedy({1, 2, 3}, 500, &late);
  r.deadline = absl::Now() + absl::Milliseconds(5);
  ASSERT_TRUE(scheduler.Submit(std::move(r)).ok());
  ASSERT_TRUE(late.Wait());
  EXPECT_EQ(late.last.status.code(), absl::StatusCode::kDeadlineExceeded);

  scheduler.StopAccepting();
  Collector refused;
  EXPECT_EQ(scheduler.Submit(Greedy({1}, 2, &refused)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_FALSE(scheduler.accepting());
}

}  // namespace
}  // namespace ringmoe::serving

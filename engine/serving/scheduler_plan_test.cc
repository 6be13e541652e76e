// The scheduler on a model of the test's own (no engine): a counting model
// whose next token is the last one plus one, so every output is known, and
// whose steps are recorded, so the plans can be checked.
#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "engine/serving/output_collector.h"
#include "engine/serving/scheduler.h"
#include "engine/serving/step_runner.h"
#include "gtest/gtest.h"

namespace ringmoe::serving {
namespace {

// With `caches` > 1 it keeps one KV cache per pretend rank, as the engine
// does under data-parallel attention, and checks that every chunk names a
// cache and a sequence stays in one until released.
class CountingModel final : public StepRunner {
 public:
  CountingModel(int64_t vocab, int64_t context, int64_t block_size,
                int64_t blocks, int caches = 1)
      : vocab_(vocab), context_(context) {
    for (int c = 0; c < caches; ++c) {
      kv_.emplace_back(std::vector<runtime::KvCache::Layer>{{4, 4, 0}},
                       block_size, blocks);
    }
  }

  int64_t vocab_size() const override { return vocab_; }
  int64_t context_tokens() const override { return context_; }
  runtime::KvCache& kv_cache() override { return kv_[0]; }
  int num_kv_caches() const override { return static_cast<int>(kv_.size()); }
  runtime::KvCache& kv_cache_of(int cache) override { return kv_[cache]; }
  void Release(runtime::SequenceId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto home = home_of_.find(id);
    if (home == home_of_.end()) return;
    kv_[home->second].Release(id);
    home_of_.erase(home);
  }
  const tokenizer::Tokenizer* tokenizer() const override { return nullptr; }
  absl::Span<const int32_t> eos_token_ids() const override { return eos_; }

  absl::Status Step(absl::Span<const runtime::SequenceChunk> chunks,
                    std::vector<float>* logits,
                    std::vector<int32_t>* greedy_tokens) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (fail_steps_ > 0) {
      --fail_steps_;
      return absl::DataLossError("the checkpoint went away");
    }
    // A token whose weights no longer read: any step that feeds it fails.
    for (const runtime::SequenceChunk& c : chunks) {
      for (int32_t t : c.tokens) {
        if (t == poison_) return absl::DataLossError("expert 7 is unreadable");
      }
    }
    logits->clear();
    greedy_tokens->clear();
    int64_t tokens = 0;
    std::vector<int> rows_in(kv_.size(), 0);
    for (size_t row = 0; row < chunks.size(); ++row) {
      const runtime::SequenceChunk& c = chunks[row];
      const int home = kv_.size() > 1 ? c.home : 0;
      if (kv_.size() == 1 ? c.home != -1
                          : home < 0 || home >= static_cast<int>(kv_.size())) {
        return absl::InvalidArgumentError(absl::StrCat("home ", c.home));
      }
      const auto [at, added] = home_of_.try_emplace(c.sequence, home);
      if (at->second != home) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", c.sequence, " moved to cache ", home));
      }
      ++rows_in[home];
      runtime::KvCache& kv = kv_[home];
      const int64_t length = kv.Length(c.sequence) + c.tokens.size();
      absl::Status grown = kv.Grow(c.sequence, length);
      if (!grown.ok()) return grown;
      const int32_t next = (c.tokens.back() + 1) % vocab_;
      if (c.greedy_token) {
        greedy_tokens->push_back(next);
      } else {
        logits->resize(logits->size() + vocab_, 0.0f);
        (*logits)[logits->size() - vocab_ + next] = 10.0f;
      }
      tokens += static_cast<int64_t>(c.tokens.size());
    }
    step_tokens_.push_back(tokens);
    step_rows_.push_back(static_cast<int64_t>(chunks.size()));
    if (std::count(rows_in.begin(), rows_in.end(), 0) == 0) ++steps_in_all_;
    return absl::OkStatus();
  }

  void Poison(int32_t token) {
    std::lock_guard<std::mutex> lock(mu_);
    poison_ = token;
  }
  void FailNextSteps(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_steps_ = n;
  }
  std::vector<int64_t> step_tokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return step_tokens_;
  }
  // Steps with rows in every cache.
  int steps_in_all() {
    std::lock_guard<std::mutex> lock(mu_);
    return steps_in_all_;
  }

 private:
  const int64_t vocab_;
  const int64_t context_;
  std::vector<runtime::KvCache> kv_;
  const std::vector<int32_t> eos_;
  // std::mutex: ThreadSanitizer sees its ordering (not absl::Mutex's).
  std::mutex mu_;
  // Guarded by mu_:
  int fail_steps_ = 0;
  int32_t poison_ = -1;
  std::vector<int64_t> step_tokens_;
  std::vector<int64_t> step_rows_;
  absl::flat_hash_map<runtime::SequenceId, int> home_of_;
  int steps_in_all_ = 0;
};

using Collector = OutputCollector;

Request Greedy(std::vector<int32_t> prompt, int max_tokens, Collector* c) {
  Request r;
  r.id = "t";
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.on_output = c->Callback();
  return r;
}

std::vector<int32_t> Counting(int32_t after, int n, int32_t vocab) {
  std::vector<int32_t> ids;
  for (int i = 1; i <= n; ++i) ids.push_back((after + i) % vocab);
  return ids;
}

TEST(SchedulerPlanTest, ChunkedPrefillPreemptionAndTheStepBudget) {
  // 12 blocks of 4 positions: the twelve requests below need up to 5 each,
  // so sequences are preempted and recomputed; 6 tokens per step splits the
  // longer prompts.
  CountingModel model(/*vocab=*/50, /*context=*/64, /*block_size=*/4,
                      /*blocks=*/12);
  SchedulerOptions options;
  options.max_batch_tokens = 6;
  options.max_running_sequences = 4;
  Scheduler scheduler(&model, options, nullptr);
  std::vector<std::unique_ptr<Collector>> collectors;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> prompt(1 + (i * 5) % 13);
    for (size_t k = 0; k < prompt.size(); ++k) prompt[k] = (i * 7 + k) % 50;
    prompts.push_back(prompt);
    collectors.push_back(std::make_unique<Collector>());
    ASSERT_TRUE(
        scheduler.Submit(Greedy(prompt, 6 + i % 3, collectors.back().get()))
            .ok());
  }
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(collectors[i]->Wait());
    EXPECT_EQ(collectors[i]->ids, Counting(prompts[i].back(), 6 + i % 3, 50))
        << "request " << i;
    EXPECT_EQ(collectors[i]->last.finish_reason, FinishReason::kLength);
    EXPECT_EQ(collectors[i]->last.prompt_tokens,
              static_cast<int>(prompts[i].size()));
  }
  EXPECT_TRUE(scheduler.WaitUntilIdle(absl::Seconds(10)));
  EXPECT_EQ(model.kv_cache().num_free_blocks(), model.kv_cache().num_blocks());
  const std::vector<int64_t> steps = model.step_tokens();
  EXPECT_LE(*std::max_element(steps.begin(), steps.end()), 6);
}

// Three KV caches (data-parallel attention over three ranks) of 8 blocks:
// sequences are placed in the cache with the most free blocks, stay there,
// are preempted for blocks of their own cache only, and every output is
// still exact; steps batch sequences of every cache, and the caches end
// empty.
TEST(SchedulerPlanTest, SeveralKvCachesEachPlannedOnItsOwn) {
  CountingModel model(/*vocab=*/50, /*context=*/64, /*block_size=*/4,
                      /*blocks=*/8, /*caches=*/3);
  SchedulerOptions options;
  options.max_batch_tokens = 8;
  options.max_running_sequences = 9;
  Scheduler scheduler(&model, options, nullptr);
  EXPECT_EQ(scheduler.kv_blocks(), 8);
  std::vector<std::unique_ptr<Collector>> collectors;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 15; ++i) {
    std::vector<int32_t> prompt(1 + (i * 7) % 11);
    for (size_t k = 0; k < prompt.size(); ++k) prompt[k] = (i * 3 + k) % 50;
    prompts.push_back(prompt);
    collectors.push_back(std::make_unique<Collector>());
    ASSERT_TRUE(
        scheduler.Submit(Greedy(prompt, 8 + i % 5, collectors.back().get()))
            .ok());
  }
  for (int i = 0; i < 15; ++i) {
    ASSERT_TRUE(collectors[i]->Wait());
    EXPECT_EQ(collectors[i]->last.finish_reason, FinishReason::kLength)
        << "request " << i << ": " << collectors[i]->last.status;
    EXPECT_EQ(collectors[i]->ids, Counting(prompts[i].back(), 8 + i % 5, 50))
        << "request " << i;
  }
  EXPECT_TRUE(scheduler.WaitUntilIdle(absl::Seconds(10)));
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(model.kv_cache_of(c).num_free_blocks(), 8) << "cache " << c;
  }
  EXPECT_GT(model.steps_in_all(), 0);
}

TEST(SchedulerPlanTest, AFailedStepFailsItsSequencesAndServingGoesOn) {
  CountingModel model(50, 64, 4, 16);
  Scheduler scheduler(&model, {}, nullptr);
  model.FailNextSteps(1);
  Collector failed;
  ASSERT_TRUE(scheduler.Submit(Greedy({1, 2, 3}, 4, &failed)).ok());
  ASSERT_TRUE(failed.Wait());
  EXPECT_EQ(failed.last.finish_reason, FinishReason::kError);
  EXPECT_EQ(failed.last.status.code(), absl::StatusCode::kInternal);
  EXPECT_NE(failed.last.status.message().find("the checkpoint went away"),
            absl::string_view::npos);
  Collector ok;
  ASSERT_TRUE(scheduler.Submit(Greedy({7}, 3, &ok)).ok());
  ASSERT_TRUE(ok.Wait());
  EXPECT_EQ(ok.ids, Counting(7, 3, 50));
  EXPECT_TRUE(scheduler.WaitUntilIdle(absl::Seconds(10)));
  EXPECT_EQ(model.kv_cache().num_free_blocks(), model.kv_cache().num_blocks());
}

TEST(SchedulerPlanTest, AFailureFailsOnlyTheSequencesItBelongsTo) {
  CountingModel model(50, 64, 4, 64);
  model.Poison(40);
  SchedulerOptions options;
  options.unhealthy_after_failed_steps = 100;  // not what this test is about
  Scheduler scheduler(&model, options, nullptr);
  // Batched together: the one whose prompt holds the poison fails; the
  // others' outputs are as if nothing happened.
  std::vector<std::unique_ptr<Collector>> collectors;
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 2}, {3, 40, 5}, {10}, {20, 21, 22}};
  for (const auto& prompt : prompts) {
    collectors.push_back(std::make_unique<Collector>());
    ASSERT_TRUE(
        scheduler.Submit(Greedy(prompt, 5, collectors.back().get())).ok());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(collectors[i]->Wait());
    if (i == 1) {
      EXPECT_EQ(collectors[i]->last.finish_reason, FinishReason::kError);
      EXPECT_NE(collectors[i]->last.status.message().find("expert 7"),
                absl::string_view::npos);
      continue;
    }
    EXPECT_EQ(collectors[i]->last.finish_reason, FinishReason::kLength) << i;
    EXPECT_EQ(collectors[i]->ids, Counting(prompts[i].back(), 5, 50)) << i;
  }
  // A sequence that reaches the poison while generating fails then.
  Collector late;
  ASSERT_TRUE(scheduler.Submit(Greedy({36}, 8, &late)).ok());
  ASSERT_TRUE(late.Wait());
  EXPECT_EQ(late.last.finish_reason, FinishReason::kError);
  EXPECT_EQ(late.ids, (std::vector<int32_t>{37, 38, 39, 40}));
  EXPECT_TRUE(scheduler.WaitUntilIdle(absl::Seconds(10)));
  EXPECT_EQ(model.kv_cache().num_free_blocks(), model.kv_cache().num_blocks());
}

TEST(SchedulerPlanTest, UnhealthyAfterFailedStepsInARowAndBackOnSuccess) {
  CountingModel model(50, 64, 4, 64);
  SchedulerOptions options;
  options.unhealthy_after_failed_steps = 3;
  Scheduler scheduler(&model, options, nullptr);
  EXPECT_TRUE(scheduler.healthy());
  model.FailNextSteps(3);
  for (int i = 0; i < 3; ++i) {
    Collector failed;
    ASSERT_TRUE(scheduler.Submit(Greedy({1}, 2, &failed)).ok());
    ASSERT_TRUE(failed.Wait());
    EXPECT_EQ(failed.last.finish_reason, FinishReason::kError);
  }
  EXPECT_FALSE(scheduler.healthy());
  Collector ok;
  ASSERT_TRUE(scheduler.Submit(Greedy({1}, 2, &ok)).ok());
  ASSERT_TRUE(ok.Wait());
  EXPECT_EQ(ok.last.finish_reason, FinishReason::kLength);
  EXPECT_TRUE(scheduler.healthy());
}

TEST(SchedulerPlanTest, CancelledSequencesGiveTheirBlocksBack) {
  CountingModel model(50, 4096, 4, 1024);
  Scheduler scheduler(&model, {}, nullptr);
  Collector c;
  Request r = Greedy({1}, 4000, &c);
  r.sampling.ignore_eos = true;
  absl::StatusOr<std::shared_ptr<RequestHandle>> handle =
      scheduler.Submit(std::move(r));
  ASSERT_TRUE(handle.ok());
  (*handle)->Cancel();
  ASSERT_TRUE(c.Wait());
  EXPECT_EQ(c.last.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(c.last.status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(c.ids.size(), 4000u);
  EXPECT_TRUE(scheduler.WaitUntilIdle(absl::Seconds(10)));
  EXPECT_EQ(model.kv_cache().num_free_blocks(), model.kv_cache().num_blocks());
}

TEST(SchedulerPlanTest, RefusesWhatCannotFit) {
  CountingModel model(50, 32, 4, 4);
  Scheduler scheduler(&model, {}, nullptr);
  Collector c;
  absl::Status s = scheduler.Submit(Greedy({1, 2}, 40, &c)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = scheduler.Submit(Greedy({1, 2}, 20, &c)).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("KV-cache blocks"), absl::string_view::npos) << s;
  s = scheduler.Submit(Greedy({60}, 2, &c)).status();
  EXPECT_NE(s.message().find("outside the vocabulary"), absl::string_view::npos)
      << s;
}

}  // namespace
}  // namespace ringmoe::serving

#include "engine/serving/step_broadcast.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "engine/parallel/single_rank_communicator.h"
#include "gtest/gtest.h"

namespace ringmoe::serving {
namespace {

StepMessage Sample() {
  StepMessage m;
  m.kind = StepKind::kStep;
  m.releases = {7, 3};
  m.chunks.push_back({11, {1, 2, 3}, false});
  m.chunks.push_back({12, {42}, true, /*home=*/3});
  m.chunks.push_back({13, {5, 6}, false, /*home=*/1, /*greedy_token=*/true});
  return m;
}

TEST(StepMessageTest, RoundTrips) {
  const StepMessage m = Sample();
  const StepHeader h = EncodeStepHeader(m);
  const std::vector<uint8_t> payload = EncodeStepPayload(m);
  EXPECT_EQ(h.magic, kStepMagic);
  EXPECT_EQ(h.num_releases, 2u);
  EXPECT_EQ(h.num_chunks, 3u);
  EXPECT_EQ(h.payload_bytes, payload.size());
  EXPECT_EQ(payload.size(), 2 * 8 + 3 * 24 + 6 * 4u);
  absl::StatusOr<StepMessage> got = DecodeStepMessage(h, payload);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->kind, StepKind::kStep);
  EXPECT_EQ(got->releases, m.releases);
  ASSERT_EQ(got->chunks.size(), 3u);
  EXPECT_EQ(got->chunks[0].sequence, 11);
  EXPECT_EQ(got->chunks[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(got->chunks[0].all_logits);
  EXPECT_EQ(got->chunks[1].sequence, 12);
  EXPECT_EQ(got->chunks[1].tokens, (std::vector<int32_t>{42}));
  EXPECT_TRUE(got->chunks[1].all_logits);
  EXPECT_FALSE(got->chunks[1].greedy_token);
  EXPECT_FALSE(got->chunks[2].all_logits);
  EXPECT_TRUE(got->chunks[2].greedy_token);
  EXPECT_EQ(got->chunks[0].home, -1);
  EXPECT_EQ(got->chunks[1].home, 3);
  EXPECT_EQ(got->chunks[2].home, 1);
  const std::vector<runtime::SequenceChunk> chunks = got->EngineChunks();
  ASSERT_EQ(chunks.size(), 3u);
  EXPECT_EQ(chunks[0].tokens.size(), 3u);
  EXPECT_EQ(chunks[1].home, 3);
  EXPECT_TRUE(chunks[1].all_logits);
  EXPECT_FALSE(chunks[1].greedy_token);
  EXPECT_TRUE(chunks[2].greedy_token);
  EXPECT_EQ(chunks[2].home, 1);
}

TEST(StepMessageTest, StopAndIdleHaveNoChunks) {
  StepMessage stop;
  stop.kind = StepKind::kStop;
  StepHeader h = EncodeStepHeader(stop);
  EXPECT_EQ(h.payload_bytes, 0u);
  absl::StatusOr<StepMessage> got = DecodeStepMessage(h, {});
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->kind, StepKind::kStop);

  for (const StepKind kind : {StepKind::kIdle, StepKind::kStats}) {
    StepMessage idle;
    idle.kind = kind;
    idle.releases = {5};
    h = EncodeStepHeader(idle);
    got = DecodeStepMessage(h, EncodeStepPayload(idle));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(got->kind, kind);
    EXPECT_EQ(got->releases, (std::vector<runtime::SequenceId>{5}));
  }
  StepMessage stats_with_chunks = Sample();
  stats_with_chunks.kind = StepKind::kStats;
  EXPECT_FALSE(DecodeStepMessage(EncodeStepHeader(stats_with_chunks),
                                 EncodeStepPayload(stats_with_chunks))
                   .ok());
}

TEST(StepMessageTest, RefusesMalformed) {
  const StepMessage m = Sample();
  const std::vector<uint8_t> payload = EncodeStepPayload(m);
  StepHeader h = EncodeStepHeader(m);
  h.magic = 0;
  EXPECT_FALSE(DecodeStepMessage(h, payload).ok());
  h = EncodeStepHeader(m);
  h.kind = 9;
  EXPECT_FALSE(DecodeStepMessage(h, payload).ok());
  h = EncodeStepHeader(m);
  EXPECT_FALSE(DecodeStepMessage(
                   h, absl::MakeConstSpan(payload).first(payload.size() - 4))
                   .ok());
  h.num_chunks = 1u << 30;
  EXPECT_FALSE(DecodeStepMessage(h, payload).ok());
  h = EncodeStepHeader(m);
  h.num_chunks = 4;  // one more than there is
  EXPECT_FALSE(DecodeStepMessage(h, payload).ok());
  // A token count past the payload.
  std::vector<uint8_t> bad = payload;
  const uint32_t huge = 1000;
  std::memcpy(bad.data() + 2 * 8 + 8, &huge, sizeof(huge));
  h = EncodeStepHeader(m);
  EXPECT_FALSE(DecodeStepMessage(h, bad).ok());
  // An unknown output, a home below -1, and padding that is not zero.
  for (const size_t at : {2 * 8 + 12, 2 * 8 + 16, 2 * 8 + 20}) {
    bad = payload;
    const int32_t wrong = -2;
    std::memcpy(bad.data() + at, &wrong, sizeof(wrong));
    EXPECT_FALSE(DecodeStepMessage(h, bad).ok()) << at;
  }
}

// A StepRunner that records what it is asked to do.
class RecordingRunner : public StepRunner {
 public:
  int64_t vocab_size() const override { return 4; }
  int64_t context_tokens() const override { return 16; }
  runtime::KvCache& kv_cache() override { std::abort(); }
  const tokenizer::Tokenizer* tokenizer() const override { return nullptr; }
  absl::Span<const int32_t> eos_token_ids() const override { return {}; }
  void Release(runtime::SequenceId id) override { released.push_back(id); }
  absl::Status Step(absl::Span<const runtime::SequenceChunk> chunks,
                    std::vector<float>* logits,
                    std::vector<int32_t>* greedy_tokens) override {
    steps.push_back(chunks.size());
    logits->clear();
    greedy_tokens->clear();
    for (const runtime::SequenceChunk& c : chunks) {
      if (c.greedy_token) {
        greedy_tokens->push_back(c.tokens.back());
      } else {
        logits->insert(logits->end(), 4, 1.0f);
      }
    }
    return absl::OkStatus();
  }
  std::vector<runtime::SequenceId> released;
  std::vector<size_t> steps;
};

TEST(BroadcastingStepRunnerTest, RunsAndReleasesThroughTheInnerRunner) {
  parallel::SingleRankCommunicator communicator(absl::Seconds(1));
  RecordingRunner inner;
  {
    RankStatsBoard board;
    BroadcastingStepRunner runner(
        &inner, &communicator, [] { return RankStats{}; }, &board);
    runner.Release(4);
    const std::vector<int32_t> tokens = {1, 2};
    std::vector<runtime::SequenceChunk> chunks = {{1, tokens, false}};
    std::vector<float> logits;
    std::vector<int32_t> greedy_tokens;
    ASSERT_TRUE(runner.Step(chunks, &logits, &greedy_tokens).ok());
    EXPECT_EQ(logits.size(), 4u);
    runner.Stop();
    EXPECT_EQ(runner.Step(chunks, &logits, &greedy_tokens).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(inner.released, (std::vector<runtime::SequenceId>{4}));
  EXPECT_EQ(inner.steps, (std::vector<size_t>{1}));
}

// Every rank's stats reach the board at start and, after steps, within a
// heartbeat (a quarter of the communicator's timeout), with rank 0's step
// count.
TEST(BroadcastingStepRunnerTest, PublishesTheRanksStats) {
  parallel::SingleRankCommunicator communicator(absl::Milliseconds(200));
  RecordingRunner inner;
  RankStatsBoard board;
  std::atomic<int> asked{0};
  BroadcastingStepRunner runner(
      &inner, &communicator,
      [&] {
        ++asked;
        RankStats stats;
        stats.bytes_sent = 100;
        stats.experts_held = 3;
        return stats;
      },
      &board);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (board.Snapshot().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::vector<RankStats> ranks = board.Snapshot();
  ASSERT_EQ(ranks.size(), 1u);
  EXPECT_EQ(ranks[0].bytes_sent, 100u);
  EXPECT_EQ(ranks[0].experts_held, 3u);
  EXPECT_EQ(ranks[0].steps, 0u);

  const std::vector<int32_t> tokens = {1};
  std::vector<runtime::SequenceChunk> chunks = {{1, tokens, false}};
  std::vector<float> logits;
  std::vector<int32_t> greedy_tokens;
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(runner.Step(chunks, &logits, &greedy_tokens).ok());
  while (board.Snapshot()[0].steps != 3 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(board.Snapshot()[0].steps, 3u);
  // Idle with nothing new: no more gathers.
  const int gathers = asked.load();
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(asked.load(), gathers);
  runner.Stop();
}

// Rank 0 of two whose peer stops answering after `answered` broadcasts:
// later collectives fail as a timed-out one does.
class StoppingPeerCommunicator : public parallel::Communicator {
 public:
  explicit StoppingPeerCommunicator(int answered) : answered_(answered) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  absl::Duration timeout() const override { return absl::Seconds(4); }
  absl::Status AllToAll(absl::Span<const uint8_t>,
                        absl::Span<uint8_t>) override {
    return absl::UnimplementedError("AllToAll");
  }
  absl::Status AllToAllV(absl::Span<const uint8_t>, absl::Span<const uint64_t>,
                         absl::Span<uint8_t>,
                         absl::Span<const uint64_t>) override {
    return absl::UnimplementedError("AllToAllV");
  }
  absl::Status Broadcast(int, absl::Span<uint8_t>) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (answered_ == 0) {
      return absl::DeadlineExceededError("Broadcast: rank 1 did not answer");
    }
    --answered_;
    return absl::OkStatus();
  }
  absl::Status AllGather(absl::Span<const uint8_t> send,
                         absl::Span<uint8_t> recv) override {
    std::memcpy(recv.data(), send.data(), send.size());
    std::memcpy(recv.data() + send.size(), send.data(), send.size());
    return absl::OkStatus();
  }
  absl::Status AllGatherV(absl::Span<const uint8_t>, absl::Span<uint8_t>,
                          absl::Span<const uint64_t>) override {
    return absl::UnimplementedError("AllGatherV");
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  [[noreturn]] void Abort(const absl::Status&) override { std::abort(); }

 private:
  std::mutex mu_;
  int answered_;  // guarded by mu_
};

// A peer that stops answering fails the step that needed it and every
// later one with the job's failure, which failure() keeps; nothing aborts
// the process here (the server does once replies are out), and Stop sends
// nothing more.
TEST(BroadcastingStepRunnerTest, APeerThatStopsAnsweringFailsTheJob) {
  // The start-up stats message (one header broadcast, no payload) gets
  // through, the first step's header does not.
  StoppingPeerCommunicator communicator(/*answered=*/1);
  RecordingRunner inner;
  RankStatsBoard board;
  BroadcastingStepRunner runner(
      &inner, &communicator, [] { return RankStats{}; }, &board);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (board.Snapshot().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(board.Snapshot().size(), 2u);
  EXPECT_TRUE(runner.failure().ok());
  const std::vector<int32_t> tokens = {1};
  std::vector<runtime::SequenceChunk> chunks = {{1, tokens, false}};
  std::vector<float> logits;
  std::vector<int32_t> greedy_tokens;
  const absl::Status failed = runner.Step(chunks, &logits, &greedy_tokens);
  EXPECT_EQ(failed.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(failed.message().find("the expert-parallel job failed"),
            absl::string_view::npos)
      << failed;
  EXPECT_NE(failed.message().find("rank 1 did not answer"),
            absl::string_view::npos)
      << failed;
  EXPECT_EQ(runner.failure(), failed);
  EXPECT_TRUE(inner.steps.empty());  // the step never ran on rank 0
  const absl::Status later = runner.Step(chunks, &logits, &greedy_tokens);
  EXPECT_EQ(later.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(later.message(), failed.message());
  runner.Stop();
}

}  // namespace
}  // namespace ringmoe::serving

// ExpertParallelExecutor on one process: every rank of a job simulated in
// turn through a scripted communicator. A rank's AllGatherV block depends
// only on its own experts, so a first pass records each rank's blocks and a
// second pass hands every rank the blocks of the others: each rank must
// then end with every task's output bitwise as ResidentExperts computes it.
#include "engine/moe/expert_parallel.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/stand_in_device.h"
#include "engine/moe/random_mlp.h"
#include "engine/parallel/collective_args.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmoe::moe {
namespace {

using ::testing::ElementsAre;

// Rank `rank` of `size`: AllGatherV records what this rank sends (by call)
// and fills the other ranks' blocks from `peer_blocks` (by call, then rank)
// where given, else with NaNs; `fail` makes every collective fail.
class ScriptedCommunicator : public parallel::Communicator {
 public:
  ScriptedCommunicator(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Duration timeout() const override { return absl::Seconds(1); }
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
    return absl::UnimplementedError("Broadcast");
  }
  absl::Status AllGather(absl::Span<const uint8_t>,
                         absl::Span<uint8_t>) override {
    return absl::UnimplementedError("AllGather");
  }
  absl::Status AllGatherV(absl::Span<const uint8_t> send,
                          absl::Span<uint8_t> recv,
                          absl::Span<const uint64_t> recv_counts) override {
    if (fail) return absl::DeadlineExceededError("rank 1 did not arrive");
    EXPECT_TRUE(
        parallel::CheckAllGatherV(size_, rank_, send, recv, recv_counts).ok());
    const int call = static_cast<int>(sent.size());
    sent.emplace_back(send.begin(), send.end());
    uint8_t* block = recv.data();
    for (int p = 0; p < size_; ++p) {
      const auto given = peer_blocks.find({call, p});
      // A rank with no rows sends nothing (and memcpy of a null pointer is
      // undefined even for 0 bytes).
      if (recv_counts[p] == 0) continue;
      if (p == rank_) {
        std::memcpy(block, send.data(), send.size());
      } else if (given != peer_blocks.end()) {
        EXPECT_EQ(given->second.size(), recv_counts[p]);
        std::memcpy(block, given->second.data(), recv_counts[p]);
      } else {
        std::memset(block, 0xff, recv_counts[p]);  // NaNs
      }
      block += recv_counts[p];
    }
    return absl::OkStatus();
  }
  absl::Status Barrier() override { return absl::OkStatus(); }
  [[noreturn]] void Abort(const absl::Status&) override { std::abort(); }

  std::vector<std::vector<uint8_t>> sent;
  std::map<std::pair<int, int>, std::vector<uint8_t>> peer_blocks;
  bool fail = false;

 private:
  const int rank_, size_;
};

// Records what it is asked to do and computes nothing.
class RecordingExecutor : public ExpertExecutor {
 public:
  void BeginStep(int64_t) override {}
  bool WantsPredictions() const override { return true; }
  void Predict(int, const Routing& predicted) override {
    predicted_ = predicted;
  }
  absl::Status Run(int, absl::Span<const ExpertTask> tasks,
                   absl::Span<const backend::MlpTask> alongside,
                   backend::Backend&) override {
    experts_run_.clear();
    for (const ExpertTask& t : tasks) experts_run_.push_back(t.expert);
    alongside_run_ = alongside.size();
    return status_;
  }
  void EndStep() override {}

  Routing predicted_;
  std::vector<int32_t> experts_run_;
  size_t alongside_run_ = 0;
  absl::Status status_;
};

// How rows travel: on the CPU backend through the job's communicator; on a
// device through a communicator of its memory (the stand-in's is the
// host's, as NCCL moves a GPU's); or staged through host memory.
enum Transport { kHost, kDevice, kStaged };

class ExpertParallelTest : public ::testing::Test {
 protected:
  static constexpr int64_t kHidden = 40, kInter = 56, kTokens = 11;
  static constexpr int kExperts = 7;

  void SetUp() override {
    std::mt19937 rng(5);
    for (int e = 0; e < kExperts; ++e)
      experts_.emplace_back(kHidden, kInter, &rng);
    shared_.emplace_back(kHidden, kInter, &rng);
    weights_.layers.resize(3);
    for (const RandomMlp& e : experts_) {
      weights_.layers[2].experts.push_back(e.weights);
    }
    std::normal_distribution<float> normal(0.f, 1.f);
    x_.resize(kTokens * kHidden);
    for (float& v : x_) v = normal(rng);
  }

  // Experts 6, 0, 3, 1 and 5 on consecutive runs of rows (ragged), in a
  // task order that is not the placement's.
  std::vector<ExpertTask> Tasks(std::vector<float>* out) const {
    out->assign(kTokens * kHidden, 0.f);
    const backend::Tensor x{const_cast<float*>(x_.data()), kTokens, kHidden};
    const backend::Tensor y{out->data(), kTokens, kHidden};
    const int32_t order[] = {6, 0, 3, 1, 5};
    const int64_t rows[] = {1, 4, 2, 3, 1};
    std::vector<ExpertTask> tasks;
    int64_t first = 0;
    for (int i = 0; i < 5; ++i) {
      tasks.push_back(
          {order[i], x.Rows(first, rows[i]), y.Rows(first, rows[i])});
      first += rows[i];
    }
    return tasks;
  }

  // Runs layer 2 twice (two AllGatherVs) as `rank` of `size` on `comm`;
  // the outputs of the second run.
  // `placement` defaults to contiguous ranges; `replica_rows` receives
  // the executor's count.
  // `transport`: how the rows travel.
  std::vector<float> RunRank(
      ScriptedCommunicator& comm, std::vector<float>* shared_out,
      const std::optional<ExpertPlacement>& placement = std::nullopt,
      uint64_t* replica_rows = nullptr, Transport transport = kHost) {
    ResidentExperts resident(weights_);
    ExpertParallelExecutor executor(
        &comm, transport == kStaged ? nullptr : &comm,
        placement ? *placement
                  : ExpertPlacement::Contiguous(kExperts, comm.size()),
        &resident);
    backend::Backend& backend =
        transport == kHost ? static_cast<backend::Backend&>(backend_) : device_;
    std::vector<float> out;
    shared_out->assign(kTokens * kHidden, 0.f);
    const backend::MlpTask alongside{
        &shared_[0].weights,
        {const_cast<float*>(x_.data()), kTokens, kHidden},
        {shared_out->data(), kTokens, kHidden}};
    for (int run = 0; run < 2; ++run) {
      const std::vector<ExpertTask> tasks = Tasks(&out);
      executor.BeginStep(kTokens);
      EXPECT_TRUE(executor.Run(2, tasks, {&alongside, 1}, backend).ok());
      executor.EndStep();
    }
    if (replica_rows != nullptr) *replica_rows = executor.replica_rows();
    return out;
  }

  std::vector<RandomMlp> experts_, shared_;
  model::ModelWeights weights_;
  std::vector<float> x_;
  backend::CpuBackend backend_{nullptr};
  // Bitwise the CPU backend's, its memory apart from the host's.
  backend::StandInDevice device_{{}};
};

TEST_F(ExpertParallelTest, EveryRankEndsWithEveryOutputBitwise) {
  std::vector<float> want, want_shared(kTokens * kHidden);
  {
    ResidentExperts resident(weights_);
    const std::vector<ExpertTask> tasks = Tasks(&want);
    const backend::MlpTask alongside{&shared_[0].weights,
                                     {x_.data(), kTokens, kHidden},
                                     {want_shared.data(), kTokens, kHidden}};
    ASSERT_TRUE(resident.Run(2, tasks, {&alongside, 1}, backend_).ok());
  }
  for (const auto& [size, transport] :
       std::vector<std::pair<int, Transport>>{{1, kHost},
                                              {2, kHost},
                                              {3, kHost},
                                              {4, kHost},
                                              {9, kHost},
                                              {1, kDevice},
                                              {3, kDevice},
                                              {3, kStaged},
                                              {4, kStaged}}) {
    SCOPED_TRACE(::testing::Message()
                 << size << " ranks, transport " << transport);
    std::vector<ScriptedCommunicator> first, second;
    for (int r = 0; r < size; ++r) first.emplace_back(r, size);
    std::vector<float> shared_out;
    for (ScriptedCommunicator& comm : first) {
      RunRank(comm, &shared_out, std::nullopt, nullptr, transport);
    }
    for (int r = 0; r < size; ++r) {
      ScriptedCommunicator& comm = second.emplace_back(r, size);
      for (int p = 0; p < size; ++p) {
        for (size_t call = 0; call < first[p].sent.size(); ++call) {
          comm.peer_blocks[{static_cast<int>(call), p}] = first[p].sent[call];
        }
      }
      const std::vector<float> got =
          RunRank(comm, &shared_out, std::nullopt, nullptr, transport);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
          << "rank " << r << " of " << size;
      EXPECT_EQ(std::memcmp(shared_out.data(), want_shared.data(),
                            want_shared.size() * 4),
                0)
          << "rank " << r << " of " << size;
      // One AllGatherV per Run; none in a job of one.
      EXPECT_EQ(comm.sent.size(), size == 1 ? 0u : 2u);
    }
    // Every output row crosses once: each rank sends its own rows only.
    for (size_t call = 0; call < first[0].sent.size(); ++call) {
      size_t bytes = 0;
      for (const ScriptedCommunicator& comm : first) {
        bytes += comm.sent[call].size();
      }
      EXPECT_EQ(bytes, want.size() * sizeof(float)) << size << " ranks";
    }
  }
}

// Expert 0 (4 rows) has a replica on each of 3 ranks, expert 3 (2 rows) on
// two: their rows are split in contiguous shares (1, 1, 2 and 1, 1), each
// run by one replica, and every rank ends with every row. The CPU
// products' summation order depends on how many rows a product has, so
// rows agree to float rounding, not bitwise.
TEST_F(ExpertParallelTest, ReplicasRunWholeExpertsBitwiseAsOneProcess) {
  std::vector<float> want, want_shared(kTokens * kHidden);
  {
    ResidentExperts resident(weights_);
    const std::vector<ExpertTask> tasks = Tasks(&want);
    const backend::MlpTask alongside{&shared_[0].weights,
                                     {x_.data(), kTokens, kHidden},
                                     {want_shared.data(), kTokens, kHidden}};
    ASSERT_TRUE(resident.Run(2, tasks, {&alongside, 1}, backend_).ok());
  }
  constexpr int kRanks = 3;
  absl::StatusOr<ExpertPlacement> placement = ExpertPlacement::Balanced(
      std::vector<uint64_t>{90, 1, 1, 50, 1, 1, 1}, kRanks,
      /*extra_replicas=*/3);
  ASSERT_TRUE(placement.ok()) << placement.status();
  ASSERT_EQ(placement->replicas(0).size(), 3u) << placement->Summary();
  ASSERT_EQ(placement->replicas(3).size(), 2u) << placement->Summary();
  std::vector<ScriptedCommunicator> first, second;
  for (int r = 0; r < kRanks; ++r) first.emplace_back(r, kRanks);
  std::vector<float> shared_out;
  for (ScriptedCommunicator& comm : first) {
    RunRank(comm, &shared_out, *placement);
  }
  uint64_t replica_rows = 0;
  for (int r = 0; r < kRanks; ++r) {
    ScriptedCommunicator& comm = second.emplace_back(r, kRanks);
    for (int p = 0; p < kRanks; ++p) {
      for (size_t call = 0; call < first[p].sent.size(); ++call) {
        comm.peer_blocks[{static_cast<int>(call), p}] = first[p].sent[call];
      }
    }
    uint64_t rows = 0;
    const std::vector<float> got =
        RunRank(comm, &shared_out, *placement, &rows);
    replica_rows += rows;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(got[i], want[i]) << "rank " << r << " float " << i;
    }
  }
  // Two runs; per run the rows of each expert that runs away from its
  // owner (Tasks: expert 0 has 4 rows, 3 has 2, the others one or three).
  std::vector<uint64_t> rows_per_expert(kExperts, 0);
  rows_per_expert[6] = 1, rows_per_expert[0] = 4, rows_per_expert[3] = 2;
  rows_per_expert[1] = 3, rows_per_expert[5] = 1;
  const std::vector<int> rank_of = placement->AssignExperts(rows_per_expert);
  uint64_t away = 0;
  for (int e = 0; e < kExperts; ++e) {
    if (rank_of[e] != placement->owner(e)) away += rows_per_expert[e];
  }
  EXPECT_GT(away, 0u) << placement->Summary();
  EXPECT_EQ(replica_rows, 2 * away);
}

TEST_F(ExpertParallelTest, InnerRunsOwnTasksAndEveryAlongside) {
  ScriptedCommunicator comm(1, 3);  // experts 2 and 3 of 7
  RecordingExecutor inner;
  ExpertParallelExecutor executor(
      &comm, &comm, ExpertPlacement::Contiguous(kExperts, 3), &inner);
  std::vector<float> out, shared_out(kTokens * kHidden);
  const backend::MlpTask alongside{&shared_[0].weights,
                                   {x_.data(), kTokens, kHidden},
                                   {shared_out.data(), kTokens, kHidden}};
  EXPECT_TRUE(executor.WantsPredictions());
  ASSERT_TRUE(executor.Run(2, Tasks(&out), {&alongside, 1}, backend_).ok());
  EXPECT_THAT(inner.experts_run_, ElementsAre(3));
  EXPECT_EQ(inner.alongside_run_, 1u);

  Routing predicted;
  predicted.num_tokens = 3;
  predicted.top_k = 2;
  predicted.experts = {2, 0, 5, 4, 3, 2};
  predicted.weights = {.1f, .2f, .3f, .4f, .5f, .6f};
  executor.Predict(2, predicted);
  EXPECT_EQ(inner.predicted_.num_tokens, 3);
  EXPECT_EQ(inner.predicted_.top_k, 1);
  EXPECT_THAT(inner.predicted_.experts, ElementsAre(2, 3, 2));
  EXPECT_THAT(inner.predicted_.weights, ElementsAre(.1f, .5f, .6f));
}

TEST_F(ExpertParallelTest, FailedExchangeNamesLayerAndCollective) {
  ScriptedCommunicator comm(0, 2);
  comm.fail = true;
  ResidentExperts resident(weights_);
  ExpertParallelExecutor executor(
      &comm, &comm, ExpertPlacement::Contiguous(kExperts, 2), &resident);
  std::vector<float> out;
  const absl::Status status = executor.Run(2, Tasks(&out), {}, backend_);
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(status.message(), "layer 2")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "AllGatherV")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "rank 1 did not arrive"))
      << status;
}

TEST_F(ExpertParallelTest, InnerFailureNamesTheRankAndSkipsTheExchange) {
  ScriptedCommunicator comm(1, 2);
  RecordingExecutor inner;
  inner.status_ = absl::UnavailableError("layer 2: reading expert 5");
  ExpertParallelExecutor executor(
      &comm, &comm, ExpertPlacement::Contiguous(kExperts, 2), &inner);
  std::vector<float> out;
  const absl::Status status = executor.Run(2, Tasks(&out), {}, backend_);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "rank 1: layer 2: reading expert 5");
  EXPECT_TRUE(comm.sent.empty());
}

}  // namespace
}  // namespace ringmoe::moe

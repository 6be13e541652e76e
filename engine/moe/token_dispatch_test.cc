// TokenDispatchExecutor in one process (a job of one rank): the
// collectives one MoE layer makes, with what, and that the rows come back
// to their tasks. That the rows reach other ranks' experts and come back
// bitwise is tested under mpirun: all_to_all_benchmark_test and
// tests/golden:expert_parallel_golden.
#include "engine/moe/token_dispatch.h"

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/stand_in_device.h"
#include "engine/moe/expert_placement.h"
#include "engine/parallel/hierarchical_communicator.h"
#include "engine/parallel/metered_communicator.h"
#include "engine/parallel/node_grouping.h"
#include "engine/parallel/single_rank_communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmoe::moe {
namespace {

using ::testing::ElementsAre;

// Forwards to a SingleRankCommunicator and records each call's name and,
// for AllToAllVWithMatrix, the matrix (its units copied).
class RecordingCommunicator : public parallel::SingleRankCommunicator {
 public:
  struct Matrix {
    std::vector<uint64_t> units;
    uint64_t unit_bytes = 0;
    bool transposed = false;
  };

  RecordingCommunicator() : SingleRankCommunicator(absl::Seconds(5)) {}

  absl::Status AllToAll(absl::Span<const uint8_t> send,
                        absl::Span<uint8_t> recv) override {
    calls.push_back("AllToAll");
    return SingleRankCommunicator::AllToAll(send, recv);
  }
  absl::Status AllToAllV(absl::Span<const uint8_t> send,
                         absl::Span<const uint64_t> send_counts,
                         absl::Span<uint8_t> recv,
                         absl::Span<const uint64_t> recv_counts) override {
    calls.push_back("AllToAllV");
    return SingleRankCommunicator::AllToAllV(send, send_counts, recv,
                                             recv_counts);
  }
  absl::Status AllToAllVWithMatrix(
      absl::Span<const uint8_t> send, absl::Span<uint8_t> recv,
      const parallel::CountMatrix& counts) override {
    calls.push_back("AllToAllVWithMatrix");
    matrices.push_back(
        {std::vector<uint64_t>(counts.units.begin(), counts.units.end()),
         counts.unit_bytes, counts.transposed});
    // The default: AllToAllV (recorded too) with the row and column.
    return SingleRankCommunicator::AllToAllVWithMatrix(send, recv, counts);
  }
  absl::Status AllGather(absl::Span<const uint8_t> send,
                         absl::Span<uint8_t> recv) override {
    calls.push_back("AllGather");
    return SingleRankCommunicator::AllGather(send, recv);
  }

  std::vector<std::string> calls;
  std::vector<Matrix> matrices;
};

// out = x + the expert's id, so each row's output shows where it ran.
class AddingExperts : public ExpertExecutor {
 public:
  void BeginStep(int64_t) override {}
  bool WantsPredictions() const override { return false; }
  void Predict(int, const Routing&) override {}
  absl::Status Run(int, absl::Span<const ExpertTask> tasks,
                   absl::Span<const backend::MlpTask>,
                   backend::Backend&) override {
    for (const ExpertTask& t : tasks) {
      for (int64_t i = 0; i < t.x.size(); ++i) {
        t.out.data[i] = t.x.data[i] + static_cast<float>(t.expert);
      }
    }
    return absl::OkStatus();
  }
  void EndStep() override {}
};

constexpr int64_t kHidden = 5;

// Two tasks (experts 2 and 0, 3 and 2 rows) over `x` and `out`.
std::vector<ExpertTask> Tasks(std::vector<float>& x, std::vector<float>& out) {
  x.resize(5 * kHidden);
  out.assign(5 * kHidden, -1.f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  return {{2, {x.data(), 3, kHidden}, {out.data(), 3, kHidden}},
          {0,
           {x.data() + 3 * kHidden, 2, kHidden},
           {out.data() + 3 * kHidden, 2, kHidden}}};
}

void ExpectOutputs(const std::vector<float>& x, const std::vector<float>& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    const float expert = i < 3 * kHidden ? 2.f : 0.f;
    ASSERT_EQ(out[i], x[i] + expert) << "float " << i;
  }
}

TEST(TokenDispatchTest, OneGatherOfRowCountsServesBothExchanges) {
  RecordingCommunicator comm;
  AddingExperts inner;
  backend::CpuBackend backend(nullptr);
  TokenDispatchExecutor executor(
      &comm, &comm, ExpertPlacement::Contiguous(3, 1), &inner, kHidden);
  std::vector<float> x, out;
  const std::vector<ExpertTask> tasks = Tasks(x, out);
  ASSERT_TRUE(executor.Run(/*layer=*/0, tasks, {}, backend).ok());
  ExpectOutputs(x, out);
  // The row counts once, then each exchange with the matrix (which the
  // single rank's default turns into a plain AllToAllV).
  EXPECT_THAT(comm.calls,
              ElementsAre("AllGather", "AllToAllVWithMatrix", "AllToAllV",
                          "AllToAllVWithMatrix", "AllToAllV"));
  ASSERT_EQ(comm.matrices.size(), 2u);
  // Inputs: 5 rows of floats alone (the gathered rows per expert say
  // whose they are).
  EXPECT_THAT(comm.matrices[0].units, ElementsAre(5));
  EXPECT_EQ(comm.matrices[0].unit_bytes, kHidden * sizeof(float));
  EXPECT_FALSE(comm.matrices[0].transposed);
  // Outputs: the same rows back, along the transpose.
  EXPECT_THAT(comm.matrices[1].units, ElementsAre(5));
  EXPECT_EQ(comm.matrices[1].unit_bytes, kHidden * sizeof(float));
  EXPECT_TRUE(comm.matrices[1].transposed);
}

TEST(TokenDispatchTest, AHierarchicalLayerGathersCountsOnce) {
  parallel::SingleRankCommunicator single(absl::Seconds(5));
  parallel::MeteredCommunicator base(&single);
  auto hierarchical = parallel::HierarchicalCommunicator::Create(
      &base, *parallel::NodeGrouping::Consecutive(1, 1));
  ASSERT_TRUE(hierarchical.ok()) << hierarchical.status();
  AddingExperts inner;
  backend::CpuBackend backend(nullptr);
  TokenDispatchExecutor executor(hierarchical->get(), hierarchical->get(),
                                 ExpertPlacement::Contiguous(3, 1), &inner,
                                 kHidden);
  std::vector<float> x, out;
  const std::vector<ExpertTask> tasks = Tasks(x, out);
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_TRUE(executor.Run(layer, tasks, {}, backend).ok());
    ExpectOutputs(x, out);
    // Per layer, of the base: the gather of row counts and 3 phases per
    // exchange; a gather of counts per exchange would make 9.
    EXPECT_EQ(base.traffic().collectives, (layer + 1) * (1u + 2 * 3));
  }
}

// On a device without a communicator of its memory, rows are staged
// through the host on the job's communicator: only the host's collectives
// run, and the rows still come back to their tasks.
TEST(TokenDispatchTest, RowsStagedThroughTheHostWithoutARowsCommunicator) {
  RecordingCommunicator comm;
  AddingExperts inner;
  backend::StandInDevice device({});
  TokenDispatchExecutor executor(&comm, /*rows_communicator=*/nullptr,
                                 ExpertPlacement::Contiguous(3, 1), &inner,
                                 kHidden);
  std::vector<float> x, out;
  const std::vector<ExpertTask> tasks = Tasks(x, out);
  for (int layer = 0; layer < 2; ++layer) {
    ASSERT_TRUE(executor.Run(layer, tasks, {}, device).ok());
    ExpectOutputs(x, out);
  }
  EXPECT_EQ(comm.matrices.size(), 4u);
}

// Rows are packed by expert for their rank, so the inner executor gets
// each expert's rows together whatever the tasks' order, and every row's
// output returns to its own task.
TEST(TokenDispatchTest, InnerGetsEachExpertsRowsTogetherInExpertOrder) {
  RecordingCommunicator comm;
  AddingExperts adding;
  struct Recording : ExpertExecutor {
    explicit Recording(ExpertExecutor* inner) : inner(*inner) {}
    void BeginStep(int64_t) override {}
    bool WantsPredictions() const override { return false; }
    void Predict(int, const Routing&) override {}
    absl::Status Run(int layer, absl::Span<const ExpertTask> tasks,
                     absl::Span<const backend::MlpTask> alongside,
                     backend::Backend& backend) override {
      for (const ExpertTask& t : tasks) {
        experts.push_back(t.expert);
        rows.push_back(t.x.rows);
      }
      return inner.Run(layer, tasks, alongside, backend);
    }
    void EndStep() override {}
    ExpertExecutor& inner;
    std::vector<int32_t> experts;
    std::vector<int64_t> rows;
  } inner(&adding);
  backend::CpuBackend backend(nullptr);
  TokenDispatchExecutor executor(
      &comm, &comm, ExpertPlacement::Contiguous(4, 1), &inner, kHidden);
  // Experts 3, 1, 3, 0 (2, 1, 3, 1 rows), two tasks of expert 3.
  const int32_t expert_of[] = {3, 1, 3, 0};
  const int64_t rows_of[] = {2, 1, 3, 1};
  std::vector<float> x(7 * kHidden), out(7 * kHidden, -1.f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i);
  std::vector<ExpertTask> tasks;
  int64_t first = 0;
  for (int i = 0; i < 4; ++i) {
    tasks.push_back({expert_of[i],
                     {x.data() + first * kHidden, rows_of[i], kHidden},
                     {out.data() + first * kHidden, rows_of[i], kHidden}});
    first += rows_of[i];
  }
  ASSERT_TRUE(executor.Run(0, tasks, {}, backend).ok());
  EXPECT_THAT(inner.experts, ElementsAre(0, 1, 3));
  EXPECT_THAT(inner.rows, ElementsAre(1, 1, 5));
  first = 0;
  for (int i = 0; i < 4; ++i) {
    for (int64_t f = first * kHidden; f < (first + rows_of[i]) * kHidden; ++f) {
      ASSERT_EQ(out[f], x[f] + static_cast<float>(expert_of[i]))
          << "task " << i << " float " << f;
    }
    first += rows_of[i];
  }
}

}  // namespace
}  // namespace ringmoe::moe

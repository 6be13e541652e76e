// The expert rows of TokenDispatchExecutor on each backend the build and
// machine offer, through the transport RowTransportFor picks (NCCL over
// cuda:0's memory, the job's communicator over the stand-in device's) and
// staged through the host: rows packed, exchanged and unpacked where they
// lie come back bitwise as the experts computed them without the executor.
// A job of one rank (NCCL is run at world size 1: one GPU is lent at a
// time); cuda:0 is skipped without a device.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "engine/backend/backend_factory.h"
#include "engine/backend/backend_test_util.h"
#include "engine/model/model_weights.h"
#include "engine/moe/expert_executor.h"
#include "engine/moe/expert_placement.h"
#include "engine/moe/random_mlp.h"
#include "engine/moe/token_dispatch.h"
#include "engine/parallel/single_rank_communicator.h"
#include "gtest/gtest.h"

namespace ringmoe::moe {
namespace {

constexpr int64_t kHidden = 64, kInter = 96, kExperts = 4;

class RowTransportTest : public testing::TestWithParam<std::string> {};

TEST_P(RowTransportTest, DispatchedRowsComeBackAsTheExpertsComputedThem) {
  absl::StatusOr<std::unique_ptr<backend::Backend>> made =
      backend::CreateBackend(GetParam(), nullptr);
  if (!made.ok()) GTEST_SKIP() << made.status();
  backend::Backend& backend = **made;
  parallel::SingleRankCommunicator job(absl::Seconds(30));
  absl::StatusOr<backend::RowTransport> transport =
      backend::RowTransportFor(backend, &job);
  ASSERT_TRUE(transport.ok()) << transport.status();
  if (GetParam() == "standin") {
    EXPECT_EQ(transport->owned, nullptr);
    EXPECT_EQ(transport->communicator, &job);
  } else {
    ASSERT_NE(transport->owned, nullptr);  // NCCL
    EXPECT_EQ(transport->communicator, transport->owned.get());
  }

  std::mt19937 rng(11);
  std::vector<RandomMlp> experts;
  model::ModelWeights weights;
  weights.layers.resize(1);
  for (int e = 0; e < kExperts; ++e) {
    const RandomMlp& mlp = experts.emplace_back(kHidden, kInter, &rng);
    model::MlpWeights uploaded = mlp.weights;
    for (backend::Weight* w : {&uploaded.gate, &uploaded.up, &uploaded.down}) {
      absl::StatusOr<backend::Weight> on_backend = backend.Upload(*w);
      ASSERT_TRUE(on_backend.ok()) << on_backend.status();
      *w = *on_backend;
    }
    weights.layers[0].experts.push_back(uploaded);
  }
  ResidentExperts resident(weights);

  // Experts 3, 0 and 1 on ragged runs of rows, out of expert order.
  const int32_t expert_of[] = {3, 0, 1};
  const int64_t rows_of[] = {2, 3, 4};
  const int64_t rows = 9;
  const std::vector<float> host_x = backend::Random(rows * kHidden, &rng);
  backend::Backend::Buffer x = backend.NewTensor(rows, kHidden);
  backend.CopyFromHost(host_x.data(), x);
  auto tasks_into = [&](const backend::Tensor& out) {
    std::vector<ExpertTask> tasks;
    int64_t first = 0;
    for (int i = 0; i < 3; ++i) {
      tasks.push_back({expert_of[i], x.tensor().Rows(first, rows_of[i]),
                       out.Rows(first, rows_of[i])});
      first += rows_of[i];
    }
    return tasks;
  };
  auto read = [&](const backend::Tensor& t) {
    std::vector<float> host(t.size());
    backend.CopyToHost(t, host.data());
    return host;
  };

  backend::Backend::Buffer want = backend.NewTensor(rows, kHidden);
  ASSERT_TRUE(resident.Run(0, tasks_into(want), {}, backend).ok());
  const std::vector<float> expected = read(want);
  ASSERT_TRUE(backend.TakeError().ok());

  for (parallel::Communicator* rows_communicator :
       {transport->communicator,
        static_cast<parallel::Communicator*>(nullptr)}) {
    SCOPED_TRACE(rows_communicator != nullptr ? "direct" : "staged");
    TokenDispatchExecutor executor(&job, rows_communicator,
                                   ExpertPlacement::Contiguous(kExperts, 1),
                                   &resident, kHidden);
    backend::Backend::Buffer got = backend.NewTensor(rows, kHidden);
    // Twice: the second layer reuses the executor's buffers.
    for (int layer = 0; layer < 2; ++layer) {
      backend.SetZero(got);
      ASSERT_TRUE(executor.Run(0, tasks_into(got), {}, backend).ok());
      const std::vector<float> actual = read(got);
      ASSERT_TRUE(backend.TakeError().ok());
      for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_EQ(actual[i], expected[i]) << "float " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, RowTransportTest,
                         testing::Values("standin", "cuda:0"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           return info.param == "standin"
                                      ? std::string("standin")
                                      : std::string("cuda0");
                         });

}  // namespace
}  // namespace ringmoe::moe

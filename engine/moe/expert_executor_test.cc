// ResidentExperts against Backend::RunMlps (itself tested against a double
// reference in engine/backend): the same bits whichever tasks share a loop
// and however many threads split it.
#include "engine/moe/expert_executor.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/moe/random_mlp.h"
#include "gtest/gtest.h"

namespace ringmoe::moe {
namespace {

TEST(ResidentExpertsTest, SameBitsAsEachExpertAlone) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int64_t hidden = 48, inter = 72;
  std::vector<RandomMlp> experts, shared;
  for (int e = 0; e < 5; ++e) experts.emplace_back(hidden, inter, &rng);
  shared.emplace_back(hidden, inter, &rng);
  model::ModelWeights weights;
  weights.layers.resize(2);
  for (const RandomMlp& e : experts) {
    weights.layers[1].experts.push_back(e.weights);
  }
  std::vector<float> x(9 * hidden);
  for (float& v : x) v = normal(rng);
  // Experts 4, 0 and 2 on rows [0, 2), [2, 7), [7, 9); the shared expert
  // on all 9.
  const int32_t order[] = {4, 0, 2};
  const int64_t begin[] = {0, 2, 7}, end[] = {2, 7, 9};
  std::vector<float> got(9 * hidden), got_shared(9 * hidden);
  const backend::Tensor x_rows{x.data(), 9, hidden};
  const backend::Tensor got_rows{got.data(), 9, hidden};
  std::vector<ExpertTask> tasks;
  for (int i = 0; i < 3; ++i) {
    tasks.push_back({order[i], x_rows.Rows(begin[i], end[i] - begin[i]),
                     got_rows.Rows(begin[i], end[i] - begin[i])});
  }
  const backend::MlpTask alongside{
      &shared[0].weights, x_rows, {got_shared.data(), 9, hidden}};
  ThreadPool pool(2);
  backend::CpuBackend threaded(&pool);
  ResidentExperts executor(weights);
  EXPECT_FALSE(executor.WantsPredictions());
  executor.BeginStep(9);
  ASSERT_TRUE(executor.Run(1, tasks, {&alongside, 1}, threaded).ok());
  executor.EndStep();

  backend::CpuBackend single(nullptr);
  std::vector<float> want(9 * hidden), want_shared(9 * hidden);
  for (int i = 0; i < 3; ++i) {
    const backend::MlpTask alone{
        &experts[order[i]].weights,
        x_rows.Rows(begin[i], end[i] - begin[i]),
        {want.data() + begin[i] * hidden, end[i] - begin[i], hidden}};
    single.RunMlps({&alone, 1});
  }
  const backend::MlpTask shared_alone{
      &shared[0].weights, x_rows, {want_shared.data(), 9, hidden}};
  single.RunMlps({&shared_alone, 1});
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)),
            0);
  EXPECT_EQ(std::memcmp(got_shared.data(), want_shared.data(),
                        want_shared.size() * sizeof(float)),
            0);
}

}  // namespace
}  // namespace ringmoe::moe

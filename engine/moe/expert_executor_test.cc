// RunMlps against a double-precision SiLU-gated MLP on random ragged shapes,
// and ResidentExperts against RunMlps: the same bits whichever tasks share a
// loop and however many threads split it.
#include "engine/moe/expert_executor.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe::moe {
namespace {

struct RandomMlp {
  std::vector<float> gate, up, down;
  model::MlpWeights weights;
  RandomMlp(int64_t hidden, int64_t inter, std::mt19937* rng) {
    std::normal_distribution<float> normal(0.f, 0.2f);
    for (auto* m : {&gate, &up, &down}) {
      m->resize(hidden * inter);
      for (float& w : *m) w = normal(*rng);
    }
    weights.gate = {gate.data(), kernels::WeightType::kF32, inter, hidden};
    weights.up = {up.data(), kernels::WeightType::kF32, inter, hidden};
    weights.down = {down.data(), kernels::WeightType::kF32, hidden, inter};
  }
};

std::vector<double> ReferenceMlp(const RandomMlp& mlp, const float* x,
                                 int64_t n, int64_t hidden, int64_t inter) {
  std::vector<double> out(n * hidden, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> act(inter);
    for (int64_t i = 0; i < inter; ++i) {
      double g = 0, u = 0;
      for (int64_t d = 0; d < hidden; ++d) {
        g += double{mlp.gate[i * hidden + d]} * x[t * hidden + d];
        u += double{mlp.up[i * hidden + d]} * x[t * hidden + d];
      }
      act[i] = g / (1 + std::exp(-g)) * u;
    }
    for (int64_t d = 0; d < hidden; ++d) {
      for (int64_t i = 0; i < inter; ++i) {
        out[t * hidden + d] += double{mlp.down[d * inter + i]} * act[i];
      }
    }
  }
  return out;
}

TEST(RunMlpsTest, MatchesADoubleReferenceOnRaggedShapes) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.f, 1.f);
  ThreadPool pool(3);
  for (int64_t hidden : {8, 40, 67}) {
    const int64_t inter = hidden + 13;
    std::vector<RandomMlp> mlps;
    for (int i = 0; i < 3; ++i) mlps.emplace_back(hidden, inter, &rng);
    const int64_t rows[] = {1, 5, 17};
    std::vector<std::vector<float>> x(3), out(3);
    std::vector<MlpTask> tasks;
    for (int i = 0; i < 3; ++i) {
      x[i].resize(rows[i] * hidden);
      for (float& v : x[i]) v = normal(rng);
      out[i].resize(rows[i] * hidden);
      tasks.push_back({&mlps[i].weights, x[i].data(), rows[i], out[i].data()});
    }
    kernels::ProductWork work;
    RunMlps(tasks, {&pool, &work});
    EXPECT_GT(work.weight_bytes, 0);
    for (int i = 0; i < 3; ++i) {
      const std::vector<double> want =
          ReferenceMlp(mlps[i], x[i].data(), rows[i], hidden, inter);
      for (int64_t j = 0; j < rows[i] * hidden; ++j) {
        EXPECT_NEAR(out[i][j], want[j], 1e-4 * (1 + std::abs(want[j])))
            << "hidden " << hidden << " mlp " << i << " at " << j;
      }
    }
  }
}

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
  std::vector<ExpertTask> tasks;
  for (int i = 0; i < 3; ++i) {
    tasks.push_back({order[i], x.data() + begin[i] * hidden, end[i] - begin[i],
                     got.data() + begin[i] * hidden});
  }
  const MlpTask alongside{&shared[0].weights, x.data(), 9, got_shared.data()};
  ThreadPool pool(2);
  ResidentExperts executor(weights);
  EXPECT_FALSE(executor.WantsPredictions());
  executor.BeginStep(9);
  ASSERT_TRUE(executor.Run(1, tasks, {&alongside, 1}, {&pool, nullptr}).ok());
  executor.EndStep();

  std::vector<float> want(9 * hidden), want_shared(9 * hidden);
  for (int i = 0; i < 3; ++i) {
    const MlpTask alone{&experts[order[i]].weights,
                        x.data() + begin[i] * hidden, end[i] - begin[i],
                        want.data() + begin[i] * hidden};
    RunMlps({&alone, 1}, {});
  }
  const MlpTask shared_alone{&shared[0].weights, x.data(), 9,
                             want_shared.data()};
  RunMlps({&shared_alone, 1}, {});
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)),
            0);
  EXPECT_EQ(std::memcmp(got_shared.data(), want_shared.data(),
                        want_shared.size() * sizeof(float)),
            0);
}

}  // namespace
}  // namespace ringmoe::moe

// Test helper: an expert MLP of float32 weights drawn at random.
#ifndef RINGMOE_ENGINE_MOE_RANDOM_MLP_H_
#define RINGMOE_ENGINE_MOE_RANDOM_MLP_H_

#include <cstdint>
#include <random>
#include <vector>

#include "engine/backend/backend_test_util.h"
#include "engine/model/model_weights.h"

namespace ringmoe::moe {

struct RandomMlp {
  std::vector<float> gate, up, down;
  model::MlpWeights weights;
  RandomMlp(int64_t hidden, int64_t inter, std::mt19937* rng)
      : gate(backend::Random(hidden * inter, rng, 0.2f)),
        up(backend::Random(hidden * inter, rng, 0.2f)),
        down(backend::Random(hidden * inter, rng, 0.2f)) {
    weights.gate = backend::F32Weight(gate, inter, hidden);
    weights.up = backend::F32Weight(up, inter, hidden);
    weights.down = backend::F32Weight(down, hidden, inter);
  }
};

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_RANDOM_MLP_H_

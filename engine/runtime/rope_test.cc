#include "engine/runtime/rope.h"

#include <cmath>

#include "gtest/gtest.h"

namespace ringmoe::runtime {
namespace {

constexpr double kPi = 3.14159265358979323846;

model::ModelSpec Spec(int64_t head_dim, double theta) {
  model::ModelSpec spec;
  spec.head_dim = head_dim;
  spec.rope_theta = theta;
  spec.max_position_embeddings = 4096;
  return spec;
}

TEST(RopeTest, DefaultFrequenciesAndAngles) {
  Rope rope(Spec(10, 10000));
  ASSERT_EQ(rope.inv_freq().size(), 5u);
  for (int j = 0; j < 5; ++j) {
    EXPECT_DOUBLE_EQ(rope.inv_freq()[j], std::pow(10000.0, -2.0 * j / 10));
  }
  float cos[5], sin[5];
  rope.CosSin(37, cos, sin);
  for (int j = 0; j < 5; ++j) {
    EXPECT_FLOAT_EQ(cos[j], std::cos(37 * std::pow(10000.0, -2.0 * j / 10)));
    EXPECT_FLOAT_EQ(sin[j], std::sin(37 * std::pow(10000.0, -2.0 * j / 10)));
  }
}

TEST(RopeTest, LinearDividesEveryFrequency) {
  auto spec = Spec(8, 500000);
  spec.rope_scaling.type = model::RopeScalingType::kLinear;
  spec.rope_scaling.factor = 4;
  Rope rope(spec);
  for (int j = 0; j < 4; ++j) {
    EXPECT_DOUBLE_EQ(rope.inv_freq()[j], std::pow(500000.0, -2.0 * j / 8) / 4);
  }
}

TEST(RopeTest, YarnKeepsHighFrequenciesAndInterpolatesLowOnes) {
  auto spec = Spec(128, 1000000);
  spec.rope_scaling.type = model::RopeScalingType::kYarn;
  spec.rope_scaling.factor = 4;
  spec.rope_scaling.original_max_position_embeddings = 32768;
  Rope rope(spec);
  const auto& f = rope.inv_freq();
  EXPECT_DOUBLE_EQ(f[0], 1.0);                               // extrapolated
  EXPECT_DOUBLE_EQ(f[63], std::pow(1e6, -126.0 / 128) / 4);  // interpolated
  EXPECT_NEAR(rope.attention_factor(), 0.1 * std::log(4.0) + 1.0, 1e-12);
  // The correction range from beta_fast=32, beta_slow=1 (floored/ceiled).
  auto dim_for = [](double rot) {
    return 128 * std::log(32768 / (rot * 2 * kPi)) / (2 * std::log(1e6));
  };
  const double low = std::floor(dim_for(32)), high = std::ceil(dim_for(1));
  for (int j = 0; j < 64; ++j) {
    const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
    const double base = std::pow(1e6, -2.0 * j / 128);
    EXPECT_NEAR(f[j], base / 4 * ramp + base * (1 - ramp), 1e-15) << j;
  }
}

TEST(RopeTest, Llama3SmoothsTheMiddleBand) {
  auto spec = Spec(128, 500000);
  spec.rope_scaling.type = model::RopeScalingType::kLlama3;
  spec.rope_scaling.factor = 8;
  spec.rope_scaling.low_freq_factor = 1;
  spec.rope_scaling.high_freq_factor = 4;
  spec.rope_scaling.original_max_position_embeddings = 8192;
  Rope rope(spec);
  for (int j = 0; j < 64; ++j) {
    const double f = std::pow(500000.0, -2.0 * j / 128);
    const double wavelen = 2 * kPi / f;
    double want = f;
    if (wavelen > 8192) {
      want = f / 8;
    } else if (wavelen >= 8192 / 4.0) {
      const double smooth = (8192 / wavelen - 1) / 3;
      want = (1 - smooth) * f / 8 + smooth * f;
    }
    EXPECT_NEAR(rope.inv_freq()[j], want, 1e-15 + 1e-12 * want) << j;
  }
}

}  // namespace
}  // namespace ringmoe::runtime

#include "engine/runtime/rope.h"

#include <algorithm>
#include <cmath>

namespace ringmoe::runtime {
namespace {

constexpr double kPi = 3.14159265358979323846;

double YarnMscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// The dimension whose wavelength completes `rotations` turns over the
// original context.
double YarnCorrectionDim(double rotations, double dim, double base,
                         double max_positions) {
  return dim * std::log(max_positions / (rotations * 2 * kPi)) /
         (2 * std::log(base));
}

}  // namespace

Rope::Rope(const model::ModelSpec& spec) {
  const int64_t dim = spec.rotary_dim();
  const double base = spec.rope_theta;
  const model::RopeScaling& s = spec.rope_scaling;
  inv_freq_.resize(dim / 2);
  for (int64_t j = 0; j < dim / 2; ++j) {
    inv_freq_[j] = 1.0 / std::pow(base, static_cast<double>(2 * j) / dim);
  }
  switch (s.type) {
    case model::RopeScalingType::kNone:
      break;
    case model::RopeScalingType::kLinear:
      for (double& f : inv_freq_) f /= s.factor;
      break;
    case model::RopeScalingType::kYarn: {
      if (s.attention_factor) {
        attention_factor_ = *s.attention_factor;
      } else if (s.mscale != 0 && s.mscale_all_dim != 0) {
        attention_factor_ = YarnMscale(s.factor, s.mscale) /
                            YarnMscale(s.factor, s.mscale_all_dim);
      } else {
        attention_factor_ = YarnMscale(s.factor, 1.0);
      }
      const double original =
          static_cast<double>(s.original_max_position_embeddings);
      double low = YarnCorrectionDim(s.beta_fast, dim, base, original);
      double high = YarnCorrectionDim(s.beta_slow, dim, base, original);
      if (s.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, static_cast<double>(dim - 1));
      if (low == high) high += 0.001;
      for (int64_t j = 0; j < dim / 2; ++j) {
        const double ramp = std::clamp((j - low) / (high - low), 0.0, 1.0);
        const double extrapolation = 1.0 - ramp;
        const double interpolated = inv_freq_[j] / s.factor;
        inv_freq_[j] =
            interpolated * (1 - extrapolation) + inv_freq_[j] * extrapolation;
      }
      break;
    }
    case model::RopeScalingType::kLlama3: {
      const double old_context =
          static_cast<double>(s.original_max_position_embeddings);
      const double low_wavelen = old_context / s.low_freq_factor;
      const double high_wavelen = old_context / s.high_freq_factor;
      for (double& f : inv_freq_) {
        const double wavelen = 2 * kPi / f;
        if (wavelen > low_wavelen) {
          f /= s.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth = (old_context / wavelen - s.low_freq_factor) /
                                (s.high_freq_factor - s.low_freq_factor);
          f = (1 - smooth) * f / s.factor + smooth * f;
        }
      }
      break;
    }
  }
}

double MlaSoftmaxScale(const model::ModelSpec& spec) {
  double scale = 1.0 / std::sqrt(static_cast<double>(spec.mla->qk_head_dim()));
  const model::RopeScaling& s = spec.rope_scaling;
  if (s.type == model::RopeScalingType::kYarn && s.mscale_all_dim != 0) {
    const double m = YarnMscale(s.factor, s.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

void Rope::CosSin(int64_t position, float* cos, float* sin) const {
  for (size_t j = 0; j < inv_freq_.size(); ++j) {
    const double angle = static_cast<double>(position) * inv_freq_[j];
    cos[j] = static_cast<float>(std::cos(angle) * attention_factor_);
    sin[j] = static_cast<float>(std::sin(angle) * attention_factor_);
  }
}

}  // namespace ringmoe::runtime

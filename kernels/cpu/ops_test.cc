// Each kernel against a scalar double-precision reference on random inputs
// with ragged sizes.
#include "kernels/cpu/ops.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/numeric.h"

namespace ringmoe::kernels {
namespace {

std::vector<float> RandomVector(std::mt19937& rng, int64_t n, float scale = 1.f) {
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

double RelativeError(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got[i])) << "element " << i;
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / norm);
}

TEST(NumericTest, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(F32ToF16(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(NumericTest, F16RoundsToNearestEven) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-70000.f, 70000.f);
  for (int i = 0; i < 100000; ++i) {
    float f = u(rng) * std::pow(2.f, -static_cast<float>(i % 30));
    const uint16_t h = F32ToF16(f);
    const double got = F16ToF32(h);
    // No other half is strictly closer.
    for (int delta : {-1, 1}) {
      const uint16_t other = static_cast<uint16_t>(h + delta);
      const double alt = F16ToF32(other);
      if (std::isnan(alt) || std::isinf(alt) || std::isinf(got)) continue;
      if ((other & 0x7fff) == 0x7fff) continue;
      if (((other ^ h) & 0x8000) != 0) continue;
      EXPECT_LE(std::abs(got - f), std::abs(alt - f)) << f;
    }
  }
}

TEST(NumericTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToF32(0x3f80), 1.0f);
  std::mt19937 rng(3);
  auto values = RandomVector(rng, 10000, 3.f);
  for (float f : values) {
    const uint16_t b = F32ToBf16(f);
    const double got = Bf16ToF32(b);
    EXPECT_LE(std::abs(got - f), std::abs(Bf16ToF32(b + 1) - f));
    EXPECT_LE(std::abs(got - f), std::abs(Bf16ToF32(b - 1) - f));
  }
}

class MatMulTest : public ::testing::TestWithParam<WeightType> {};

TEST_P(MatMulTest, MatchesDoubleReference) {
  std::mt19937 rng(11);
  const WeightType type = GetParam();
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 7, 33}, {3, 65, 31}, {5, 129, 200}, {17, 96, 64}};
  for (const auto& s : shapes) {
    const int64_t n = s[0], rows = s[1], cols = s[2];
    auto x = RandomVector(rng, n * cols);
    auto wf = RandomVector(rng, rows * cols, 0.1f);
    std::vector<uint16_t> w16(wf.size());
    std::vector<double> wd(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) {
      if (type == WeightType::kBF16) {
        w16[i] = F32ToBf16(wf[i]);
        wd[i] = Bf16ToF32(w16[i]);
      } else if (type == WeightType::kF16) {
        w16[i] = F32ToF16(wf[i]);
        wd[i] = F16ToF32(w16[i]);
      } else {
        wd[i] = wf[i];
      }
    }
    Matrix w{type == WeightType::kF32 ? static_cast<const void*>(wf.data()) : w16.data(),
             type, rows, cols};
    std::vector<float> y(n * rows, NAN);
    MatMulTransposed(x.data(), n, w, y.data());
    std::vector<double> want(n * rows);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (int64_t c = 0; c < cols; ++c) acc += double(x[i * cols + c]) * wd[r * cols + c];
        want[i * rows + r] = acc;
      }
    }
    EXPECT_LE(RelativeError(y, want), 1e-6) << n << "x" << rows << "x" << cols;
    std::vector<float> row(cols);
    ReadRow(w, rows - 1, row.data());
    for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(row[c], static_cast<float>(wd[(rows - 1) * cols + c]));
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatMulTest,
                         ::testing::Values(WeightType::kF32, WeightType::kBF16, WeightType::kF16));

TEST(OpsTest, RmsNormAndBias) {
  std::mt19937 rng(5);
  for (int64_t dim : {1, 7, 33, 130}) {
    const int64_t n = 3;
    auto x = RandomVector(rng, n * dim, 0.05f);
    auto w = RandomVector(rng, dim);
    std::vector<float> y(n * dim, NAN);
    RmsNorm(x.data(), w.data(), n, dim, 1e-6f, y.data());
    std::vector<double> want(n * dim);
    for (int64_t i = 0; i < n; ++i) {
      double ss = 0;
      for (int64_t d = 0; d < dim; ++d) ss += double(x[i * dim + d]) * x[i * dim + d];
      const double scale = 1 / std::sqrt(ss / dim + 1e-6);
      for (int64_t d = 0; d < dim; ++d) want[i * dim + d] = x[i * dim + d] * scale * w[d];
    }
    EXPECT_LE(RelativeError(y, want), 1e-6);
    auto bias = RandomVector(rng, dim);
    AddBias(y.data(), n, dim, bias.data());
    for (int64_t i = 0; i < n * dim; ++i) want[i] += bias[i % dim];
    EXPECT_LE(RelativeError(y, want), 1e-6);
  }
}

TEST(OpsTest, RotaryHalfPairsJWithJPlusHalf) {
  std::mt19937 rng(9);
  const int64_t heads = 3, head_dim = 10;
  auto x = RandomVector(rng, heads * head_dim);
  std::vector<float> cos(head_dim / 2), sin(head_dim / 2);
  std::vector<double> angle(head_dim / 2);
  for (int j = 0; j < head_dim / 2; ++j) {
    angle[j] = 17 * std::pow(10000.0, -2.0 * j / head_dim);
    cos[j] = std::cos(angle[j]);
    sin[j] = std::sin(angle[j]);
  }
  auto y = x;
  ApplyRotaryHalf(y.data(), heads, head_dim, cos.data(), sin.data());
  std::vector<double> want(x.size());
  for (int h = 0; h < heads; ++h) {
    for (int j = 0; j < head_dim / 2; ++j) {
      const double a = x[h * head_dim + j], b = x[h * head_dim + j + head_dim / 2];
      want[h * head_dim + j] = a * std::cos(angle[j]) - b * std::sin(angle[j]);
      want[h * head_dim + j + head_dim / 2] = b * std::cos(angle[j]) + a * std::sin(angle[j]);
    }
  }
  EXPECT_LE(RelativeError(y, want), 1e-6);
}

TEST(OpsTest, SoftmaxSiluMulTopK) {
  std::mt19937 rng(13);
  for (int64_t n : {1, 5, 37}) {
    auto x = RandomVector(rng, n, 4.f);
    auto s = x;
    Softmax(s.data(), n);
    double z = 0;
    for (float v : x) z += std::exp(double(v));
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = std::exp(double(x[i])) / z;
    EXPECT_LE(RelativeError(s, want), 1e-6);

    auto up = RandomVector(rng, n);
    std::vector<float> out(n, NAN);
    SiluMul(x.data(), up.data(), n, out.data());
    for (int64_t i = 0; i < n; ++i) want[i] = x[i] / (1 + std::exp(-double(x[i]))) * up[i];
    EXPECT_LE(RelativeError(out, want), 1e-6);

    const int k = std::min<int>(3, n);
    std::vector<int32_t> idx(k, -1);
    TopK(x.data(), n, k, idx.data());
    std::vector<int32_t> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](int a, int b) { return x[a] > x[b]; });
    for (int i = 0; i < k; ++i) EXPECT_EQ(idx[i], order[i]);
  }
  const float tied[] = {1.f, 3.f, 3.f, 2.f};
  int32_t idx[2];
  TopK(tied, 4, 2, idx);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 2);
}

TEST(OpsTest, AttentionOverBlocksMatchesReference) {
  std::mt19937 rng(17);
  const int64_t heads = 6, kv_heads = 2, head_dim = 12, block = 5;
  const int64_t cases[][2] = {{0, 1}, {0, 4}, {0, 5}, {0, 23}, {7, 23}, {22, 23}};
  for (const auto& c : cases) {
    const int64_t first = c[0], positions = c[1];
    const int64_t width = kv_heads * head_dim;
    const int64_t num_blocks = (positions + block - 1) / block;
    std::vector<std::vector<float>> kb, vb;
    std::vector<const float*> kp, vp;
    for (int64_t b = 0; b < num_blocks; ++b) {
      kb.push_back(RandomVector(rng, block * width));
      vb.push_back(RandomVector(rng, block * width));
    }
    // Blocks in a shuffled order, as a block table would give them.
    std::vector<int> perm(num_blocks);
    for (int i = 0; i < num_blocks; ++i) perm[i] = num_blocks - 1 - i;
    for (int i : perm) {
      kp.push_back(kb[i].data());
      vp.push_back(vb[i].data());
    }
    auto q = RandomVector(rng, heads * head_dim);
    std::vector<float> out(heads * head_dim, NAN);
    const float scale = 1.f / std::sqrt(float(head_dim));
    AttendOneQuery(q.data(), heads, kv_heads, head_dim, {kp.data(), vp.data(), block},
                   first, positions, scale, out.data());
    std::vector<double> want(out.size(), 0);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / kv_heads);
      std::vector<double> s(positions, -1e300);
      double mx = -1e300, z = 0;
      for (int64_t p = first; p < positions; ++p) {
        const float* k = kp[p / block] + (p % block) * width + g * head_dim;
        double dot = 0;
        for (int d = 0; d < head_dim; ++d) dot += double(q[h * head_dim + d]) * k[d];
        s[p] = dot / std::sqrt(double(head_dim));
        mx = std::max(mx, s[p]);
      }
      for (auto& v : s) z += (v = std::exp(v - mx));
      for (int64_t p = first; p < positions; ++p) {
        const float* v = vp[p / block] + (p % block) * width + g * head_dim;
        for (int d = 0; d < head_dim; ++d) want[h * head_dim + d] += s[p] / z * v[d];
      }
    }
    EXPECT_LE(RelativeError(out, want), 1e-6) << first << ".." << positions;
  }
}

}  // namespace
}  // namespace ringmoe::kernels

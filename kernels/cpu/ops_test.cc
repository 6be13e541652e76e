// Each kernel against a scalar double-precision reference on random inputs
// with ragged sizes.
#include "kernels/cpu/ops.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/numeric.h"

namespace ringmoe::kernels {
namespace {

std::vector<float> RandomVector(std::mt19937& rng, int64_t n,
                                float scale = 1.f) {
  std::normal_distribution<float> normal(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

double RelativeError(const std::vector<float>& got,
                     const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(std::isfinite(got[i])) << "element " << i;
    err += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / norm);
}

// Bound on the relative error of float32 dot products of length `cols`
// against the double-precision reference: rounding errors of a float sum
// grow like the square root of its length.
double ProductTolerance(int64_t cols) {
  return 2e-6 * std::sqrt(std::max<double>(1.0, cols / 1024.0));
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

TEST(NumericTest, Mxfp4CodesAndExponents) {
  const int twice[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                         0, -1, -2, -3, -4, -6, -8, -12};
  for (int n = 0; n < 16; ++n) EXPECT_EQ(E2m1TimesTwo(n), twice[n]) << n;
  EXPECT_EQ(E8m0ToF32(127), 1.f);
  EXPECT_EQ(E8m0ToF32(0), std::ldexp(1.f, -127));
  EXPECT_EQ(E8m0ToF32(254), std::ldexp(1.f, 127));
}

TEST(NumericTest, Fp8E4M3DecodesEveryCode) {
  EXPECT_EQ(Fp8E4M3ToF32(0x00), 0.f);
  EXPECT_TRUE(std::signbit(Fp8E4M3ToF32(0x80)));
  EXPECT_EQ(Fp8E4M3ToF32(0x01), std::ldexp(1.f, -9));  // smallest subnormal
  EXPECT_EQ(Fp8E4M3ToF32(0x07), 7 * std::ldexp(1.f, -9));
  EXPECT_EQ(Fp8E4M3ToF32(0x08), std::ldexp(1.f, -6));  // smallest normal
  EXPECT_EQ(Fp8E4M3ToF32(0x38), 1.f);
  EXPECT_EQ(Fp8E4M3ToF32(0x7e), 448.f);
  EXPECT_EQ(Fp8E4M3ToF32(0xfe), -448.f);
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0x7f)));
  EXPECT_TRUE(std::isnan(Fp8E4M3ToF32(0xff)));
  // Increasing over the positive codes.
  for (int c = 1; c < 0x7f; ++c) {
    EXPECT_LT(Fp8E4M3ToF32(c - 1), Fp8E4M3ToF32(c)) << c;
    EXPECT_EQ(Fp8E4M3ToF32(c | 0x80), -Fp8E4M3ToF32(c)) << c;
  }
}

// Every finite fp8 code, subnormals and both zeros included, through the
// products of one to three activation rows (float32 and bf16 activations) (rows
// short enough to stream, with and without whole chunks of 64 columns, and long
// enough for tiles of four; over two blocks of 128 rows): each weight row
// repeats one code, the activations are multiples of 1/4 and the block scale a
// power of two, so every partial sum is exact and the products must equal the
// decoded code times the activations' sum to the last bit.
TEST(MatMulFp8Test, EveryCodeExactlyAtFewRows) {
  std::vector<uint8_t> codes;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) != 0x7f) codes.push_back(static_cast<uint8_t>(c));
  }
  const int64_t rows = static_cast<int64_t>(codes.size());
  for (int64_t cols : {40, 200, 8200}) {
    std::vector<uint8_t> bytes(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      std::fill(bytes.begin() + r * cols, bytes.begin() + (r + 1) * cols,
                codes[r]);
    }
    for (float scale : {1.f, std::ldexp(1.f, -10)}) {
      Matrix w{bytes.data(), WeightType::kFp8E4M3, rows, cols};
      w.block_rows = w.block_cols = 128;
      std::vector<float> block_scales(
          ((rows + 127) / 128) * ((cols + 127) / 128), scale);
      w.block_scales = block_scales.data();
      for (int64_t n = 1; n <= 3; ++n) {
        std::vector<float> x(n * cols);
        std::vector<double> sums(n, 0.0);
        for (int64_t j = 0; j < n; ++j) {
          for (int64_t k = 0; k < cols; ++k) {
            x[j * cols + k] = 0.25f * static_cast<float>((k + j) % 5 - 1 + j);
            sums[j] += x[j * cols + k];
          }
        }
        // Under kBf16 one row takes the bf16 products where the CPU has
        // them (these activations and scales round to themselves).
        for (ActivationPrecision precision :
             {ActivationPrecision::kF32, ActivationPrecision::kBf16}) {
          std::vector<float> y(n * rows);
          MatMulBatch({{x.data(), n, w, y.data(), precision}}, nullptr);
          for (int64_t j = 0; j < n; ++j) {
            for (int64_t r = 0; r < rows; ++r) {
              const float expected = static_cast<float>(
                  double(Fp8E4M3ToF32(codes[r])) * scale * sums[j]);
              ASSERT_EQ(y[j * rows + r], expected)
                  << "code " << int(codes[r]) << " cols " << cols << " n " << n
                  << " scale " << scale << " precision "
                  << ActivationPrecisionName(precision);
            }
          }
        }
      }
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

// The best path this CPU offers, as the products and the other kernels
// take it. Under tests/isa's emulated CPUs it must be the one the CPU model
// has: a model that failed to expose a feature would otherwise run one path
// twice and pass.
TEST(KernelPathTest, IsTheOneTheCpuOffers) {
  const KernelPath best = ProductPath(WeightType::kInt8, 1);
  EXPECT_EQ(VectorPath(),
            best == KernelPath::kAvx512 ? KernelPath::kAvx2 : best);
  for (WeightType t : {WeightType::kF32, WeightType::kBF16, WeightType::kF16}) {
    EXPECT_EQ(ProductPath(t, 1), VectorPath()) << WeightTypeName(t);
  }
  // bf16's products of 2 to DirectProductRows rows have an AVX-512 kernel.
  const int64_t direct = DirectProductRows(WeightType::kBF16);
  for (int64_t n : {int64_t{2}, int64_t{9}, direct}) {
    EXPECT_EQ(ProductPath(WeightType::kBF16, n), best) << n;
    EXPECT_EQ(ProductPath(WeightType::kF16, n), VectorPath()) << n;
  }
  EXPECT_EQ(ProductPath(WeightType::kBF16, direct + 1), VectorPath());
  EXPECT_EQ(ProductPath(WeightType::kFp8E4M3, 2), VectorPath());
  EXPECT_EQ(ProductPath(WeightType::kFp8E4M3, 1), best);
  // int8's and int4's products of up to a batched decode's 8 rows.
  for (WeightType t : {WeightType::kInt8, WeightType::kInt4}) {
    for (int64_t n : {1, 2, 8}) {
      EXPECT_EQ(ProductPath(t, n), best) << WeightTypeName(t) << " " << n;
    }
    EXPECT_EQ(ProductPath(t, 9), VectorPath()) << WeightTypeName(t);
  }
  // mxfp4's few-row products take the one-row path's kernel.
  const int64_t few = DirectProductRows(WeightType::kMxfp4);
  for (int64_t n : {int64_t{1}, int64_t{2}, few}) {
    EXPECT_EQ(ProductPath(WeightType::kMxfp4, n), best) << n;
  }
  EXPECT_EQ(ProductPath(WeightType::kMxfp4, few + 1), VectorPath());
  const char* expected = std::getenv("RINGMOE_EXPECT_KERNEL_PATH");
  if (expected == nullptr || *expected == '\0') {
    GTEST_SKIP() << "best path here: " << KernelPathName(best)
                 << " (RINGMOE_EXPECT_KERNEL_PATH is not set)";
  }
  EXPECT_STREQ(KernelPathName(best), expected);
}

// Both code paths on this machine: AVX2 (when the CPU has it) and scalar.
class PathTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { SetForceScalar(GetParam()); }
  void TearDown() override { SetForceScalar(false); }
};

// A weight matrix in `type` built from random values, and its weights as
// doubles decoded independently of the kernels' own readers.
struct TestMatrix {
  Matrix w;
  std::vector<double> dequantized;  // [rows, cols]
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<uint8_t> bytes;
  std::vector<uint16_t> scales;  // f16
  std::vector<float> block_scales;
  std::vector<uint8_t> exponents;  // mxfp4
};

TestMatrix MakeMatrix(std::mt19937& rng, WeightType type, int64_t rows,
                      int64_t cols, int32_t group = 32) {
  TestMatrix m;
  m.f32 = RandomVector(rng, rows * cols, 0.1f);
  const Matrix src{m.f32.data(), WeightType::kF32, rows, cols};
  m.dequantized.resize(rows * cols);
  switch (type) {
    case WeightType::kF32:
      m.w = src;
      for (int64_t i = 0; i < rows * cols; ++i) m.dequantized[i] = m.f32[i];
      break;
    case WeightType::kBF16:
    case WeightType::kF16:
      m.f16.resize(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) {
        m.f16[i] = type == WeightType::kBF16 ? F32ToBf16(m.f32[i])
                                             : F32ToF16(m.f32[i]);
        m.dequantized[i] = type == WeightType::kBF16 ? Bf16ToF32(m.f16[i])
                                                     : F16ToF32(m.f16[i]);
      }
      m.w = {m.f16.data(), type, rows, cols};
      break;
    case WeightType::kInt8:
    case WeightType::kInt4: {
      m.bytes.resize(QuantizedDataBytes(type, rows, cols, group));
      m.scales.resize(QuantizedScaleCount(type, rows, cols, group));
      m.w = QuantizeMatrix(src, type, group, m.bytes.data(), m.scales.data());
      const int64_t groups = (cols + group - 1) / group;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          double q;
          if (type == WeightType::kInt8) {
            q = static_cast<int8_t>(m.bytes[r * groups * group + c]);
          } else {
            const uint8_t b = m.bytes[r * groups * group / 2 + c / 2];
            q = ((c % 2 == 1) ? b >> 4 : b & 15) - 8.0;
          }
          m.dequantized[r * cols + c] =
              q * double(F16ToF32(m.scales[r * groups + c / group]));
        }
      }
      break;
    }
    case WeightType::kFp8E4M3: {
      // Random codes (NaN ones excluded) and block scales that differ by
      // up to 2^4 between neighbours; `group` picks the block shape:
      // 32 x 32 (DeepSeek-V3's 128 x 128 scaled down), 256 rows x 8 (the
      // narrowest columns the loader accepts) or 16 rows x 64.
      m.w = {nullptr, type, rows, cols};
      m.w.block_rows = group == 32 ? 32 : group == 8 ? 256 : 16;
      m.w.block_cols = group;
      const int64_t scale_cols = (cols + m.w.block_cols - 1) / m.w.block_cols;
      m.block_scales.resize((rows + m.w.block_rows - 1) / m.w.block_rows *
                            scale_cols);
      std::uniform_int_distribution<int> exponent(-14, -10), code(0, 254);
      for (float& b : m.block_scales) {
        b = std::ldexp(1.f + code(rng) / 256.f, exponent(rng));
      }
      m.bytes.resize(rows * cols);
      for (int64_t i = 0; i < rows * cols; ++i) {
        int c = code(rng);
        if ((c & 0x7f) == 0x7f) c = 0;
        m.bytes[i] = static_cast<uint8_t>(c);
        // Decoded from the bit fields, independently of numeric.h.
        const int e = (c >> 3) & 15, mant = c & 7;
        const double v =
            e == 0 ? std::ldexp(mant, -9) : std::ldexp(1.0 + mant / 8.0, e - 7);
        m.dequantized[i] =
            (c & 0x80 ? -v : v) *
            m.block_scales[(i / cols) / m.w.block_rows * scale_cols +
                           (i % cols) / m.w.block_cols];
      }
      m.w.data = m.bytes.data();
      m.w.block_scales = m.block_scales.data();
      break;
    }
    case WeightType::kMxfp4: {
      // Random codes, padding included (its activations are zero), and
      // exponents 2^-8 to 2^-2.
      const int64_t blocks = (cols + 31) / 32;
      m.w = {nullptr, type, rows, cols};
      m.bytes.resize(rows * blocks * 16);
      m.exponents.resize(rows * blocks);
      std::uniform_int_distribution<int> byte(0, 255), exponent(119, 125);
      for (uint8_t& b : m.bytes) b = static_cast<uint8_t>(byte(rng));
      for (uint8_t& e : m.exponents) e = static_cast<uint8_t>(exponent(rng));
      // Decoded from the bit fields, independently of numeric.h.
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          const uint8_t b = m.bytes[r * blocks * 16 + c / 2];
          const int code = (c & 1) ? b >> 4 : b & 15;
          const int e = (code >> 1) & 3, mant = code & 1;
          const double v =
              e == 0 ? 0.5 * mant : std::ldexp(1.0 + mant / 2.0, e - 1);
          m.dequantized[r * cols + c] =
              (code & 8 ? -v : v) *
              std::ldexp(1.0, m.exponents[r * blocks + c / 32] - 127);
        }
      }
      m.w.data = m.bytes.data();
      m.w.exponents = m.exponents.data();
      break;
    }
  }
  return m;
}

template <typename T>
std::vector<double> ReferenceProduct(const std::vector<T>& x, int64_t n,
                                     const TestMatrix& m) {
  const int64_t rows = m.w.rows, cols = m.w.cols;
  std::vector<double> want(n * rows);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c)
        acc += double(x[i * cols + c]) * m.dequantized[r * cols + c];
      want[i * rows + r] = acc;
    }
  }
  return want;
}

// The activations as the AVX2 int8 and int4 paths for at most
// DirectProductRows rows see
// them (see MatMulTransposed): block scale times an integer in
// [-levels, levels].
std::vector<double> QuantizedActivations(const std::vector<float>& x, int64_t n,
                                         int64_t cols, float levels) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t b = 0; b < cols; b += 32) {
      const int64_t end = std::min(cols, b + 32);
      float max_abs = 0.f;
      for (int64_t c = b; c < end; ++c)
        max_abs = std::max(max_abs, std::abs(x[i * cols + c]));
      const float inv = max_abs > 0 ? levels / max_abs : 0.f;
      const float scale = max_abs / levels;
      for (int64_t c = b; c < end; ++c) {
        const float q = std::nearbyint(x[i * cols + c] * inv);
        EXPECT_LE(std::abs(q), levels);
        out[i * cols + c] = double(scale) * q;
      }
    }
  }
  return out;
}

// The activations as the mxfp4 products for one row see them: per block of
// 32, s * (q1 + q2 / 256 + q3 / 65536) with s = max|x| / 127, q1 = round(x /
// s), q2 and q3 the rounded remainders (as QuantizeMxfp4Activations in
// isa.h); with `levels` 2, s * (q1 + q2 / 256).
std::vector<double> LevelActivations(const std::vector<float>& x, int64_t n,
                                     int64_t cols, int levels = 3) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x.data() + i * cols;
    for (int64_t b = 0; b < cols; b += 32) {
      const int64_t end = std::min(cols, b + 32);
      float max_abs = 0.f;
      for (int64_t c = b; c < end; ++c)
        max_abs = std::max(max_abs, std::abs(row[c]));
      const float inv = max_abs > 0 ? 127.f / max_abs : 0.f;
      for (int64_t c = b; c < end; ++c) {
        const float t = row[c] * inv;
        float q1 = std::nearbyint(t);
        const float r = (t - q1) * 256.f;
        float q2 = std::nearbyint(r);
        const float q3 = levels == 3
                             ? std::min(std::nearbyint((r - q2) * 256.f), 127.f)
                             : 0.f;
        if (q2 == 128.f) {
          q1 += 1;
          q2 -= 256;
        }
        EXPECT_LE(std::abs(q1), 127.f);
        EXPECT_GE(q3, -128.f);
        out[i * cols + c] =
            double(max_abs / 127.f) * (q1 + q2 / 256.0 + q3 / 65536.0);
      }
    }
  }
  return out;
}

// The reference the product of x (n rows) with m must match: exact
// activations, or for int8 and int4 on the AVX2 path with n <=
// DirectProductRows and mxfp4 with n <= Mxfp4IntegerProductRows() the
// quantized ones.
std::vector<double> ExpectedProduct(const std::vector<float>& x, int64_t n,
                                    const TestMatrix& m) {
  if (m.w.type == WeightType::kMxfp4 && n <= Mxfp4IntegerProductRows())
    return ReferenceProduct(LevelActivations(x, n, m.w.cols), n, m);
  if (n <= DirectProductRows(m.w.type) && UseAvx2()) {
    if (m.w.type == WeightType::kInt8)
      return ReferenceProduct(QuantizedActivations(x, n, m.w.cols, 32767.f), n,
                              m);
    if (m.w.type == WeightType::kInt4)
      return ReferenceProduct(QuantizedActivations(x, n, m.w.cols, 127.f), n,
                              m);
  }
  return ReferenceProduct(x, n, m);
}

class MatMulTest
    : public ::testing::TestWithParam<std::tuple<WeightType, bool>> {
 protected:
  void SetUp() override { SetForceScalar(std::get<1>(GetParam())); }
  void TearDown() override { SetForceScalar(false); }
};

TEST_P(MatMulTest, MatchesDoubleReference) {
  std::mt19937 rng(11);
  const WeightType type = std::get<0>(GetParam());
  // Ragged everywhere: rows not multiples of 4 or 8, columns not multiples
  // of 8 or the int4 group, activation counts on both sides of the tiles,
  // one activation row longer than fits beside streaming weights in an L1
  // of up to 64 KiB (float32 past 11k columns, int16 and int8 chunks past
  // 22k); products of many rows over several blocks of columns, with last
  // groups of activation rows of 1-8 and 9-16, and over more weight rows
  // than one widened block holds.
  const int64_t shapes[][3] = {{1, 1, 1},     {1, 7, 33},     {2, 13, 45},
                               {3, 65, 31},   {4, 9, 70},     {5, 129, 200},
                               {7, 37, 95},   {17, 96, 64},   {1, 203, 331},
                               {64, 45, 103}, {100, 21, 77},  {1, 11, 12301},
                               {1, 6, 24611}, {37, 50, 700},  {9, 31, 1030},
                               {24, 19, 300}, {200, 13, 520}, {6, 1500, 90}};
  for (const auto& s : shapes) {
    const int64_t n = s[0], rows = s[1], cols = s[2];
    for (int32_t group : {32, 64}) {
      if (group == 64 && type != WeightType::kInt8 &&
          type != WeightType::kInt4 && type != WeightType::kFp8E4M3)
        continue;
      const TestMatrix m = MakeMatrix(rng, type, rows, cols, group);
      auto x = RandomVector(rng, n * cols);
      std::vector<float> y(n * rows, NAN);
      MatMulTransposed(x.data(), n, m.w, y.data());
      EXPECT_LE(RelativeError(y, ExpectedProduct(x, n, m)),
                ProductTolerance(cols))
          << n << "x" << rows << "x" << cols << " group " << group;
      std::vector<float> row(cols);
      ReadRow(m.w, rows - 1, row.data());
      for (int64_t c = 0; c < cols; ++c) {
        EXPECT_FLOAT_EQ(
            row[c], static_cast<float>(m.dequantized[(rows - 1) * cols + c]));
      }
    }
  }
}

// AccumulateRowProducts of random c[n, ldc] against rows [rb, re) of m into
// random y rows of stride ldy, against y[i, :] + sum over those rows r of
// c[i, r - rb] * w[r, :] in double.
void ExpectAccumulatedRowsMatch(std::mt19937& rng, const TestMatrix& m,
                                int64_t n, int64_t rb, int64_t re, int64_t ldc,
                                int64_t ldy) {
  const int64_t cols = m.w.cols;
  const auto c = RandomVector(rng, n * ldc);
  auto y = RandomVector(rng, n * ldy);
  std::vector<double> want(y.begin(), y.end());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = rb; r < re; ++r) {
      for (int64_t k = 0; k < cols; ++k) {
        want[i * ldy + k] +=
            double(c[i * ldc + r - rb]) * m.dequantized[r * cols + k];
      }
    }
  }
  AccumulateRowProducts(c.data(), ldc, n, m.w, rb, re, y.data(), ldy);
  EXPECT_LE(RelativeError(y, want), ProductTolerance(re - rb) * 4)
      << n << "x" << m.w.rows << "x" << cols << " rows [" << rb << ", " << re
      << ")";
}

// Row ranges: the transposed product for some output columns only, and the
// untransposed product accumulated into strided outputs (MLA's per-head
// absorbed projections).
TEST_P(MatMulTest, RowRangesMatchReference) {
  std::mt19937 rng(41);
  const WeightType type = std::get<0>(GetParam());
  const int64_t shapes[][4] = {// n, rows, cols, row_begin
                               {1, 40, 33, 8},
                               {3, 64, 96, 17},
                               {5, 32, 7, 0},
                               {2, 96, 520, 40}};
  for (const auto& s : shapes) {
    const int64_t n = s[0], rows = s[1], cols = s[2], rb = s[3];
    const int64_t re = rows - 3;
    const TestMatrix m = MakeMatrix(rng, type, rows, cols, 32);
    const auto x = RandomVector(rng, n * cols);
    std::vector<float> y(n * rows, 7.f);
    MatMulTransposedRows(x.data(), n, m.w, rb, re, y.data());
    const std::vector<double> full = ExpectedProduct(x, n, m);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < rows; ++r) {
        if (r < rb || r >= re) {
          EXPECT_EQ(y[i * rows + r], 7.f);
          continue;
        }
        EXPECT_NEAR(y[i * rows + r], full[i * rows + r],
                    1e-5 * (1 + std::abs(full[i * rows + r])))
            << n << "x" << rows << "x" << cols << " " << i << "," << r;
      }
    }
    // c against rows [rb, re), into y rows of stride cols + 5.
    ExpectAccumulatedRowsMatch(rng, m, n, rb, re, re - rb + 2, cols + 5);
  }
}

// fp8 accumulated over rows sums a block of rows before its scales: blocks
// of 256 rows (cut in several sums) and of 8 columns (a scale per 8 in a
// chunk of 32), against the double reference.
TEST(AccumulateRowProductsTest, Fp8LongRowBlocksAndNarrowColumnBlocks) {
  std::mt19937 rng(43);
  const int64_t rows = 600, cols = 83, rb = 5, re = 590, n = 2;
  const TestMatrix m = MakeMatrix(rng, WeightType::kFp8E4M3, rows, cols, 8);
  ExpectAccumulatedRowsMatch(rng, m, n, rb, re, re - rb + 1, cols + 3);
}

TEST_P(MatMulTest, BatchOnThreadPoolMatchesReference) {
  std::mt19937 rng(23);
  const WeightType type = std::get<0>(GetParam());
  ThreadPool pool(3);
  // The last two are large enough to be cut into slices of several sizes.
  const int64_t shapes[][3] = {
      {1, 300, 77}, {2, 41, 130}, {9, 157, 65}, {1, 1003, 517}, {3, 619, 301}};
  std::vector<TestMatrix> mats;
  std::vector<std::vector<float>> xs, ys;
  for (const auto& s : shapes) {
    mats.push_back(MakeMatrix(rng, type, s[1], s[2], s[1] % 2 ? 64 : 32));
    xs.push_back(RandomVector(rng, s[0] * s[2]));
    ys.emplace_back(s[0] * s[1], NAN);
  }
  std::vector<MatMulJob> jobs;
  for (size_t i = 0; i < mats.size(); ++i) {
    jobs.push_back({xs[i].data(), shapes[i][0], mats[i].w, ys[i].data()});
  }
  MatMulBatch(jobs, &pool);
  for (size_t i = 0; i < mats.size(); ++i) {
    EXPECT_LE(
        RelativeError(ys[i], ExpectedProduct(xs[i], shapes[i][0], mats[i])),
        2e-6);
  }
}

// Prefetching in software or not moves no result: a matrix in three streams
// and one in six (activations longer than L1 keeps) against one activation row,
// bitwise the same either way.
TEST_P(MatMulTest, SameUnderEitherWeightPrefetch) {
  std::mt19937 rng(29);
  const WeightType type = std::get<0>(GetParam());
  const WeightPrefetch before = GetWeightPrefetch(type);
  for (const int64_t cols : {517, 9000}) {
    const TestMatrix m = MakeMatrix(rng, type, 203, cols);
    const std::vector<float> x = RandomVector(rng, cols);
    std::vector<float> y[2];
    for (int choice = 0; choice < 2; ++choice) {
      SetWeightPrefetch(type, static_cast<WeightPrefetch>(choice));
      y[choice].assign(m.w.rows, NAN);
      MatMulTransposed(x.data(), 1, m.w, y[choice].data());
    }
    EXPECT_EQ(y[0], y[1]) << cols << " columns";
  }
  SetWeightPrefetch(type, before);
}

// The thread pool cuts a product's rows into ranges of multiples of 8
// rows, differently for every thread count and load: a row's result must
// not depend on the range it fell in (one activation row, rows in three or
// in six streams), or generation would vary with the machine's busyness.
TEST_P(MatMulTest, OneRowSameWhateverRangeHoldsIt) {
  std::mt19937 rng(37);
  const WeightType type = std::get<0>(GetParam());
  for (const int64_t cols : {517, 1024, 9000}) {
    const TestMatrix m = MakeMatrix(rng, type, 203, cols);
    const std::vector<float> x = RandomVector(rng, cols);
    std::vector<float> whole(m.w.rows, NAN);
    MatMulTransposedRows(x.data(), 1, m.w, 0, m.w.rows, whole.data());
    for (const int64_t step : {8, 16, 24, 56, 96}) {
      std::vector<float> cut(m.w.rows, NAN);
      for (int64_t rb = 0; rb < m.w.rows; rb += step) {
        MatMulTransposedRows(x.data(), 1, m.w, rb,
                             std::min<int64_t>(m.w.rows, rb + step),
                             cut.data());
      }
      EXPECT_EQ(cut, whole) << cols << " columns, ranges of " << step;
    }
  }
}

// Copies that each end where an inaccessible page begins, unmapped with
// this object.
class GuardedCopies {
 public:
  GuardedCopies() = default;
  GuardedCopies(const GuardedCopies&) = delete;
  GuardedCopies& operator=(const GuardedCopies&) = delete;
  ~GuardedCopies() {
    for (const auto& [base, size] : mappings_) munmap(base, size);
  }

  // The first `count` values of `src`, copied so that the last one is the
  // mapping's last accessible value.
  template <typename T>
  const T* Copy(const T* src, int64_t count) {
    const int64_t bytes = count * static_cast<int64_t>(sizeof(T));
    const int64_t page = sysconf(_SC_PAGESIZE);
    const int64_t size = (bytes + page - 1) / page * page + page;
    void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
      ADD_FAILURE() << "cannot map " << size << " bytes";
      std::abort();
    }
    mappings_.emplace_back(base, size);
    char* guard = static_cast<char*>(base) + size - page;
    EXPECT_EQ(mprotect(guard, page, PROT_NONE), 0);
    std::memcpy(guard - bytes, src, bytes);
    return reinterpret_cast<const T*>(guard - bytes);
  }

 private:
  std::vector<std::pair<void*, int64_t>> mappings_;
};

// A matrix may end where its memory does (the last tensors of a mapped
// checkpoint): its data, group scales, block scales and exponents each end
// at an inaccessible page here, and products of every row count the
// kernels tile differently (one row's streams, few-row tiles, the blocked
// path's groups of 16 and of 8), over every count of weight rows left after
// the full tiles, over one and two blocks of columns, and under each
// activation precision, read none of it; nor does the untransposed product
// (AccumulateRowProducts). On machines with a 512 KiB L2 (Zen 2 and 3), 600
// rows also end a widened block of the blocked path (252 rows) within a
// tile. The float results match the reference; the others' precision has
// its own tests, here they must only be near it.
TEST_P(MatMulTest, ReadsNothingPastTheLastRow) {
  std::mt19937 rng(53);
  const WeightType type = std::get<0>(GetParam());
  for (int64_t cols : {48, 300}) {
    for (int64_t rows :
         {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 600}) {
      TestMatrix m = MakeMatrix(rng, type, rows, cols);
      GuardedCopies guarded;
      m.w.data =
          guarded.Copy(static_cast<const uint8_t*>(m.w.data),
                       QuantizedDataBytes(type, rows, cols, m.w.group_size));
      if (!m.scales.empty())
        m.w.scales = guarded.Copy(m.scales.data(), m.scales.size());
      if (!m.block_scales.empty()) {
        m.w.block_scales =
            guarded.Copy(m.block_scales.data(), m.block_scales.size());
      }
      if (!m.exponents.empty())
        m.w.exponents = guarded.Copy(m.exponents.data(), m.exponents.size());
      for (int64_t n : {1, 2, 3, 5, 8, 9, 40, 70}) {
        const auto x = RandomVector(rng, n * cols);
        const std::vector<double> want = ExpectedProduct(x, n, m);
        // Each sum's error against the sum of its terms' magnitudes: a row
        // read from elsewhere is off by about that, rounding by far less.
        std::vector<double> magnitude(n * rows, 0.0);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t k = 0; k < cols; ++k) {
              magnitude[i * rows + r] +=
                  std::abs(x[i * cols + k] * m.dequantized[r * cols + k]);
            }
          }
        }
        for (ActivationPrecision precision :
             {ActivationPrecision::kF32, ActivationPrecision::kBf16,
              ActivationPrecision::kInt8}) {
          std::vector<float> y(n * rows, NAN);
          MatMulBatch({{x.data(), n, m.w, y.data(), precision}}, nullptr);
          const double tolerance =
              precision == ActivationPrecision::kF32 ? 1e-5 : 2e-2;
          for (int64_t i = 0; i < n * rows; ++i) {
            ASSERT_LE(std::abs(y[i] - want[i]), tolerance * magnitude[i])
                << n << "x" << rows << "x" << cols << " precision "
                << static_cast<int>(precision) << " at " << i;
          }
        }
      }
      // The untransposed product over all rows (MLA's), for a few counts.
      for (int64_t n : {1, 3, 9}) {
        const auto c = RandomVector(rng, n * rows);
        std::vector<float> y(n * cols, 0.f);
        AccumulateRowProducts(c.data(), rows, n, m.w, 0, rows, y.data(), cols);
        for (int64_t i = 0; i < n; ++i) {
          for (int64_t k = 0; k < cols; ++k) {
            double want = 0, magnitude = 0;
            for (int64_t r = 0; r < rows; ++r) {
              const double term = c[i * rows + r] * m.dequantized[r * cols + k];
              want += term;
              magnitude += std::abs(term);
            }
            ASSERT_LE(std::abs(y[i * cols + k] - want), 1e-5 * magnitude)
                << "accumulated " << n << "x" << rows << "x" << cols << " at "
                << i << "," << k;
          }
        }
      }
    }
  }
}

// A batch's rows computed in shares (each share a product of its own rows
// with batch_rows the batch's, on a pool of threads or inline) are bitwise
// the whole batch's: around every switch of path and kernel (one row, the
// direct tiles, DirectProductRows, the blocked products; bf16 also with
// bf16 activations), with row counts whose weight-row slices fall
// differently on the pool.
TEST_P(MatMulTest, ShareOfABatchIsTheBatchBitwise) {
  std::mt19937 rng(41);
  const WeightType type = std::get<0>(GetParam());
  for (const ActivationPrecision precision :
       {ActivationPrecision::kF32, ActivationPrecision::kBf16}) {
    if (precision == ActivationPrecision::kBf16 && type != WeightType::kBF16) {
      continue;
    }
    ThreadPool pool(3);
    for (const int64_t cols : {300, 1024}) {
      const TestMatrix m = MakeMatrix(rng, type, 77, cols);
      for (const int64_t batch : {1, 2, 4, 8, 9, 32, 33, 64, 65, 70}) {
        const std::vector<float> x = RandomVector(rng, batch * cols);
        std::vector<float> whole(batch * m.w.rows, NAN);
        MatMulBatch({{x.data(), batch, m.w, whole.data(), precision}}, nullptr);
        for (const int64_t share : {int64_t{1}, int64_t{2}, batch / 2, batch}) {
          if (share < 1 || share > batch) continue;
          for (int64_t first = 0; first < batch; first += share) {
            const int64_t n = std::min(share, batch - first);
            std::vector<float> part(n * m.w.rows, NAN);
            MatMulJob job{x.data() + first * cols, n, m.w, part.data()};
            job.batch_rows = batch;
            job.precision = precision;
            MatMulBatch({job}, first % 2 == 0 ? &pool : nullptr);
            const std::vector<float> want(
                whole.begin() + first * m.w.rows,
                whole.begin() + (first + n) * m.w.rows);
            ASSERT_EQ(part, want)
                << cols << " columns, batch " << batch << ", rows " << first
                << ".." << first + n << ", precision "
                << static_cast<int>(precision);
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, MatMulTest,
    ::testing::Combine(::testing::Values(WeightType::kF32, WeightType::kBF16,
                                         WeightType::kF16, WeightType::kInt8,
                                         WeightType::kInt4,
                                         WeightType::kFp8E4M3,
                                         WeightType::kMxfp4),
                       ::testing::Bool()),
    [](const auto& info) {
      return std::string(WeightTypeName(std::get<0>(info.param))) +
             (std::get<1>(info.param) ? "_scalar" : "_dispatched");
    });

// The AVX-512 one-row products (where the CPU has them) against the same
// references as the AVX2 path, and against the AVX2 path itself: int8 and
// int4 and mxfp4 share its quantized activations and fp8 its scaled ones,
// so they differ from it only in the order of float sums.
// bf16 checks the pass-through to the AVX2 path.
class Avx512Test : public ::testing::TestWithParam<WeightType> {};

TEST_P(Avx512Test, OneRowMatchesReferenceAndAvx2) {
  if (!UseAvx512()) GTEST_SKIP() << "the CPU lacks AVX-512 F/BW/VL/VNNI";
  std::mt19937 rng(31);
  const WeightType type = GetParam();
  // Columns on both sides of 32-column blocks and 64-byte int4 pairs, with
  // odd numbers of int4 chunks and int8 rows ending in a block of padding,
  // and rows long enough to be read as six streams.
  for (int64_t cols : {1, 17, 31, 32, 33, 63, 64, 65, 96, 127, 128, 129, 191,
                       257, 700, 8253, 24611, 24643}) {
    for (int32_t group : {32, 64}) {
      if (group == 64 && type == WeightType::kBF16) continue;
      // Several rows, so that one output cancelled to near zero does not
      // make the relative error of the whole product meaningless.
      const int64_t rows = 8 + cols % 13;
      const TestMatrix m = MakeMatrix(rng, type, rows, cols, group);
      const auto x = RandomVector(rng, cols);
      std::vector<float> y(rows, NAN), y_avx2(rows, NAN);
      MatMulTransposed(x.data(), 1, m.w, y.data());
      SetForceAvx2(true);
      MatMulTransposed(x.data(), 1, m.w, y_avx2.data());
      SetForceAvx2(false);
      EXPECT_LE(RelativeError(y, ExpectedProduct(x, 1, m)),
                ProductTolerance(cols))
          << rows << "x" << cols << " group " << group;
      EXPECT_LE(
          RelativeError(y, std::vector<double>(y_avx2.begin(), y_avx2.end())),
          ProductTolerance(cols))
          << rows << "x" << cols << " group " << group;
    }
  }
}

// x[n, w.cols] · wᵀ through MatMulBatch on `pool`, on this CPU's path and
// on the AVX2 path (forced), at `precision`: {y, y_avx2}.
std::pair<std::vector<float>, std::vector<float>> ProductHereAndOnAvx2(
    const std::vector<float>& x, int64_t n, const Matrix& w,
    ActivationPrecision precision, ThreadPool* pool) {
  std::vector<float> y(n * w.rows, NAN), y_avx2(n * w.rows, NAN);
  const MatMulJob job{x.data(), n, w, y.data(), precision};
  MatMulBatch({&job, 1}, pool);
  SetForceAvx2(true);
  const MatMulJob job_avx2{x.data(), n, w, y_avx2.data(), precision};
  MatMulBatch({&job_avx2, 1}, pool);
  SetForceAvx2(false);
  return {std::move(y), std::move(y_avx2)};
}

// y within ProductTolerance(cols) of the reference `want` and of the AVX2
// path's y_avx2.
void ExpectNearReferenceAndAvx2(const std::vector<float>& y,
                                const std::vector<float>& y_avx2,
                                const std::vector<double>& want, int64_t cols,
                                const std::string& where) {
  EXPECT_LE(RelativeError(y, want), ProductTolerance(cols)) << where;
  EXPECT_LE(RelativeError(y, std::vector<double>(y_avx2.begin(), y_avx2.end())),
            ProductTolerance(cols))
      << where;
}

// The AVX-512 mxfp4 products of a few activation rows (where the CPU has
// them), in three levels and in one (ActivationPrecision::kInt8), on a
// thread pool: against the double reference of their quantized
// activations, against the AVX2 path's, and each row bitwise the product
// of that row alone (the one-row path): activation rows in groups of one
// to four (as many as fit L1), in tiles and streams, weight rows in one
// block and in several, columns around the 16-block and 4-block steps.
TEST(Avx512Mxfp4Test, FewRowsMatchReferenceAvx2AndEachRowAlone) {
  if (!UseAvx512()) GTEST_SKIP() << "the CPU lacks AVX-512 F/BW/VL/VNNI";
  std::mt19937 rng(67);
  ThreadPool pool(3);
  for (const ActivationPrecision precision :
       {ActivationPrecision::kF32, ActivationPrecision::kInt8}) {
    for (const int64_t n : {2, 3, 4, 5, 7, 8}) {
      for (const int64_t cols :
           {1, 33, 64, 65, 127, 129, 511, 513, 700, 2880, 8253}) {
        // At gpt-oss's width, more weight rows than a block of them (64 at
        // most) holds.
        const int64_t rows = 9 + (cols + n) % 23 + (cols == 2880 ? 140 : 0);
        const TestMatrix m = MakeMatrix(rng, WeightType::kMxfp4, rows, cols);
        const auto x = RandomVector(rng, n * cols);
        ASSERT_EQ(ProductPath(WeightType::kMxfp4, n, precision),
                  KernelPath::kAvx512);
        const auto [y, y_avx2] =
            ProductHereAndOnAvx2(x, n, m.w, precision, &pool);
        const std::vector<double> want =
            precision == ActivationPrecision::kInt8
                ? ReferenceProduct(QuantizedActivations(x, n, cols, 127.f), n,
                                   m)
                : ReferenceProduct(LevelActivations(x, n, cols), n, m);
        const std::string where =
            std::to_string(n) + "x" + std::to_string(rows) + "x" +
            std::to_string(cols) + " " + ActivationPrecisionName(precision);
        ExpectNearReferenceAndAvx2(y, y_avx2, want, cols, where);
        for (int64_t a = 0; a < n; ++a) {
          std::vector<float> alone(rows, NAN);
          const MatMulJob one{x.data() + a * cols, 1, m.w, alone.data(),
                              precision};
          MatMulBatch({&one, 1}, nullptr);
          ASSERT_EQ(alone, std::vector<float>(y.begin() + a * rows,
                                              y.begin() + (a + 1) * rows))
              << where << ", row " << a;
        }
      }
    }
  }
}

// The AVX-512 int8 and int4 products of a few activation rows (where the
// CPU has them), groups of 32 and 64, on a thread pool, int8 on int16
// activations and on one int8 level: against the double reference of
// their quantized activations, against the AVX2 path's (int8's one level
// is the AVX2 path's only at one row: there, against the reference only),
// and each row bitwise the product of that row alone (the one-row path) and
// the same as a share of one row of the batch: activation rows in groups of
// one to four (as many as fit L1), in tiles and streams, weight rows in one
// block and in several, columns around the 16-block and 4-block steps.
class Avx512FewRowsTest : public ::testing::TestWithParam<
                              std::tuple<WeightType, ActivationPrecision>> {};

TEST_P(Avx512FewRowsTest, MatchReferenceAvx2AndEachRowAlone) {
  if (!UseAvx512()) GTEST_SKIP() << "the CPU lacks AVX-512 F/BW/VL/VNNI";
  const auto [type, precision] = GetParam();
  // int16 activations for int8 weights on float32 ones, else one int8 level.
  const float largest =
      type == WeightType::kInt8 && precision == ActivationPrecision::kF32
          ? 32767.f
          : 127.f;
  std::mt19937 rng(73);
  ThreadPool pool(3);
  for (const int32_t group : {32, 64}) {
    for (const int64_t n : {2, 3, 4, 5, 7, 8}) {
      for (const int64_t cols :
           {1, 33, 64, 65, 127, 129, 511, 513, 700, 2880, 16411}) {
        // At the wider shapes, more weight rows than a block of them (64 at
        // most) holds.
        const int64_t rows = 9 + (cols + n) % 23 + (cols >= 2880 ? 140 : 0);
        const TestMatrix m = MakeMatrix(rng, type, rows, cols, group);
        const auto x = RandomVector(rng, n * cols);
        ASSERT_EQ(ProductPath(type, n, precision), KernelPath::kAvx512);
        const auto [y, y_avx2] =
            ProductHereAndOnAvx2(x, n, m.w, precision, &pool);
        const std::string where =
            std::to_string(group) + ": " + std::to_string(n) + "x" +
            std::to_string(rows) + "x" + std::to_string(cols);
        const std::vector<double> want_product =
            ReferenceProduct(QuantizedActivations(x, n, cols, largest), n, m);
        if (type == WeightType::kInt8 &&
            precision == ActivationPrecision::kInt8) {
          EXPECT_LE(RelativeError(y, want_product), ProductTolerance(cols))
              << where;
        } else {
          ExpectNearReferenceAndAvx2(y, y_avx2, want_product, cols, where);
        }
        for (int64_t a = 0; a < n; ++a) {
          const std::vector<float> want(y.begin() + a * rows,
                                        y.begin() + (a + 1) * rows);
          std::vector<float> alone(rows, NAN), share(rows, NAN);
          const MatMulJob one{x.data() + a * cols, 1, m.w, alone.data(),
                              precision};
          MatMulJob one_of_n{x.data() + a * cols, 1, m.w, share.data(),
                             precision};
          one_of_n.batch_rows = n;
          MatMulBatch({&one, 1}, nullptr);
          MatMulBatch({&one_of_n, 1}, &pool);
          ASSERT_EQ(alone, want) << where << ", row " << a;
          ASSERT_EQ(share, want) << where << ", row " << a << " as a share";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, Avx512FewRowsTest,
    ::testing::Values(
        std::make_tuple(WeightType::kInt8, ActivationPrecision::kF32),
        std::make_tuple(WeightType::kInt8, ActivationPrecision::kInt8),
        std::make_tuple(WeightType::kInt4, ActivationPrecision::kF32)),
    [](const auto& info) {
      return std::string(WeightTypeName(std::get<0>(info.param))) + "_" +
             ActivationPrecisionName(std::get<1>(info.param));
    });
// The AVX-512 bf16 products of 2 to DirectProductRows activation rows
// (where the CPU has them) on a thread pool: against the double reference
// of float32 activations, against the AVX2 path, and each row bitwise the
// same in a batch of any size that takes the path (a share of one row
// with batch_rows n): activation rows in one group of 2-8 and in several
// (9-32), tiles of four and three weight rows with every remainder, weight
// rows in one block and in several, columns on both sides of 32-column
// chunks.
TEST(Avx512Bf16Test, FewRowsMatchReferenceAvx2AndAnyBatch) {
  if (!UseAvx512()) GTEST_SKIP() << "the CPU lacks AVX-512 F/BW/VL/VNNI";
  std::mt19937 rng(71);
  ThreadPool pool(3);
  for (const int64_t n : {2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 32}) {
    for (const int64_t cols :
         {1, 17, 31, 32, 33, 63, 64, 65, 127, 700, 2880, 4097}) {
      // At the widest, more weight rows than a block of them holds.
      const int64_t rows = 5 + (cols + n) % 19 + (cols == 4097 ? 60 : 0);
      const TestMatrix m = MakeMatrix(rng, WeightType::kBF16, rows, cols);
      const auto x = RandomVector(rng, n * cols);
      ASSERT_EQ(ProductPath(WeightType::kBF16, n), KernelPath::kAvx512);
      const auto [y, y_avx2] =
          ProductHereAndOnAvx2(x, n, m.w, ActivationPrecision::kF32, &pool);
      const std::string where = std::to_string(n) + "x" + std::to_string(rows) +
                                "x" + std::to_string(cols);
      ExpectNearReferenceAndAvx2(y, y_avx2, ReferenceProduct(x, n, m), cols,
                                 where);
      for (int64_t a = 0; a < n; ++a) {
        std::vector<float> alone(rows, NAN);
        MatMulJob one{x.data() + a * cols, 1, m.w, alone.data()};
        one.batch_rows = 2 + a % 31;
        MatMulBatch({&one, 1}, a % 2 == 0 ? &pool : nullptr);
        ASSERT_EQ(alone, std::vector<float>(y.begin() + a * rows,
                                            y.begin() + (a + 1) * rows))
            << where << ", row " << a << " in a batch of " << one.batch_rows;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    DecodeTypes, Avx512Test,
    ::testing::Values(WeightType::kBF16, WeightType::kInt8, WeightType::kInt4,
                      WeightType::kMxfp4, WeightType::kFp8E4M3),
    [](const auto& info) { return std::string(WeightTypeName(info.param)); });

// Products of bf16 weights that may round their activations to bf16
// (ActivationPrecision::kBf16): on the AVX512-BF16 path, against the double
// reference of the rounded activations, at every tile shape (weight rows
// and activation rows on both sides of the 4 × 4 tiles, columns on both
// sides of 32) and over row ranges on a thread pool; elsewhere the float32
// product.
class Bf16ActivationsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override { SetForceAvx2(GetParam()); }
  void TearDown() override { SetForceAvx2(false); }
};

TEST_P(Bf16ActivationsTest, PathIsNativeWhereTheCpuHasIt) {
  for (int64_t n : {1, 2, 7, 8, 100}) {
    EXPECT_EQ(ProductPath(WeightType::kBF16, n, ActivationPrecision::kBf16),
              UseAvx512Bf16() ? KernelPath::kAvx512Bf16
                              : ProductPath(WeightType::kBF16, n))
        << n;
    for (WeightType t : {WeightType::kF32, WeightType::kF16, WeightType::kInt8,
                         WeightType::kInt4, WeightType::kMxfp4}) {
      EXPECT_EQ(ProductPath(t, n, ActivationPrecision::kBf16),
                ProductPath(t, n))
          << WeightTypeName(t);
    }
    EXPECT_EQ(ProductPath(WeightType::kFp8E4M3, n, ActivationPrecision::kBf16),
              UseAvx512Bf16Vbmi() && n == 1
                  ? KernelPath::kAvx512Bf16
                  : ProductPath(WeightType::kFp8E4M3, n))
        << n;
  }
}

TEST_P(Bf16ActivationsTest, MatchesReferenceOfRoundedActivations) {
  std::mt19937 rng(53);
  ThreadPool pool(3);
  // One activation row (the one-row kernel: weight rows on both sides of
  // its groups of three and six streams, columns on both sides of 32 and
  // 64 and past a quarter of L1 of bf16 activations, where it takes six
  // streams, on a pool that cuts the rows differently); 2 to 7 (the
  // few-row streams, the same columns and rows); activation rows on both
  // sides of 8 and of 32 (group kernel / panels) and of the panels' 12-row
  // tiles; weight rows on both
  // sides of the 8-row group tiles and the 32-row panels (and of 16, the
  // vector); columns on both sides of 32 and odd (a last column pair of
  // one), and more columns and rows than one packed block holds.
  const int64_t shapes[][3] = {
      {1, 1, 1},      {1, 2, 31},    {1, 7, 33},     {1, 5, 64},
      {1, 13, 65},    {1, 19, 96},   {1, 203, 517},  {1, 203, 9000},
      {1, 41, 20000}, {2, 1, 1},     {2, 5, 31},     {3, 13, 65},
      {4, 203, 517},  {5, 19, 96},   {6, 41, 9000},  {7, 2, 33},
      {7, 9, 64},     {8, 8, 1},     {8, 17, 33},    {9, 31, 1030},
      {15, 13, 45},   {16, 16, 32},  {17, 96, 63},   {24, 33, 31},
      {25, 47, 95},   {32, 41, 257}, {33, 40, 66},   {37, 50, 700},
      {64, 45, 103},  {100, 21, 77}, {200, 13, 520}, {30, 203, 3001},
      {45, 1100, 600}};
  std::vector<TestMatrix> mats;
  std::vector<std::vector<float>> xs, ys, ys_single;
  std::vector<MatMulJob> jobs;
  for (const auto& s : shapes) {
    const int64_t n = s[0], rows = s[1], cols = s[2];
    mats.push_back(MakeMatrix(rng, WeightType::kBF16, rows, cols));
    xs.push_back(RandomVector(rng, n * cols));
    ys.emplace_back(n * rows, NAN);
    ys_single.emplace_back(n * rows, NAN);
  }
  for (size_t i = 0; i < mats.size(); ++i) {
    jobs.push_back({xs[i].data(), shapes[i][0], mats[i].w, ys[i].data(),
                    ActivationPrecision::kBf16});
  }
  MatMulBatch(jobs, &pool);
  for (size_t i = 0; i < mats.size(); ++i) jobs[i].y = ys_single[i].data();
  MatMulBatch(jobs, nullptr);
  for (size_t i = 0; i < mats.size(); ++i) {
    const int64_t n = shapes[i][0], cols = shapes[i][2];
    const bool native =
        ProductPath(WeightType::kBF16, n, ActivationPrecision::kBf16) ==
        KernelPath::kAvx512Bf16;
    std::vector<float> rounded(xs[i]);
    if (native) {
      for (float& v : rounded) v = Bf16ToF32(F32ToBf16(v));
    }
    const std::vector<double> want = ReferenceProduct(rounded, n, mats[i]);
    EXPECT_LE(RelativeError(ys[i], want), ProductTolerance(cols))
        << n << "x" << shapes[i][1] << "x" << cols;
    // The same sums whichever rows a thread takes.
    EXPECT_EQ(ys[i], ys_single[i]) << n << "x" << shapes[i][1] << "x" << cols;
    if (native && cols >= 31) {
      // Rounding is visible: the exact product differs by far more than
      // float32 rounding.
      EXPECT_GT(RelativeError(ys[i], ReferenceProduct(xs[i], n, mats[i])),
                10 * ProductTolerance(cols));
    }
  }
}

// Every activation rounds as numeric.h's F32ToBf16 rounds: ties to even,
// carries into the exponent, infinities and NaN (subnormal activations
// count as zero in vdpbf16ps and are left out).
TEST_P(Bf16ActivationsTest, RoundsActivationsToNearestEven) {
  if (!UseAvx512Bf16()) GTEST_SKIP() << "the CPU lacks AVX512-BF16";
  const float values[] = {1.f,
                          1.f + 0x1p-8f,  // tie: stays at 1
                          1.f + 0x3p-8f,  // tie: rounds up to even
                          1.f + 0x1p-8f + 0x1p-20f,
                          -3.14159265f,
                          0x1.fffffep127f,  // rounds to infinity
                          -INFINITY,
                          1e-30f,
                          65504.f,
                          0.f,
                          -0.f,
                          NAN};
  // Repeated past 32 rows; products of its first 1, 5, 12 and all rows
  // take the one-row, few-row, group and panel kernels.
  std::vector<float> x;
  while (x.size() < 40) x.insert(x.end(), std::begin(values), std::end(values));
  const uint16_t one = F32ToBf16(1.f);
  const Matrix w{&one, WeightType::kBF16, 1, 1};
  for (const int64_t n :
       {int64_t{1}, int64_t{5}, int64_t{12}, static_cast<int64_t>(x.size())}) {
    for (int64_t first = 0; first + n <= static_cast<int64_t>(x.size());
         first += n) {
      std::vector<float> y(n, 7.f);
      MatMulBatch({{&x[first], n, w, y.data(), ActivationPrecision::kBf16}},
                  nullptr);
      for (int64_t i = 0; i < n; ++i) {
        const float v = x[first + i];
        const float want = Bf16ToF32(F32ToBf16(v));
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(y[i])) << n << " rows, " << first + i;
        } else {
          EXPECT_EQ(y[i], want) << n << " rows, " << first + i << ": " << v;
        }
      }
    }
  }
}

// fp8 weights against one activation row under kBf16 and kInt8: where
// UseAvx512Bf16Vbmi(), each activation times its block scale rounded to
// bf16 (F32ToBf16) and the weights' exact values, summed in float32;
// elsewhere (and with AVX2 forced) the float32 product. Ragged columns
// (partial 64-column chunks, rows that stream and rows in tiles), every
// block shape MakeMatrix makes, row blocks split across a thread pool.
TEST_P(Bf16ActivationsTest, Fp8OneRowMatchesReferenceOfRoundedActivations) {
  std::mt19937 rng(61);
  ThreadPool pool(3);
  const bool native = UseAvx512Bf16Vbmi();
  for (int64_t cols :
       {1, 17, 63, 64, 65, 127, 128, 129, 200, 700, 8253, 12000}) {
    for (int32_t group : {32, 8, 64}) {
      const int64_t rows = 5 + cols % 300;
      const TestMatrix m =
          MakeMatrix(rng, WeightType::kFp8E4M3, rows, cols, group);
      const auto x = RandomVector(rng, cols);
      const std::vector<double> exact = ReferenceProduct(x, 1, m);
      std::vector<double> want = exact;
      if (native) {
        const int64_t scale_cols = (cols + m.w.block_cols - 1) / m.w.block_cols;
        for (int64_t r = 0; r < rows; ++r) {
          double sum = 0;
          for (int64_t k = 0; k < cols; ++k) {
            const float scale = m.block_scales[r / m.w.block_rows * scale_cols +
                                               k / m.w.block_cols] *
                                0x1p64f;
            sum += double(Bf16ToF32(F32ToBf16(x[k] * scale))) * 0x1p-64 *
                   Fp8E4M3ToF32(m.bytes[r * cols + k]);
          }
          want[r] = sum;
        }
      }
      for (ActivationPrecision precision :
           {ActivationPrecision::kBf16, ActivationPrecision::kInt8}) {
        std::vector<float> y(rows, NAN);
        MatMulBatch({{x.data(), 1, m.w, y.data(), precision}}, &pool);
        const std::string where =
            std::to_string(rows) + "x" + std::to_string(cols) + " group " +
            std::to_string(group) + " " + ActivationPrecisionName(precision);
        EXPECT_LE(RelativeError(y, want), ProductTolerance(cols)) << where;
        if (native && cols >= 64) {
          EXPECT_GT(RelativeError(y, exact), 10 * ProductTolerance(cols))
              << where;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Bf16ActivationsTest, ::testing::Bool(),
                         [](const auto& info) {
                           return std::string(info.param ? "forced_avx2"
                                                         : "dispatched");
                         });

// mxfp4 products under ActivationPrecision::kInt8: one row on the AVX-512
// path where the CPU has it, up to Mxfp4IntegerProductRows() rows on the
// AVX2 path, against the double reference of one int8 level per block of
// 32 (s · round(x / s), s = max|x| / 127), ragged shapes on a thread pool,
// one row's sum alike in any tile of a batch; more rows, and the scalar
// path, float32 activations. Each path in turn: the scalar one, AVX2 forced
// (where AVX-512 would run one row) and the dispatched one.
enum class ForcedPath { kScalar, kAvx2, kNone };

class Mxfp4Int8ActivationsTest : public ::testing::TestWithParam<ForcedPath> {
 protected:
  void SetUp() override {
    SetForceScalar(GetParam() == ForcedPath::kScalar);
    SetForceAvx2(GetParam() == ForcedPath::kAvx2);
  }
  void TearDown() override {
    SetForceScalar(false);
    SetForceAvx2(false);
  }
};

// mxfp4 products under `precision` on ragged shapes on a thread pool:
// against the double reference of `levels`' activations (the product of
// LevelActivations-like quantized rows) where the integer paths take them,
// of the exact ones elsewhere; where they do, at more than min_error(cols)
// and at most max_error from the exact product, and each row's sum alike
// alone or in a batch.
void ExpectMxfp4ProductsOnLevels(
    ActivationPrecision precision, uint32_t seed,
    const std::function<std::vector<double>(const std::vector<float>&, int64_t,
                                            int64_t)>& levels,
    const std::function<double(int64_t)>& min_error, double max_error) {
  std::mt19937 rng(seed);
  ThreadPool pool(3);
  const int64_t shapes[][3] = {{1, 1, 1},      {1, 7, 33},    {2, 13, 45},
                               {3, 65, 31},    {4, 9, 70},    {5, 129, 200},
                               {8, 37, 95},    {1, 203, 331}, {1, 11, 12301},
                               {1, 619, 2880}, {9, 21, 77}};
  for (const auto& s : shapes) {
    const int64_t n = s[0], rows = s[1], cols = s[2];
    const TestMatrix m = MakeMatrix(rng, WeightType::kMxfp4, rows, cols);
    const auto x = RandomVector(rng, n * cols);
    std::vector<float> y(n * rows, NAN);
    const MatMulJob job{x.data(), n, m.w, y.data(), precision};
    MatMulBatch({&job, 1}, &pool);
    const bool integer = n <= Mxfp4IntegerProductRows();
    const std::vector<double> exact = ReferenceProduct(x, n, m);
    EXPECT_LE(
        RelativeError(
            y, integer ? ReferenceProduct(levels(x, n, cols), n, m) : exact),
        ProductTolerance(cols))
        << n << "x" << rows << "x" << cols;
    if (integer && cols >= 200) {
      const double error = RelativeError(y, exact);
      EXPECT_GT(error, min_error(cols)) << n << "x" << rows << "x" << cols;
      EXPECT_LE(error, max_error) << n << "x" << rows << "x" << cols;
    }
    if (integer && n > 1) {
      std::vector<float> first(rows, NAN);
      const MatMulJob alone{x.data(), 1, m.w, first.data(), precision, n};
      MatMulBatch({&alone, 1}, &pool);
      for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(first[r], y[r]) << r;
    }
  }
}

TEST_P(Mxfp4Int8ActivationsTest, MatchesReferenceOfOneLevel) {
  EXPECT_EQ(ProductPath(WeightType::kMxfp4, 1, ActivationPrecision::kInt8),
            UseAvx512() ? KernelPath::kAvx512 : VectorPath());
  // One level is in effect: further from the exact product than the three
  // levels may be, as close as int4's int8 activations.
  ExpectMxfp4ProductsOnLevels(
      ActivationPrecision::kInt8, 59,
      [](const std::vector<float>& x, int64_t n, int64_t cols) {
        return QuantizedActivations(x, n, cols, 127.f);
      },
      [](int64_t) { return 1e-4; }, 1e-2);
}

// mxfp4 products under ActivationPrecision::kBf16 likewise, against the
// double reference of two int8 levels per block (s · (q1 + q2 / 256)):
// further from the exact product than three, nearer than one.
TEST_P(Mxfp4Int8ActivationsTest, TwoLevelsUnderBf16) {
  ExpectMxfp4ProductsOnLevels(
      ActivationPrecision::kBf16, 67,
      [](const std::vector<float>& x, int64_t n, int64_t cols) {
        return LevelActivations(x, n, cols, 2);
      },
      [](int64_t cols) { return 2 * ProductTolerance(cols); }, 1e-4);
}

// int8 weights under kInt8: one activation row on the AVX2 path and up to 8
// on the AVX-512 one meet one int8 level per block (Q8_0 × Q8_0); every
// other product, and the scalar path, the int16 activations of kF32 (or its
// float32 ones).
TEST_P(Mxfp4Int8ActivationsTest, Int8WeightsTakeOneLevelAtOneRow) {
  std::mt19937 rng(61);
  ThreadPool pool(3);
  const int64_t shapes[][3] = {{1, 1, 1},     {1, 7, 33},    {1, 13, 64},
                               {1, 65, 95},   {1, 129, 200}, {1, 203, 1031},
                               {1, 9, 12301}, {2, 21, 77},   {3, 17, 300}};
  for (int32_t group : {32, 64}) {
    for (const auto& s : shapes) {
      const int64_t n = s[0], rows = s[1], cols = s[2];
      const TestMatrix m =
          MakeMatrix(rng, WeightType::kInt8, rows, cols, group);
      const auto x = RandomVector(rng, n * cols);
      std::vector<float> y(n * rows, NAN);
      const MatMulJob job{x.data(), n, m.w, y.data(),
                          ActivationPrecision::kInt8};
      MatMulBatch({&job, 1}, &pool);
      const KernelPath path = ProductPath(job);
      const bool one_level =
          path == KernelPath::kAvx512 || (n == 1 && path == KernelPath::kAvx2);
      EXPECT_EQ(one_level, UseAvx512() || (n == 1 && UseAvx2()));
      EXPECT_LE(
          RelativeError(
              y, one_level ? ReferenceProduct(
                                 QuantizedActivations(x, n, cols, 127.f), n, m)
                           : ExpectedProduct(x, n, m)),
          ProductTolerance(cols))
          << group << ": " << n << "x" << rows << "x" << cols;
      if (one_level && cols >= 200) {
        const double error = RelativeError(y, ReferenceProduct(x, n, m));
        EXPECT_GT(error, 1e-4) << group << ": " << rows << "x" << cols;
        EXPECT_LE(error, 1e-2) << group << ": " << rows << "x" << cols;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, Mxfp4Int8ActivationsTest,
                         ::testing::Values(ForcedPath::kScalar,
                                           ForcedPath::kAvx2,
                                           ForcedPath::kNone),
                         [](const auto& info) {
                           switch (info.param) {
                             case ForcedPath::kScalar:
                               return std::string("scalar");
                             case ForcedPath::kAvx2:
                               return std::string("forced_avx2");
                             case ForcedPath::kNone:
                               break;
                           }
                           return std::string("dispatched");
                         });

// Quantizing decode activations costs little accuracy: against the exact
// activations the product stays within a fraction of a percent for int4
// (int8 activations), within 1e-4 for int8 (int16 activations) and within
// 1e-5 for mxfp4 (three int8 levels, one row).
TEST(MatMulQuantizedTest, QuantizedActivationsCloseToExact) {
  std::mt19937 rng(31);
  for (WeightType type :
       {WeightType::kInt8, WeightType::kInt4, WeightType::kMxfp4}) {
    const int64_t n = type == WeightType::kMxfp4 ? 1 : 2;
    for (int64_t cols : {95, 331, 1000}) {
      const TestMatrix m = MakeMatrix(rng, type, 37, cols, 32);
      auto x = RandomVector(rng, n * cols);
      std::vector<float> y(n * 37, NAN);
      MatMulTransposed(x.data(), n, m.w, y.data());
      EXPECT_LE(RelativeError(y, ReferenceProduct(x, n, m)),
                type == WeightType::kInt4   ? 1e-2
                : type == WeightType::kInt8 ? 1e-4
                                            : 1e-5)
          << WeightTypeName(type) << " " << cols;
    }
  }
}

TEST(QuantizeTest, ErrorWithinHalfAStep) {
  std::mt19937 rng(29);
  for (WeightType type : {WeightType::kInt8, WeightType::kInt4}) {
    const int64_t rows = 11, cols = 101;
    const TestMatrix m = MakeMatrix(rng, type, rows, cols, 32);
    const int64_t groups = (cols + 31) / 32;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const double scale = F16ToF32(m.scales[r * groups + c / 32]);
        const double step = std::abs(scale);
        // int4 maps each group's extreme to -8, so a value of the other sign
        // beyond +7.5 steps clamps to +7 (at most one step away).
        const bool clamped =
            type == WeightType::kInt4 && m.f32[r * cols + c] / scale > 7.5;
        EXPECT_LE(std::abs(m.dequantized[r * cols + c] - m.f32[r * cols + c]),
                  step * (clamped ? 1.0001 : 0.5001))
            << WeightTypeName(type) << " " << r << "," << c;
      }
    }
  }
}

// Scales are f16: a group whose scale would pass the largest f16 keeps the
// largest one (its values saturate) instead of turning into infinities.
TEST(QuantizeTest, ScalesSaturateAtTheLargestHalf) {
  const std::vector<float> src = {1e9f, -2.f, 0.f, 3.f};
  const Matrix m{src.data(), WeightType::kF32, 1, 4, nullptr, 0};
  for (WeightType type : {WeightType::kInt8, WeightType::kInt4}) {
    std::vector<uint8_t> data(QuantizedDataBytes(type, 1, 4, 32));
    std::vector<uint16_t> scales(QuantizedScaleCount(type, 1, 4, 32));
    const Matrix q = QuantizeMatrix(m, type, 32, data.data(), scales.data());
    EXPECT_EQ(scales[0] & 0x7fff, 0x7bff) << WeightTypeName(type);
    std::vector<float> row(4);
    ReadRow(q, 0, row.data());
    for (float v : row) EXPECT_TRUE(std::isfinite(v)) << WeightTypeName(type);
    EXPECT_EQ(row[0],
              type == WeightType::kInt8 ? 127.f * 65504.f : 8.f * 65504.f);
  }
}

TEST_P(PathTest, RmsNormAndBias) {
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
      for (int64_t d = 0; d < dim; ++d)
        ss += double(x[i * dim + d]) * x[i * dim + d];
      const double scale = 1 / std::sqrt(ss / dim + 1e-6);
      for (int64_t d = 0; d < dim; ++d)
        want[i * dim + d] = x[i * dim + d] * scale * w[d];
    }
    EXPECT_LE(RelativeError(y, want), 1e-6);
    auto bias = RandomVector(rng, dim);
    AddBias(y.data(), n, dim, bias.data());
    for (int64_t i = 0; i < n * dim; ++i) want[i] += bias[i % dim];
    EXPECT_LE(RelativeError(y, want), 1e-6);
  }
}

TEST_P(PathTest, RotaryHalfPairsJWithJPlusHalf) {
  std::mt19937 rng(9);
  // Halves shorter than, across and at whole vectors.
  for (int64_t head_dim : {10, 36, 128}) {
    const int64_t heads = 3;
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
        const double a = x[h * head_dim + j],
                     b = x[h * head_dim + j + head_dim / 2];
        want[h * head_dim + j] =
            a * std::cos(angle[j]) - b * std::sin(angle[j]);
        want[h * head_dim + j + head_dim / 2] =
            b * std::cos(angle[j]) + a * std::sin(angle[j]);
      }
    }
    EXPECT_LE(RelativeError(y, want), 1e-6) << "head_dim " << head_dim;
  }
}

TEST(RotaryTest, InterleavedPairsAdjacentDimensions) {
  std::mt19937 rng(17);
  // Rotated slices of 8 at offset 16 inside heads of 24 (MLA's q_pe).
  const int64_t count = 3, stride = 24, offset = 16, dim = 8;
  auto x = RandomVector(rng, count * stride);
  std::vector<float> cos(dim / 2), sin(dim / 2);
  std::vector<double> angle(dim / 2);
  for (int64_t j = 0; j < dim / 2; ++j) {
    angle[j] = 0.3 + 1.7 * j;
    cos[j] = std::cos(angle[j]);
    sin[j] = std::sin(angle[j]);
  }
  auto y = x;
  ApplyRotaryInterleaved(y.data() + offset, count, stride, dim, cos.data(),
                         sin.data());
  std::vector<double> want(x.begin(), x.end());
  for (int64_t h = 0; h < count; ++h) {
    for (int64_t j = 0; j < dim / 2; ++j) {
      const int64_t i = h * stride + offset + 2 * j;
      want[i] = x[i] * std::cos(angle[j]) - x[i + 1] * std::sin(angle[j]);
      want[i + 1] = x[i + 1] * std::cos(angle[j]) + x[i] * std::sin(angle[j]);
    }
  }
  EXPECT_LE(RelativeError(y, want), 1e-6);
  for (int64_t i = 0; i < offset; ++i) EXPECT_EQ(y[i], x[i]);
}

TEST_P(PathTest, SoftmaxSiluMulTopK) {
  std::mt19937 rng(13);
  for (int64_t n : {1, 5, 37, 128}) {
    auto x = RandomVector(rng, n, 4.f);
    auto s = x;
    Softmax(s.data(), n);
    double z = 0;
    for (float v : x) z += std::exp(double(v));
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = std::exp(double(x[i])) / z;
    EXPECT_LE(RelativeError(s, want), 1e-6);

    const int k = std::min<int>(3, n);
    std::vector<int32_t> idx(k, -1);
    TopK(x.data(), n, k, idx.data());
    std::vector<int32_t> order(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return x[a] > x[b]; });
    for (int i = 0; i < k; ++i) EXPECT_EQ(idx[i], order[i]);
  }
  // SiluMul elementwise, over ragged lengths and up to |x| = 120 (past
  // float's exponent range: silu(-120) ~ 1e-50 rounds to 0), in place as
  // the MLPs call it.
  for (int64_t n : {1, 5, 37, 203}) {
    for (float range : {1.f, 10.f, 40.f}) {
      auto gate = RandomVector(rng, n, range);
      if (n > 2) {
        gate[0] = 120.f;
        gate[1] = -120.f;
      }
      auto up = RandomVector(rng, n);
      auto out = gate;
      SiluMul(out.data(), up.data(), n, out.data());
      for (int64_t i = 0; i < n; ++i) {
        const double want = gate[i] / (1 + std::exp(-double(gate[i]))) * up[i];
        EXPECT_NEAR(out[i], want, 4e-7 * std::abs(want) + 1e-36)
            << "n " << n << " x " << gate[i];
      }
    }
  }
  const float tied[] = {1.f, 3.f, 3.f, 2.f};
  int32_t idx[2];
  TopK(tied, 4, 2, idx);
  EXPECT_EQ(idx[0], 1);
  EXPECT_EQ(idx[1], 2);
}

// Random keys and values of `positions` positions in blocks of `block`
// rows of `width` floats, listed in reverse order as a block table could
// give them.
struct PagedKv {
  std::vector<std::vector<float>> k, v;
  std::vector<const float*> k_table, v_table;
  int64_t block = 0;
  KvBlocks blocks() const { return {k_table.data(), v_table.data(), block}; }
};

PagedKv RandomPagedKv(std::mt19937& rng, int64_t positions, int64_t block,
                      int64_t width) {
  PagedKv kv;
  kv.block = block;
  const int64_t num_blocks = (positions + block - 1) / block;
  for (int64_t b = 0; b < num_blocks; ++b) {
    kv.k.push_back(RandomVector(rng, block * width));
    kv.v.push_back(RandomVector(rng, block * width));
  }
  for (int64_t b = num_blocks - 1; b >= 0; --b) {
    kv.k_table.push_back(kv.k[b].data());
    kv.v_table.push_back(kv.v[b].data());
  }
  return kv;
}

// Double-precision causal attention of one query head over positions
// [first, end) of paged keys and values: [head_dim] into `want`. `sink`,
// when not null, is one more logit in the denominator that attends to
// nothing.
void ReferenceAttention(const float* q, int64_t head_dim, const KvBlocks& kv,
                        int64_t width, int64_t kv_offset, int64_t first,
                        int64_t end, double* want,
                        const float* sink = nullptr) {
  std::vector<double> s(end - first);
  double mx = -1e300, z = 0;
  const auto row = [&](const float* const* blocks, int64_t p) {
    return blocks[p / kv.block_size] + (p % kv.block_size) * width + kv_offset;
  };
  for (int64_t p = first; p < end; ++p) {
    double dot = 0;
    for (int64_t d = 0; d < head_dim; ++d)
      dot += double(q[d]) * row(kv.k_blocks, p)[d];
    s[p - first] = dot / std::sqrt(double(head_dim));
    mx = std::max(mx, s[p - first]);
  }
  if (sink != nullptr) mx = std::max(mx, double(*sink));
  for (auto& v : s) z += (v = std::exp(v - mx));
  if (sink != nullptr) z += std::exp(*sink - mx);
  for (int64_t d = 0; d < head_dim; ++d) want[d] = 0;
  for (int64_t p = first; p < end; ++p) {
    for (int64_t d = 0; d < head_dim; ++d)
      want[d] += s[p - first] / z * row(kv.v_blocks, p)[d];
  }
}

TEST_P(PathTest, AttentionOverBlocksMatchesReference) {
  std::mt19937 rng(17);
  // Groups of 3, 8 (two sets of four on the AVX2 path) and 1 query heads
  // per kv head; head sizes below, across and at whole vectors.
  const int64_t layouts[][3] = {{6, 2, 21}, {8, 1, 40}, {3, 3, 7}};
  const int64_t block = 5;
  const int64_t cases[][2] = {{0, 1},  {0, 4},   {0, 5},  {0, 23},
                              {7, 23}, {22, 23}, {3, 301}};
  for (const auto& layout : layouts) {
    for (const auto& c : cases) {
      const int64_t heads = layout[0], kv_heads = layout[1],
                    head_dim = layout[2];
      const int64_t first = c[0], positions = c[1];
      const int64_t width = kv_heads * head_dim;
      const PagedKv kv = RandomPagedKv(rng, positions, block, width);
      auto q = RandomVector(rng, heads * head_dim);
      std::vector<float> out(heads * head_dim, NAN);
      const float scale = 1.f / std::sqrt(float(head_dim));
      AttendOneQuery(q.data(), heads, kv_heads, head_dim, kv.blocks(), first,
                     positions, scale, out.data());
      std::vector<double> want(out.size());
      for (int64_t h = 0; h < heads; ++h) {
        ReferenceAttention(q.data() + h * head_dim, head_dim, kv.blocks(),
                           width, h / (heads / kv_heads) * head_dim, first,
                           positions, want.data() + h * head_dim);
      }
      EXPECT_LE(RelativeError(out, want), 1e-6) << first << ".." << positions;

      // The same query split over three slices of positions and merged.
      const int64_t count = positions - first;
      const int64_t cuts[] = {first, first + count / 3, first + 2 * count / 3,
                              positions};
      std::vector<float> outs, lses;
      int64_t parts = 0;
      for (int i = 0; i < 3; ++i) {
        if (cuts[i] == cuts[i + 1]) continue;
        std::vector<float> part(heads * head_dim, NAN), lse(heads, NAN);
        AttendOneQueryPartial(q.data(), heads, kv_heads, head_dim, kv.blocks(),
                              cuts[i], cuts[i + 1], scale, part.data(),
                              lse.data());
        outs.insert(outs.end(), part.begin(), part.end());
        lses.insert(lses.end(), lse.begin(), lse.end());
        ++parts;
      }
      std::vector<float> merged(heads * head_dim, NAN);
      MergeAttention(parts, heads, head_dim, outs.data(), lses.data(),
                     merged.data());
      EXPECT_LE(RelativeError(merged, want), 1e-6)
          << "split " << first << ".." << positions;
    }
  }
}

TEST_P(PathTest, QueryBlockMatchesReference) {
  std::mt19937 rng(29);
  // Head groups of 3, 8 and 1; head sizes below, across and at whole
  // vectors; query blocks at the start of a sequence and after a prefix,
  // longer and shorter than a block of keys, with and without a window.
  const int64_t layouts[][3] = {{6, 2, 21}, {8, 1, 40}, {3, 3, 7}, {4, 2, 64}};
  const int64_t cases[][3] = {{0, 1, 0},  {0, 5, 0},    {0, 37, 0},
                              {13, 1, 0}, {13, 16, 0},  {70, 33, 0},
                              {0, 40, 9}, {50, 17, 33}, {5, 3, 100}};
  const int64_t block = 7;
  for (const auto& layout : layouts) {
    for (const auto& c : cases) {
      const int64_t heads = layout[0], kv_heads = layout[1],
                    head_dim = layout[2];
      const int64_t first_query = c[0], count = c[1], window = c[2];
      const int64_t width = kv_heads * head_dim;
      const PagedKv paged =
          RandomPagedKv(rng, first_query + count, block, width);
      const KvBlocks kv = paged.blocks();
      const auto q = RandomVector(rng, count * heads * head_dim);
      // Without and with sinks (logits around the scores' scale, so that
      // they take a real share of the denominator).
      std::vector<float> sinks = RandomVector(rng, heads);
      for (const float* sink : {static_cast<const float*>(nullptr),
                                static_cast<const float*>(sinks.data())}) {
        std::vector<float> out(q.size(), NAN);
        AttendQueryBlock(q.data(), count, heads, kv_heads, head_dim, kv,
                         first_query, window, 1.f / std::sqrt(float(head_dim)),
                         sink, out.data());
        std::vector<double> want(q.size());
        for (int64_t i = 0; i < count; ++i) {
          const int64_t end = first_query + i + 1;
          const int64_t first =
              window > 0 ? std::max<int64_t>(0, end - window) : 0;
          for (int64_t h = 0; h < heads; ++h) {
            const int64_t at = (i * heads + h) * head_dim;
            ReferenceAttention(q.data() + at, head_dim, kv, width,
                               h / (heads / kv_heads) * head_dim, first, end,
                               want.data() + at,
                               sink == nullptr ? nullptr : &sinks[h]);
          }
        }
        EXPECT_LE(RelativeError(out, want), 1e-6)
            << heads << "/" << kv_heads << "x" << head_dim << " queries "
            << first_query << "+" << count << " window " << window
            << (sink == nullptr ? "" : " sinks");
      }
    }
  }
}

// QuantizeMatrix's int8 and int4 bytes and scales, bit for bit, against
// the quantizer written with scalar loops and std::lround (halves away
// from zero), on ragged shapes whose groups hold exact halves: a group's
// largest magnitude is a power of two times the top level, so its scale is
// that power of two and every (k + 1/2) * scale lands exactly on a half;
// and its negation further on, which int4 (whose scale takes the sign of
// the first largest) must not take instead.
TEST_P(PathTest, QuantizeMatrixRoundsHalvesAwayFromZeroAsLround) {
  std::mt19937 rng(11);
  for (WeightType type : {WeightType::kInt8, WeightType::kInt4}) {
    const float top = type == WeightType::kInt8 ? 127.f : -8.f;
    const long lo = type == WeightType::kInt8 ? -127 : -8;
    const long hi = type == WeightType::kInt8 ? 127 : 7;
    for (int32_t group : {32, 64}) {
      for (auto [rows, cols] : {std::pair<int64_t, int64_t>{3, 1},
                                {2, 31},
                                {5, 77},
                                {4, 200},
                                {2, 1031}}) {
        std::vector<float> src = RandomVector(rng, rows * cols, 0.1f);
        std::uniform_int_distribution<int> level(static_cast<int>(lo),
                                                 static_cast<int>(hi) - 1);
        std::uniform_int_distribution<int> power(-12, 2);
        const int64_t groups = (cols + group - 1) / group;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t g = 0; g < groups; g += 2) {  // every other: halves
            const float unit = std::ldexp(1.f, power(rng));
            const int64_t begin = g * group;
            const int64_t end = std::min<int64_t>(cols, begin + group);
            for (int64_t c = begin; c < end; ++c)
              src[r * cols + c] = (level(rng) + 0.5f) * unit;
            src[r * cols + begin] = top * unit;
            if (end - begin > 2) src[r * cols + end - 1] = -top * unit;
          }
        }
        const Matrix m{src.data(), WeightType::kF32, rows, cols};
        std::vector<uint8_t> data(QuantizedDataBytes(type, rows, cols, group));
        std::vector<uint16_t> scales(
            QuantizedScaleCount(type, rows, cols, group));
        QuantizeMatrix(m, type, group, data.data(), scales.data());
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t g = 0; g < groups; ++g) {
            float max_abs = 0.f, extreme = 0.f;
            for (int64_t c = g * group; c < std::min(cols, (g + 1) * group);
                 ++c) {
              const float v = src[r * cols + c];
              max_abs = std::max(max_abs, std::abs(v));
              if (std::abs(v) > std::abs(extreme)) extreme = v;
            }
            EXPECT_EQ(scales[r * groups + g],
                      F32ToF16(type == WeightType::kInt8 ? max_abs / 127.f
                                                         : extreme / -8.f))
                << WeightTypeName(type) << " row " << r << " group " << g;
          }
          for (int64_t c = 0; c < cols; ++c) {
            const int64_t g = c / group;
            const float rounded = F16ToF32(scales[r * groups + g]);
            const float inv = rounded != 0 ? 1.f / rounded : 0.f;
            const long want =
                std::clamp<long>(std::lround(src[r * cols + c] * inv), lo, hi);
            const int64_t at = r * groups * group + c;
            const long got =
                type == WeightType::kInt8
                    ? static_cast<int8_t>(data[at])
                    : static_cast<long>((data[at / 2] >> (4 * (c & 1))) & 15) -
                          8;
            ASSERT_EQ(got, want)
                << WeightTypeName(type) << " group " << group << " [" << rows
                << ", " << cols << "] at " << r << "," << c << ": "
                << src[r * cols + c] << " * " << inv;
          }
        }
      }
    }
  }
}

// RoundToLevel (the scalar path's) and the dispatched path's levels of
// values QuantizeMatrix never builds from finite weights: infinities clamp
// to the ends, NaN is the lowest level; and both agree on halves and
// near-halves.
TEST_P(PathTest, RoundToLevelClampsInfinitiesAndNan) {
  const std::vector<float> x = {
      0.5f,     -0.5f,     1.5f, -2.5f, 0.49999997f, 126.5f, -127.5f, 300.f,
      INFINITY, -INFINITY, NAN,  -0.f,  2.4999998f,  7.5f,   -8.5f,   1e-30f};
  for (auto [lo, hi] : {std::pair<float, float>{-127, 127}, {-8, 7}}) {
    for (float v : x) {
      const int want = std::isnan(v) ? static_cast<int>(lo)
                       : v >= hi     ? static_cast<int>(hi)
                       : v <= lo     ? static_cast<int>(lo)
                                     : static_cast<int>(std::lround(v));
      EXPECT_EQ(RoundToLevel(v, lo, hi), want) << v << " in " << lo;
    }
  }
  // Through QuantizeMatrix: a row of one group whose largest magnitude sets
  // a scale of 1, so the levels are the values rounded.
  std::vector<float> row = {127.f,  0.5f,    -0.5f,       1.5f,      -2.5f,
                            126.5f, -126.5f, 0.49999997f, 2.4999998f};
  const Matrix m{row.data(), WeightType::kF32, 1,
                 static_cast<int64_t>(row.size())};
  std::vector<uint8_t> data(
      QuantizedDataBytes(WeightType::kInt8, 1, m.cols, 32));
  std::vector<uint16_t> scales(1);
  QuantizeMatrix(m, WeightType::kInt8, 32, data.data(), scales.data());
  ASSERT_EQ(F16ToF32(scales[0]), 1.f);
  const std::vector<int> want = {127, 1, -1, 2, -3, 127, -127, 0, 2};
  for (size_t i = 0; i < row.size(); ++i)
    EXPECT_EQ(static_cast<int8_t>(data[i]), want[i]) << row[i];
}

INSTANTIATE_TEST_SUITE_P(BothPaths, PathTest, ::testing::Bool(),
                         [](const auto& info) {
                           return std::string(info.param ? "scalar"
                                                         : "dispatched");
                         });

}  // namespace
}  // namespace ringmoe::kernels

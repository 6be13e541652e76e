#include "engine/backend/backend_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace ringmoe::backend {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The decoders below follow kernels/weight_format.h field by field.
double F16Value(uint16_t h) {
  const int exponent = (h >> 10) & 31, mantissa = h & 1023;
  const double v = exponent == 0 ? std::ldexp(mantissa, -24)
                                 : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) ? -v : v;
}

double Bf16Value(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

double Fp8E4M3Value(uint8_t code) {
  const int exponent = (code >> 3) & 15, mantissa = code & 7;
  const double v = exponent == 0 ? std::ldexp(mantissa, -9)
                                 : std::ldexp(8 + mantissa, exponent - 10);
  return (code & 0x80) ? -v : v;
}

double E2m1Value(int code) {
  const int exponent = (code >> 1) & 3, mantissa = code & 1;
  const double v =
      exponent == 0 ? 0.5 * mantissa : std::ldexp(2 + mantissa, exponent - 2);
  return (code & 8) ? -v : v;
}

uint16_t Load16(const uint8_t* p) { return p[0] | (p[1] << 8); }

void Store16(uint16_t v, uint8_t* p) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}

// Nibble `c` of a row (element 2i in the low nibble of byte i).
int Nibble(const uint8_t* row, int64_t c) {
  return (c % 2 == 1) ? row[c / 2] >> 4 : row[c / 2] & 15;
}

// A random f16 of either sign with its exponent field in [low, high].
uint16_t RandomF16(int low, int high, std::mt19937* rng) {
  std::uniform_int_distribution<int> exponent(low, high), mantissa(0, 1023),
      sign(0, 1);
  return static_cast<uint16_t>((sign(*rng) << 15) | (exponent(*rng) << 10) |
                               mantissa(*rng));
}

}  // namespace

std::vector<float> Random(int64_t n, std::mt19937* rng, float sd) {
  std::normal_distribution<float> normal(0.f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = normal(*rng);
  return v;
}

Weight F32Weight(const std::vector<float>& data, int64_t rows, int64_t cols) {
  Weight w;
  w.data = data.data();
  w.rows = rows;
  w.cols = cols;
  return w;
}

Tensor Of(std::vector<float>& v, int64_t rows, int64_t cols) {
  return {v.data(), rows, cols};
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                double tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tolerance * (1 + std::abs(want[i])))
        << what << " at " << i;
  }
}

std::string FormatName(const WeightFormat& format) {
  std::string name = kernels::WeightTypeName(format.type);
  if (format.group_size > 0) absl::StrAppend(&name, "/g", format.group_size);
  if (format.block_rows > 0) {
    absl::StrAppend(&name, "/", format.block_rows, "x", format.block_cols);
  }
  return name;
}

std::vector<WeightFormat> AllWeightFormats() {
  return {{WeightType::kF32},
          {WeightType::kBF16},
          {WeightType::kF16},
          {WeightType::kInt8, 32},
          {WeightType::kInt8, 64},
          {WeightType::kInt4, 32},
          {WeightType::kInt4, 64},
          {WeightType::kFp8E4M3, 0, 16, 32},
          {WeightType::kFp8E4M3, 0, 4, 8},
          {WeightType::kMxfp4}};
}

TestWeight MakeTestWeight(const WeightFormat& format, int64_t rows,
                          int64_t cols, std::mt19937* rng) {
  TestWeight t;
  Weight& w = t.weight;
  w.type = format.type;
  w.rows = rows;
  w.cols = cols;
  std::uniform_int_distribution<int> byte(0, 255);
  switch (format.type) {
    case WeightType::kF32: {
      const std::vector<float> values = Random(rows * cols, rng, 0.3f);
      t.bytes.resize(values.size() * sizeof(float));
      std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
      break;
    }
    case WeightType::kBF16: {
      // Truncated float32 bits: any bf16 is valid, and the decoded value is
      // whatever the stored bits say.
      const std::vector<float> values = Random(rows * cols, rng, 0.3f);
      t.bytes.resize(values.size() * 2);
      for (size_t i = 0; i < values.size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &values[i], sizeof(bits));
        Store16(static_cast<uint16_t>(bits >> 16), &t.bytes[2 * i]);
      }
      break;
    }
    case WeightType::kF16:
      // Magnitudes below 2, subnormals included.
      t.bytes.resize(rows * cols * 2);
      for (int64_t i = 0; i < rows * cols; ++i) {
        Store16(RandomF16(0, 15, rng), &t.bytes[2 * i]);
      }
      break;
    case WeightType::kInt8:
    case WeightType::kInt4: {
      const int32_t group = format.group_size;
      const int64_t groups = CeilDiv(cols, group);
      const bool int8 = format.type == WeightType::kInt8;
      const int64_t row_bytes = int8 ? groups * group : groups * group / 2;
      // Zero padding: 0 for int8, nibble 8 for int4.
      t.bytes.assign(rows * row_bytes, int8 ? 0 : 0x88);
      std::uniform_int_distribution<int> q(-127, 127), nibble(0, 15);
      for (int64_t r = 0; r < rows; ++r) {
        uint8_t* row = t.bytes.data() + r * row_bytes;
        for (int64_t c = 0; c < cols; ++c) {
          if (int8) {
            row[c] = static_cast<uint8_t>(static_cast<int8_t>(q(*rng)));
          } else {
            const int shift = (c % 2) * 4;
            row[c / 2] = static_cast<uint8_t>((row[c / 2] & ~(15 << shift)) |
                                              (nibble(*rng) << shift));
          }
        }
      }
      // Scales of either sign (int4 quantization makes negative ones),
      // large enough that |w| reaches about 0.5.
      t.scales.resize(rows * groups);
      for (uint16_t& s : t.scales) {
        s = int8 ? RandomF16(3, 6, rng) : RandomF16(7, 10, rng);
      }
      w.scales = t.scales.data();
      w.group_size = group;
      break;
    }
    case WeightType::kFp8E4M3: {
      // Every code but the two NaNs, subnormals included, and block scales
      // that differ by up to 2^4 between neighbours.
      t.bytes.resize(rows * cols);
      for (uint8_t& b : t.bytes) {
        int code = byte(*rng);
        if ((code & 0x7f) == 0x7f) code = 0;
        b = static_cast<uint8_t>(code);
      }
      w.block_rows = format.block_rows;
      w.block_cols = format.block_cols;
      t.block_scales.resize(CeilDiv(rows, format.block_rows) *
                            CeilDiv(cols, format.block_cols));
      std::uniform_int_distribution<int> exponent(-14, -10);
      for (float& s : t.block_scales) {
        s = std::ldexp(1.f + byte(*rng) / 256.f, exponent(*rng));
      }
      w.block_scales = t.block_scales.data();
      break;
    }
    case WeightType::kMxfp4: {
      const int64_t blocks = CeilDiv(cols, kernels::kMxfp4Block);
      t.bytes.resize(rows * blocks * kernels::kMxfp4Block / 2);
      for (uint8_t& b : t.bytes) b = static_cast<uint8_t>(byte(*rng));
      // 2^-8 to 2^-2: |w| up to 1.5.
      std::uniform_int_distribution<int> exponent(119, 125);
      t.exponents.resize(rows * blocks);
      for (uint8_t& e : t.exponents) e = static_cast<uint8_t>(exponent(*rng));
      w.exponents = t.exponents.data();
      break;
    }
  }
  w.data = t.bytes.data();
  t.values = DecodeWeight(w);
  return t;
}

std::vector<double> DecodeWeight(const Weight& w) {
  const int64_t rows = w.rows, cols = w.cols;
  const uint8_t* data = static_cast<const uint8_t*>(w.data);
  std::vector<double> values(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      double v = 0;
      switch (w.type) {
        case WeightType::kF32: {
          float f;
          std::memcpy(&f, data + (r * cols + c) * 4, sizeof(f));
          v = f;
          break;
        }
        case WeightType::kBF16:
          v = Bf16Value(Load16(data + (r * cols + c) * 2));
          break;
        case WeightType::kF16:
          v = F16Value(Load16(data + (r * cols + c) * 2));
          break;
        case WeightType::kInt8:
        case WeightType::kInt4: {
          const int64_t groups = CeilDiv(cols, w.group_size);
          const double scale =
              F16Value(w.scales[r * groups + c / w.group_size]);
          if (w.type == WeightType::kInt8) {
            v = static_cast<int8_t>(data[r * groups * w.group_size + c]) *
                scale;
          } else {
            v = (Nibble(data + r * groups * w.group_size / 2, c) - 8) * scale;
          }
          break;
        }
        case WeightType::kFp8E4M3:
          v = Fp8E4M3Value(data[r * cols + c]) *
              w.block_scales[r / w.block_rows * CeilDiv(cols, w.block_cols) +
                             c / w.block_cols];
          break;
        case WeightType::kMxfp4: {
          const int64_t blocks = CeilDiv(cols, kernels::kMxfp4Block);
          v = E2m1Value(
                  Nibble(data + r * blocks * kernels::kMxfp4Block / 2, c)) *
              std::ldexp(
                  1.0,
                  w.exponents[r * blocks + c / kernels::kMxfp4Block] - 127);
          break;
        }
      }
      values[r * cols + c] = v;
    }
  }
  return values;
}

std::vector<float> GridActivations(int64_t n, int64_t cols, int levels,
                                   std::mt19937* rng) {
  std::uniform_int_distribution<int> level(-levels, levels), sign(0, 1);
  const float step = 1.f / static_cast<float>(levels + 1);
  std::vector<float> x(n * cols);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      const int k = c % 32 == 0 ? (sign(*rng) ? levels : -levels) : level(*rng);
      x[i * cols + c] = static_cast<float>(k) * step;
    }
  }
  return x;
}

int ActivationLevels(WeightType type) {
  return type == WeightType::kInt8 ? 32767 : 127;
}

std::vector<double> ReferenceProduct(const std::vector<float>& x, int64_t n,
                                     const std::vector<double>& w, int64_t rows,
                                     int64_t cols) {
  std::vector<double> y(n * rows);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) {
        acc += double{x[i * cols + c]} * w[r * cols + c];
      }
      y[i * rows + r] = acc;
    }
  }
  return y;
}

std::vector<double> ReferenceAttention(const AttentionJob& job,
                                       const std::vector<float>& q,
                                       const std::vector<HostKv>& sequences,
                                       const std::vector<float>& sinks) {
  const int64_t n = static_cast<int64_t>(job.position_of.size());
  const int64_t head_dim = job.head_dim, qw = job.heads * head_dim;
  const int64_t kvw = job.kv_heads * head_dim;
  std::vector<double> out(n * qw, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const HostKv& kv = sequences[job.sequence_of[t]];
    const int64_t end = job.position_of[t] + 1;
    const int64_t first =
        job.window > 0 ? std::max<int64_t>(0, end - job.window) : 0;
    for (int64_t h = 0; h < job.heads; ++h) {
      const int64_t kv_head = h / (job.heads / job.kv_heads);
      std::vector<double> score;
      double best = -INFINITY;
      for (int64_t p = first; p < end; ++p) {
        double dot = 0;
        for (int64_t d = 0; d < head_dim; ++d) {
          dot += double{q[t * qw + h * head_dim + d]} *
                 kv.keys[p * kvw + kv_head * head_dim + d];
        }
        score.push_back(dot * job.scale);
        best = std::max(best, score.back());
      }
      double sum = sinks.empty() ? 0.0 : std::exp(sinks[h] - best);
      for (double& e : score) sum += (e = std::exp(e - best));
      for (int64_t p = first; p < end; ++p) {
        for (int64_t d = 0; d < head_dim; ++d) {
          out[t * qw + h * head_dim + d] +=
              score[p - first] / sum *
              kv.values[p * kvw + kv_head * head_dim + d];
        }
      }
    }
  }
  return out;
}

}  // namespace ringmoe::backend

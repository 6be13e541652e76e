#include "kernels/cpu/ops.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/numeric.h"

namespace ringmoe::kernels {
namespace {

int64_t GroupsPerRow(int64_t cols, int32_t group_size) {
  return (cols + group_size - 1) / group_size;
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Columns [row_begin, row_end) of y[n, w.rows] = x[n, w.cols] · wᵀ, one
// weight row at a time, widened to float.
void MatMulRowsScalar(const float* x, int64_t n, const Matrix& w,
                      int64_t row_begin, int64_t row_end, float* y) {
  std::vector<float> row(w.cols);
  for (int64_t r = row_begin; r < row_end; ++r) {
    ReadRow(w, r, row.data());
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * w.cols;
      float acc = 0.f;
      for (int64_t c = 0; c < w.cols; ++c) acc += xi[c] * row[c];
      y[i * w.rows + r] = acc;
    }
  }
}

// A product as its kernel reads it: the float32 activations, or for the
// AVX512-BF16 path the same rounded to bf16 in rows of ldx (a multiple of
// 32) with zeros past w.cols, or for the integer products of mxfp4 weights
// (`mxfp4`) and of int8 and int4 weights (`integer` on AVX-512, `direct`
// on AVX2) the same quantized.
struct PreparedProduct {
  const float* x = nullptr;
  const uint16_t* xb = nullptr;
  int64_t ldx = 0;
  avx2::Mxfp4QuantizedRows mxfp4;
  avx512::IntegerActivations integer;
  avx2::DirectActivations direct;
  int64_t n = 0;
  int64_t batch_rows = 0;  // MatMulJob's, at least n
  Matrix w;
  float* y = nullptr;
  KernelPath path = KernelPath::kScalar;
  // Int8 levels of the integer products' activations: 1 under
  // ActivationPrecision::kInt8, 2 for mxfp4 weights under kBf16, else
  // mxfp4's three.
  int activation_levels = avx2::kMxfp4Levels;
};

// What a PreparedProduct's prepared activations are stored in.
struct PreparedActivations {
  // 64 bytes aligned for 512-bit loads: 16 block scales or offsets, or a
  // 64th of a row of quantized activations.
  struct alignas(64) Line {
    float v[16];
  };
  // `lines` resized to hold `count` items of `unit_bytes`, as bytes (null
  // when there are none).
  static void* Resize(std::vector<Line>* lines, int64_t count,
                      int64_t unit_bytes) {
    lines->resize(static_cast<size_t>(CeilDiv(count * unit_bytes, 64)));
    return lines->data();
  }
  // The same for `count` floats.
  static float* ResizeFloats(std::vector<Line>* lines, int64_t count) {
    return static_cast<float*>(Resize(lines, count, sizeof(float)));
  }
  std::vector<uint16_t> bf16;
  std::vector<avx2::Mxfp4Span> mxfp4_spans;
  std::vector<Line> rows, scales, offsets;
};

// Whether an AVX2 int8 product takes its one activation row as one int8
// level (Q8_0 × Q8_0): under ActivationPrecision::kInt8, and only for a row
// alone; else as int16.
bool OneInt8Level(const PreparedProduct& p) {
  return p.activation_levels == 1 && p.batch_rows == 1;
}

// `job` prepared for its path, its activations rounded or quantized once
// into `storage` where the path takes them so: once for the whole
// product, not once per piece of it that a thread takes.
PreparedProduct Prepare(const MatMulJob& job, PreparedActivations* storage) {
  PreparedProduct p;
  p.x = job.x;
  p.n = job.n;
  p.batch_rows = std::max(job.n, job.batch_rows);
  p.w = job.w;
  p.y = job.y;
  p.path = ProductPath(job);
  if (job.precision == ActivationPrecision::kInt8) p.activation_levels = 1;
  if (job.precision == ActivationPrecision::kBf16 &&
      job.w.type == WeightType::kMxfp4) {
    p.activation_levels = 2;
  }
  if (p.path == KernelPath::kAvx512Bf16 && job.w.type == WeightType::kBF16) {
    p.ldx = CeilDiv(job.w.cols, 32) * 32;
    storage->bf16.resize(static_cast<size_t>(job.n * p.ldx));
    avx512bf16::RoundToBf16(job.x, job.n, job.w.cols, p.ldx,
                            storage->bf16.data());
    p.xb = storage->bf16.data();
  }
  const bool integer_mxfp4 =
      job.w.type == WeightType::kMxfp4 &&
      (p.path == KernelPath::kAvx512 ||
       (p.path == KernelPath::kAvx2 &&
        p.batch_rows <= DirectProductRows(WeightType::kMxfp4)));
  if (integer_mxfp4) {
    const avx2::Mxfp4QuantizedRows layout =
        avx2::Mxfp4QuantizedLayout(job.w.cols);
    const int64_t scale_count = job.n * layout.padded_blocks;
    storage->mxfp4_spans.resize(static_cast<size_t>(job.n * layout.num_spans));
    // Only the AVX2 kernels take the blocks' offsets (and scales arranged).
    float* offsets = nullptr;
    if (p.path == KernelPath::kAvx2) {
      offsets =
          PreparedActivations::ResizeFloats(&storage->offsets, scale_count);
    }
    p.mxfp4 = avx2::QuantizeMxfp4Rows(
        job.x, job.n, job.w.cols, p.activation_levels,
        storage->mxfp4_spans.data(),
        PreparedActivations::ResizeFloats(&storage->scales, scale_count),
        offsets);
  }
  if (p.path == KernelPath::kAvx512 &&
      (job.w.type == WeightType::kInt8 || job.w.type == WeightType::kInt4)) {
    const avx512::IntegerActivations layout =
        avx512::IntegerActivationLayout(job.w);
    p.integer = avx512::PrepareIntegerActivations(
        job.x, job.n, job.w, p.activation_levels,
        PreparedActivations::Resize(&storage->rows, job.n, layout.row_bytes),
        PreparedActivations::ResizeFloats(&storage->scales,
                                          job.n * layout.padded_blocks));
  }
  if (p.path == KernelPath::kAvx2 &&
      (job.w.type == WeightType::kInt8 || job.w.type == WeightType::kInt4) &&
      p.batch_rows <= DirectProductRows(job.w.type)) {
    const bool one_level = OneInt8Level(p);
    const avx2::DirectActivations layout =
        avx2::DirectActivationLayout(job.w, job.n, one_level);
    p.direct = avx2::PrepareDirectActivations(
        job.x, job.n, job.w, one_level,
        PreparedActivations::Resize(&storage->rows, layout.q_bytes, 1),
        PreparedActivations::ResizeFloats(&storage->scales,
                                          layout.scale_count));
  }
  return p;
}

// Columns [row_begin, row_end) of y[n, w.rows] = x[n, w.cols] · wᵀ.
void MatMulRows(const PreparedProduct& p, int64_t row_begin, int64_t row_end) {
  switch (p.path) {
    case KernelPath::kAvx512Bf16:
      if (p.w.type == WeightType::kFp8E4M3) {
        return avx512bf16::MatMulRowFp8(p.x, p.w, row_begin, row_end, p.y);
      }
      return avx512bf16::MatMulRows(p.xb, p.ldx, p.n, p.w, row_begin, row_end,
                                    p.y, p.batch_rows);
    case KernelPath::kAvx512:
      if (p.w.type == WeightType::kMxfp4) {
        return avx512::MatMulRowsMxfp4(p.mxfp4, p.n, p.w, row_begin, row_end,
                                       p.y, p.activation_levels);
      }
      if (p.w.type == WeightType::kInt4) {
        return avx512::MatMulRowsInt4(p.integer, p.n, p.w, row_begin, row_end,
                                      p.y);
      }
      if (p.w.type == WeightType::kInt8) {
        return avx512::MatMulRowsInt8(p.integer, p.n, p.w, row_begin, row_end,
                                      p.y, p.activation_levels);
      }
      if (p.w.type == WeightType::kBF16) {
        return avx512::MatMulRowsBf16(p.x, p.n, p.w, row_begin, row_end, p.y);
      }
      return avx512::MatMulRow(p.x, p.w, row_begin, row_end, p.y);
    case KernelPath::kAvx2:
      if (p.batch_rows <= DirectProductRows(p.w.type)) {
        const bool alone = p.batch_rows == 1;
        switch (p.w.type) {
          case WeightType::kMxfp4:
            return avx2::MatMulRowsMxfp4(p.mxfp4, p.n, p.w, row_begin, row_end,
                                         p.y, alone, p.activation_levels);
          case WeightType::kInt8:
            return avx2::MatMulRowsInt8(p.direct, p.n, p.w, row_begin, row_end,
                                        p.y, alone, OneInt8Level(p));
          case WeightType::kInt4:
            return avx2::MatMulRowsInt4(p.direct, p.n, p.w, row_begin, row_end,
                                        p.y, alone);
          default:
            return avx2::MatMulRowsDirect(p.x, p.n, p.w, row_begin, row_end,
                                          p.y, alone);
        }
      }
      return avx2::MatMulRowsBlocked(p.x, p.n, p.w, row_begin, row_end, p.y);
    case KernelPath::kScalar:
      return MatMulRowsScalar(p.x, p.n, p.w, row_begin, row_end, p.y);
  }
}

}  // namespace

float Dot(const float* a, const float* b, int64_t n) {
  if (UseAvx2()) return avx2::Dot(a, b, n);
  float acc = 0.f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  if (UseAvx2()) return avx2::Axpy(alpha, x, n, y);
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

const char* ActivationPrecisionName(ActivationPrecision precision) {
  switch (precision) {
    case ActivationPrecision::kF32:
      return "f32";
    case ActivationPrecision::kBf16:
      return "bf16";
    case ActivationPrecision::kInt8:
      return "int8";
  }
  return "?";
}

const char* KernelPathName(KernelPath path) {
  switch (path) {
    case KernelPath::kScalar:
      return "scalar";
    case KernelPath::kAvx2:
      return "avx2";
    case KernelPath::kAvx512:
      return "avx512";
    case KernelPath::kAvx512Bf16:
      return "avx512_bf16";
  }
  return "?";
}

int64_t DirectProductRows(WeightType type) {
  switch (type) {
    case WeightType::kInt4:
      return std::numeric_limits<int64_t>::max();
    case WeightType::kInt8:
      return 64;
    case WeightType::kMxfp4:
      return 8;
    default:
      return 32;
  }
}

int64_t Mxfp4IntegerProductRows() {
  return UseAvx2() ? DirectProductRows(WeightType::kMxfp4) : 0;
}

namespace {

// The most activation rows the AVX-512 int8 and int4 products take: a
// batched decode's (its experts get fewer); prefill's go to the AVX2 tiles.
constexpr int64_t kAvx512IntegerRows = 8;

// Whether avx512.cc has a product of n activation rows of `type`: one row
// of fp8; int8 and int4 up to kAvx512IntegerRows; mxfp4 up to
// DirectProductRows; bf16 from 2 rows to DirectProductRows (one row of
// bf16 is bound by memory on the AVX2 path already).
bool HasAvx512Product(WeightType type, int64_t n) {
  switch (type) {
    case WeightType::kFp8E4M3:
      return n == 1;
    case WeightType::kInt8:
    case WeightType::kInt4:
      return n <= kAvx512IntegerRows;
    case WeightType::kMxfp4:
      return n <= DirectProductRows(type);
    case WeightType::kBF16:
      return n >= 2 && n <= DirectProductRows(type);
    default:
      return false;
  }
}

}  // namespace

KernelPath ProductPath(WeightType type, int64_t n,
                       ActivationPrecision precision) {
  if (precision != ActivationPrecision::kF32 &&
      ((type == WeightType::kBF16 && UseAvx512Bf16()) ||
       (type == WeightType::kFp8E4M3 && n == 1 && UseAvx512Bf16Vbmi()))) {
    return KernelPath::kAvx512Bf16;
  }
  return UseAvx512() && HasAvx512Product(type, n) ? KernelPath::kAvx512
                                                  : VectorPath();
}

KernelPath ProductPath(const MatMulJob& job) {
  return ProductPath(job.w.type, std::max(job.n, job.batch_rows),
                     job.precision);
}

KernelPath VectorPath() {
  return UseAvx2() ? KernelPath::kAvx2 : KernelPath::kScalar;
}

int64_t BlockScaleCount(const Matrix& w) {
  return BlockScaleCount(w.type, w.rows, w.cols, w.block_rows, w.block_cols);
}

int64_t MatrixBytes(const Matrix& w) {
  return QuantizedDataBytes(w.type, w.rows, w.cols, w.group_size) +
         BlockExponentCount(w.type, w.rows, w.cols) +
         QuantizedScaleCount(w.type, w.rows, w.cols, w.group_size) *
             static_cast<int64_t>(sizeof(uint16_t)) +
         BlockScaleCount(w) * static_cast<int64_t>(sizeof(float));
}

namespace {

// `scale` as an f16 whose magnitude is at most the largest finite one.
uint16_t SaturatedF16(float scale) {
  const uint16_t h = F32ToF16(scale);
  return (h & 0x7fffu) > 0x7bffu && (h & 0x7fffu) <= 0x7c00u
             ? static_cast<uint16_t>((h & 0x8000u) | 0x7bffu)
             : h;
}

// The largest |x[i]|, i < n, NaN ignored (0 when there is none).
float MaxAbs(const float* x, int64_t n) {
  if (UseAvx2()) return avx2::MaxAbs(x, n);
  float max = 0.f;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, std::abs(x[i]));
  return max;
}

// out[i] = RoundToLevel(x[i] * scale, lo, hi) for i < n.
void RoundToLevels(const float* x, int64_t n, float scale, float lo, float hi,
                   int8_t* out) {
  if (UseAvx2()) return avx2::RoundToLevels(x, n, scale, lo, hi, out);
  for (int64_t i = 0; i < n; ++i) out[i] = RoundToLevel(x[i] * scale, lo, hi);
}

}  // namespace

Matrix QuantizeMatrix(const Matrix& src, WeightType type, int32_t group_size,
                      void* data, uint16_t* scales) {
  const bool grouped = type == WeightType::kInt8 || type == WeightType::kInt4;
  Matrix out{data, type, src.rows, src.cols, scales, grouped ? group_size : 0};
  const int64_t cols = src.cols;
  std::vector<float> row(cols);
  std::vector<int8_t> levels(grouped ? group_size : 0);  // int4: one group's
  for (int64_t r = 0; r < src.rows; ++r) {
    ReadRow(src, r, row.data());
    switch (type) {
      case WeightType::kF32:
        std::copy(row.begin(), row.end(), static_cast<float*>(data) + r * cols);
        break;
      case WeightType::kBF16:
      case WeightType::kF16: {
        uint16_t* dst = static_cast<uint16_t*>(data) + r * cols;
        for (int64_t c = 0; c < cols; ++c) {
          dst[c] =
              type == WeightType::kBF16 ? F32ToBf16(row[c]) : F32ToF16(row[c]);
        }
        break;
      }
      case WeightType::kInt8: {
        const int64_t groups = GroupsPerRow(cols, group_size);
        int8_t* dst = static_cast<int8_t*>(data) + r * groups * group_size;
        std::fill(dst, dst + groups * group_size, 0);  // zero padding
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t begin = g * group_size;
          const int64_t end = std::min(cols, begin + group_size);
          const uint16_t scale =
              SaturatedF16(MaxAbs(row.data() + begin, end - begin) / 127.f);
          const float rounded = F16ToF32(scale);
          const float inv = rounded > 0 ? 1.f / rounded : 0.f;
          RoundToLevels(row.data() + begin, end - begin, inv, -127.f, 127.f,
                        dst + begin);
          scales[r * groups + g] = scale;
        }
        break;
      }
      case WeightType::kInt4: {
        const int64_t groups = GroupsPerRow(cols, group_size);
        uint8_t* dst =
            static_cast<uint8_t*>(data) + r * groups * group_size / 2;
        std::fill(dst, dst + groups * group_size / 2, 0x88);  // zero padding
        for (int64_t g = 0; g < groups; ++g) {
          const int64_t begin = g * group_size;
          const int64_t end = std::min(cols, begin + group_size);
          // The largest-magnitude value (the first of them) maps to -8,
          // the one code with no positive twin, so the full 16 levels are
          // used.
          const float max_abs = MaxAbs(row.data() + begin, end - begin);
          float extreme = 0.f;
          for (int64_t c = begin; max_abs > 0 && c < end; ++c) {
            if (std::abs(row[c]) == max_abs) {
              extreme = row[c];
              break;
            }
          }
          const uint16_t scale = SaturatedF16(extreme / -8.f);
          const float rounded = F16ToF32(scale);
          const float inv = rounded != 0 ? 1.f / rounded : 0.f;
          RoundToLevels(row.data() + begin, end - begin, inv, -8.f, 7.f,
                        levels.data());
          // Groups start at even columns: the codes (levels + 8) pair up
          // into bytes, the even column in the low nibble; a row's odd last
          // column keeps the padding's code 8 beside it.
          const int64_t n = end - begin;
          uint8_t* out = dst + begin / 2;
          for (int64_t k = 0; k + 1 < n; k += 2) {
            out[k / 2] = static_cast<uint8_t>((levels[k] + 8) |
                                              ((levels[k + 1] + 8) << 4));
          }
          if (n % 2 == 1) {
            out[n / 2] =
                static_cast<uint8_t>((out[n / 2] & 0xf0) | (levels[n - 1] + 8));
          }
          scales[r * groups + g] = scale;
        }
        break;
      }
      case WeightType::kFp8E4M3:
      case WeightType::kMxfp4:
        // Not conversion targets (documented in ops.h).
        std::abort();
    }
  }
  return out;
}

void ReadRow(const Matrix& w, int64_t row, float* out) {
  const int64_t base = row * w.cols;
  switch (w.type) {
    case WeightType::kF32:
      std::copy_n(static_cast<const float*>(w.data) + base, w.cols, out);
      break;
    case WeightType::kBF16: {
      const auto* p = static_cast<const uint16_t*>(w.data) + base;
      for (int64_t c = 0; c < w.cols; ++c) out[c] = Bf16ToF32(p[c]);
      break;
    }
    case WeightType::kF16: {
      const auto* p = static_cast<const uint16_t*>(w.data) + base;
      for (int64_t c = 0; c < w.cols; ++c) out[c] = F16ToF32(p[c]);
      break;
    }
    case WeightType::kInt8:
    case WeightType::kInt4: {
      // Each group's scale is converted once, not once per weight.
      const int64_t groups = GroupsPerRow(w.cols, w.group_size);
      const int64_t row_values = row * groups * w.group_size;
      const auto* bytes = static_cast<const uint8_t*>(w.data);
      for (int64_t g = 0; g < groups; ++g) {
        const float scale = F16ToF32(w.scales[row * groups + g]);
        const int64_t end = std::min(w.cols, (g + 1) * w.group_size);
        for (int64_t c = g * w.group_size; c < end; ++c) {
          const int64_t i = row_values + c;
          const int q =
              w.type == WeightType::kInt8
                  ? static_cast<int8_t>(bytes[i])
                  : ((i & 1) ? bytes[i / 2] >> 4 : bytes[i / 2] & 15) - 8;
          out[c] = q * scale;
        }
      }
      break;
    }
    case WeightType::kMxfp4: {
      const int64_t blocks = CeilDiv(w.cols, kMxfp4Block);
      const auto* bytes =
          static_cast<const uint8_t*>(w.data) + row * blocks * kMxfp4Block / 2;
      for (int64_t b = 0; b < blocks; ++b) {
        // Twice the e2m1 value times half the scale: both exact.
        const float half_scale =
            E8m0ToF32(w.exponents[row * blocks + b]) * 0.5f;
        const int64_t end = std::min(w.cols, (b + 1) * kMxfp4Block);
        for (int64_t c = b * kMxfp4Block; c < end; ++c) {
          const uint8_t byte = bytes[c / 2];
          out[c] = static_cast<float>(
                       E2m1TimesTwo((c & 1) ? byte >> 4 : byte & 15)) *
                   half_scale;
        }
      }
      break;
    }
    case WeightType::kFp8E4M3: {
      const auto* bytes = static_cast<const uint8_t*>(w.data) + base;
      const float* scales =
          w.block_scales + row / w.block_rows * CeilDiv(w.cols, w.block_cols);
      for (int64_t c = 0; c < w.cols; ++c) {
        out[c] = Fp8E4M3ToF32(bytes[c]) * scales[c / w.block_cols];
      }
      break;
    }
  }
}

void MatMulTransposed(const float* x, int64_t n, const Matrix& w, float* y) {
  MatMulTransposedRows(x, n, w, 0, w.rows, y);
}

void MatMulTransposedRows(const float* x, int64_t n, const Matrix& w,
                          int64_t row_begin, int64_t row_end, float* y,
                          int64_t batch_rows) {
  PreparedActivations storage;
  MatMulJob job{x, n, w, y};
  job.batch_rows = batch_rows;
  MatMulRows(Prepare(job, &storage), row_begin, row_end);
}

void AccumulateRowProducts(const float* c, int64_t ldc, int64_t n,
                           const Matrix& w, int64_t row_begin, int64_t row_end,
                           float* y, int64_t ldy) {
  if (UseAvx2() && w.type != WeightType::kInt4) {
    return avx2::AccumulateRows(c, ldc, n, w, row_begin, row_end, y, ldy);
  }
  std::vector<float> row(w.cols);
  for (int64_t r = row_begin; r < row_end; ++r) {
    ReadRow(w, r, row.data());
    for (int64_t i = 0; i < n; ++i) {
      const float s = c[i * ldc + r - row_begin];
      float* yi = y + i * ldy;
      for (int64_t k = 0; k < w.cols; ++k) yi[k] += s * row[k];
    }
  }
}

void MatMulBatch(absl::Span<const MatMulJob> jobs, ThreadPool* pool) {
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  std::vector<PreparedActivations> storage(jobs.size());
  std::vector<PreparedProduct> prepared;
  prepared.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i)
    prepared.push_back(Prepare(jobs[i], &storage[i]));
  if (threads == 1) {
    for (const PreparedProduct& p : prepared) MatMulRows(p, 0, p.w.rows);
    return;
  }
  // Row slices of every job, claimed in order by whichever thread is free.
  // Each slice takes 1/threads of the work still left after it (guided
  // self-scheduling): the first slices are large, so there are few claims
  // and few restarts of the sequential weight streams that the decode
  // kernels rely on, and the last ones are small, so the threads finish
  // together. Equal slices, a few per thread, left one thread idle for half a
  // slice on average at the end of every loop, a few percent of a decode
  // step (about 80 loops); slices of 1/(3·threads) of the work left measured
  // 5% slower than this. Slices are multiples of 8 rows, so no tile of 4
  // rows straddles two.
  struct Slice {
    const PreparedProduct* product;
    int64_t begin, end;
  };
  const auto cost_of = [](const PreparedProduct& p) {
    return MatrixBytes(p.w) + p.n * p.w.rows * p.w.cols / 8;
  };
  int64_t remaining = 0;
  for (const PreparedProduct& p : prepared) remaining += cost_of(p);
  // Below this a claim's cost (a contended atomic, the hardware prefetchers
  // picking up a new stream) starts to show against the slice's work.
  constexpr int64_t kMinSliceCost = 256 << 10;
  std::vector<Slice> slices;
  for (const PreparedProduct& p : prepared) {
    const int64_t rows = p.w.rows;
    if (rows == 0) continue;
    const int64_t cost = cost_of(p);
    for (int64_t r = 0; r < rows;) {
      const int64_t want =
          std::max<int64_t>(remaining / threads, kMinSliceCost);
      const int64_t take = std::min(
          rows - r,
          std::max<int64_t>(
              8, (want * rows / std::max<int64_t>(cost, 1) + 7) / 8 * 8));
      slices.push_back({&p, r, r + take});
      remaining -= cost * take / rows;
      r += take;
    }
  }
  // A slice's rows are taken in quarters (multiples of 8 rows): by its
  // first taker from the front, one sequential stream, and by a thread
  // with no untaken slice left from the back of the slice with the most
  // rows left. A thread that loses its core to another process mid-slice
  // then delays the loop by at most a quarter of a slice, not the rest of
  // it. Each slice's untaken rows are [low 32 bits, high 32 bits) of an
  // atomic word, so a take is one compare-and-swap.
  std::vector<std::atomic<uint64_t>> untaken(slices.size());
  std::vector<int64_t> chunk(slices.size());
  for (size_t i = 0; i < slices.size(); ++i) {
    const Slice& sl = slices[i];
    untaken[i].store(static_cast<uint64_t>(sl.begin) |
                     static_cast<uint64_t>(sl.end) << 32);
    chunk[i] = std::max<int64_t>(8, ((sl.end - sl.begin) / 4 + 7) / 8 * 8);
  }
  // Takes up to chunk[i] rows of slice i from the front (or the back):
  // false when none are left.
  const auto take = [&](size_t i, bool front, int64_t* b, int64_t* e) {
    uint64_t bounds = untaken[i].load();
    while (true) {
      const int64_t lo = static_cast<int64_t>(bounds & 0xffffffffu);
      const int64_t hi = static_cast<int64_t>(bounds >> 32);
      if (lo >= hi) return false;
      const int64_t rows = std::min(chunk[i], hi - lo);
      const uint64_t next = front ? static_cast<uint64_t>(lo + rows) |
                                        static_cast<uint64_t>(hi) << 32
                                  : static_cast<uint64_t>(lo) |
                                        static_cast<uint64_t>(hi - rows) << 32;
      if (untaken[i].compare_exchange_weak(bounds, next)) {
        *b = front ? lo : hi - rows;
        *e = front ? lo + rows : hi;
        return true;
      }
    }
  };
  std::atomic<size_t> next_slice{0};
  pool->ParallelFor(threads, [&](int64_t) {
    int64_t b, e;
    for (size_t i = next_slice.fetch_add(1); i < slices.size();
         i = next_slice.fetch_add(1)) {
      while (take(i, true, &b, &e)) MatMulRows(*slices[i].product, b, e);
    }
    while (true) {
      size_t most = slices.size();
      int64_t most_rows = 0;
      for (size_t i = 0; i < slices.size(); ++i) {
        const uint64_t bounds = untaken[i].load(std::memory_order_relaxed);
        const int64_t rows = static_cast<int64_t>(bounds >> 32) -
                             static_cast<int64_t>(bounds & 0xffffffffu);
        if (rows > most_rows) most = i, most_rows = rows;
      }
      if (most == slices.size()) return;
      if (take(most, false, &b, &e)) MatMulRows(*slices[most].product, b, e);
    }
  });
}

void AddBias(float* y, int64_t n, int64_t dim, const float* bias) {
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < dim; ++d) y[i * dim + d] += bias[d];
  }
}

void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim,
             float eps, float* y) {
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * dim;
    const float sum = Dot(xi, xi, dim);
    const float scale = 1.f / std::sqrt(sum / static_cast<float>(dim) + eps);
    float* yi = y + i * dim;
    if (UseAvx2()) {
      avx2::ScaleMul(xi, scale, weight, dim, yi);
      continue;
    }
    for (int64_t d = 0; d < dim; ++d) yi[d] = xi[d] * scale * weight[d];
  }
}

void ApplyRotaryHalf(float* x, int64_t num_heads, int64_t head_dim,
                     const float* cos, const float* sin) {
  if (UseAvx2()) {
    return avx2::RotaryHalf(x, num_heads, head_dim, cos, sin);
  }
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t j = 0; j < half; ++j) {
      const float a = v[j], b = v[j + half];
      v[j] = a * cos[j] - b * sin[j];
      v[j + half] = b * cos[j] + a * sin[j];
    }
  }
}

void ApplyRotaryInterleaved(float* x, int64_t count, int64_t stride,
                            int64_t dim, const float* cos, const float* sin) {
  for (int64_t h = 0; h < count; ++h) {
    float* v = x + h * stride;
    for (int64_t j = 0; j < dim / 2; ++j) {
      const float a = v[2 * j], b = v[2 * j + 1];
      v[2 * j] = a * cos[j] - b * sin[j];
      v[2 * j + 1] = b * cos[j] + a * sin[j];
    }
  }
}

void Softmax(float* x, int64_t n) {
  if (n <= 0) return;
  if (UseAvx2()) return avx2::Softmax(x, n);
  const float max = *std::max_element(x, x + n);
  float sum = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  if (UseAvx2()) return avx2::SiluMul(gate, up, n, out);
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.f + std::exp(-g)) * up[i];
  }
}

void TopK(const float* x, int64_t n, int k, int32_t* indices) {
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  k = static_cast<int>(std::min<int64_t>(k, n));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [x](int32_t a, int32_t b) {
                      return x[a] > x[b] || (x[a] == x[b] && a < b);
                    });
  std::copy_n(order.begin(), k, indices);
}

int32_t GreedyToken(const float* x, int64_t n) {
  int32_t best = -1;
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    // NaN fails the comparison, so it never wins; +inf ties FLT_MAX.
    const float value = std::min(x[i], std::numeric_limits<float>::max());
    if (value > max) {
      max = value;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

void AttendOneQueryPartial(const float* q, int64_t num_heads,
                           int64_t num_kv_heads, int64_t head_dim,
                           const KvBlocks& kv, int64_t first_position,
                           int64_t end_position, float scale, float* out,
                           float* log_sum_exp) {
  if (UseAvx2()) {
    return avx2::AttendPartial(
        q, num_heads, num_kv_heads, head_dim, kv.k_blocks, kv.v_blocks,
        kv.block_size, first_position, end_position, scale, out, log_sum_exp);
  }
  const int64_t group = num_heads / num_kv_heads;
  const int64_t row_width = num_kv_heads * head_dim;
  const int64_t num_positions = end_position - first_position;
  thread_local std::vector<float> scores;
  scores.resize(num_positions);
  for (int64_t h = 0; h < num_heads; ++h) {
    const float* qh = q + h * head_dim;
    const int64_t kv_offset = (h / group) * head_dim;
    float max = -INFINITY;
    for (int64_t i = 0; i < num_positions; ++i) {
      const int64_t p = first_position + i;
      const float* k = kv.k_blocks[p / kv.block_size] +
                       (p % kv.block_size) * row_width + kv_offset;
      scores[i] = Dot(qh, k, head_dim) * scale;
      max = std::max(max, scores[i]);
    }
    float sum = 0.f;
    for (int64_t i = 0; i < num_positions; ++i) {
      scores[i] = std::exp(scores[i] - max);
      sum += scores[i];
    }
    float* oh = out + h * head_dim;
    std::fill(oh, oh + head_dim, 0.f);
    const float inv = 1.f / sum;
    for (int64_t i = 0; i < num_positions; ++i) {
      const int64_t p = first_position + i;
      const float* v = kv.v_blocks[p / kv.block_size] +
                       (p % kv.block_size) * row_width + kv_offset;
      Axpy(scores[i] * inv, v, head_dim, oh);
    }
    log_sum_exp[h] = max + std::log(sum);
  }
}

void AttendOneQuery(const float* q, int64_t num_heads, int64_t num_kv_heads,
                    int64_t head_dim, const KvBlocks& kv,
                    int64_t first_position, int64_t end_position, float scale,
                    float* out) {
  thread_local std::vector<float> log_sum_exp;
  log_sum_exp.resize(num_heads);
  AttendOneQueryPartial(q, num_heads, num_kv_heads, head_dim, kv,
                        first_position, end_position, scale, out,
                        log_sum_exp.data());
}

void AttendQueryBlock(const float* q, int64_t count, int64_t num_heads,
                      int64_t num_kv_heads, int64_t head_dim,
                      const KvBlocks& kv, int64_t first_query, int64_t window,
                      float scale, const float* sinks, float* out) {
  if (UseAvx2()) {
    return avx2::AttendBlock(q, count, num_heads, num_kv_heads, head_dim,
                             kv.k_blocks, kv.v_blocks, kv.block_size,
                             first_query, window, scale, sinks, out);
  }
  const int64_t width = num_heads * head_dim;
  std::vector<float> log_sum_exp(num_heads);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t end = first_query + i + 1;
    const int64_t first = window > 0 ? std::max<int64_t>(0, end - window) : 0;
    float* oi = out + i * width;
    if (sinks == nullptr) {
      AttendOneQuery(q + i * width, num_heads, num_kv_heads, head_dim, kv,
                     first, end, scale, oi);
      continue;
    }
    AttendOneQueryPartial(q + i * width, num_heads, num_kv_heads, head_dim, kv,
                          first, end, scale, oi, log_sum_exp.data());
    for (int64_t h = 0; h < num_heads; ++h) {
      // Z / (Z + e^sink) = 1 / (1 + e^(sink - log Z)).
      const float share = 1.f / (1.f + std::exp(sinks[h] - log_sum_exp[h]));
      for (int64_t d = 0; d < head_dim; ++d) oi[h * head_dim + d] *= share;
    }
  }
}

void MergeAttention(int64_t num_parts, int64_t num_heads, int64_t head_dim,
                    const float* outs, const float* log_sum_exps, float* out) {
  for (int64_t h = 0; h < num_heads; ++h) {
    float max = -INFINITY;
    for (int64_t p = 0; p < num_parts; ++p) {
      max = std::max(max, log_sum_exps[p * num_heads + h]);
    }
    float total = 0.f;
    for (int64_t p = 0; p < num_parts; ++p) {
      total += std::exp(log_sum_exps[p * num_heads + h] - max);
    }
    float* oh = out + h * head_dim;
    std::fill(oh, oh + head_dim, 0.f);
    for (int64_t p = 0; p < num_parts; ++p) {
      const float weight =
          std::exp(log_sum_exps[p * num_heads + h] - max) / total;
      Axpy(weight, outs + (p * num_heads + h) * head_dim, head_dim, oh);
    }
  }
}

}  // namespace ringmoe::kernels

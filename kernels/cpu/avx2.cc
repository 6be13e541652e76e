// AVX2/FMA/F16C kernels. This translation unit alone is compiled with
// -mavx2 -mfma -mf16c; ops.cc calls into it only when UseAvx2() holds.
//
// Products are computed as dot products of weight rows with activation rows
// in register tiles of R weight rows × N activation rows. Up to three
// activation rows, quantized weights are widened in registers as they are
// read (decode: bound by memory bandwidth). With more rows, a panel of four
// weight rows is widened to float32 once into a small buffer and reused for
// every activation row (prefill: bound by FMA throughput).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/internal.h"
#include "kernels/cpu/numeric.h"

namespace ringmoe::kernels::internal {
namespace {

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i TailMask(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Weight loaders: Load widens 8 weights at (row, k) when k + 8 <= cols;
// LoadTail the last `count` < 8 of a row, zero-filled. RowScale multiplies a
// finished dot product (int8's per-row scale; 1 otherwise).
template <typename Derived>
struct ScalarTail {
  __m256 LoadTail(int64_t row, int64_t k, int64_t count) const {
    alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const auto& self = static_cast<const Derived&>(*this);
    for (int64_t i = 0; i < count; ++i) buf[i] = self.Scalar(row, k + i);
    return _mm256_load_ps(buf);
  }
};

struct F32Loader : ScalarTail<F32Loader> {
  static constexpr int64_t kPerLine = 16;
  const float* p;
  int64_t ld;
  const void* Address(int64_t r, int64_t k) const { return p + r * ld + k; }
  __m256 Load(int64_t r, int64_t k) const {
    return _mm256_loadu_ps(p + r * ld + k);
  }
  float Scalar(int64_t r, int64_t k) const { return p[r * ld + k]; }
  float RowScale(int64_t) const { return 1.f; }
};

struct Bf16Loader : ScalarTail<Bf16Loader> {
  static constexpr int64_t kPerLine = 32;
  const uint16_t* p;
  int64_t ld;
  const void* Address(int64_t r, int64_t k) const { return p + r * ld + k; }
  __m256 Load(int64_t r, int64_t k) const {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + r * ld + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  float Scalar(int64_t r, int64_t k) const { return Bf16ToF32(p[r * ld + k]); }
  float RowScale(int64_t) const { return 1.f; }
};

struct F16Loader : ScalarTail<F16Loader> {
  static constexpr int64_t kPerLine = 32;
  const uint16_t* p;
  int64_t ld;
  const void* Address(int64_t r, int64_t k) const { return p + r * ld + k; }
  __m256 Load(int64_t r, int64_t k) const {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + r * ld + k)));
  }
  float Scalar(int64_t r, int64_t k) const { return F16ToF32(p[r * ld + k]); }
  float RowScale(int64_t) const { return 1.f; }
};

struct Int8Loader : ScalarTail<Int8Loader> {
  static constexpr int64_t kPerLine = 64;
  const int8_t* p;
  int64_t ld;
  const float* scales;
  const void* Address(int64_t r, int64_t k) const { return p + r * ld + k; }
  __m256 Load(int64_t r, int64_t k) const {
    const __m128i b =
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + r * ld + k));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
  float Scalar(int64_t r, int64_t k) const { return p[r * ld + k]; }
  float RowScale(int64_t r) const { return scales[r]; }
};

// Rows are padded to whole groups, so a tail load stays inside the row and
// the padding (nibble 8) widens to zero.
struct Int4Loader {
  static constexpr int64_t kPerLine = 128;
  const uint8_t* p;
  int64_t row_bytes;
  const float* scales;
  int64_t groups;   // per row
  int group_shift;  // log2(group_size)
  const void* Address(int64_t r, int64_t k) const {
    return p + r * row_bytes + k / 2;
  }
  __m256 Load(int64_t r, int64_t k) const {
    uint32_t bits;
    std::memcpy(&bits, p + r * row_bytes + k / 2, sizeof(bits));
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i q = _mm256_and_si256(
        _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(bits)), shifts),
        _mm256_set1_epi32(0xf));
    const __m256 s =
        _mm256_broadcast_ss(scales + r * groups + (k >> group_shift));
    return _mm256_mul_ps(
        _mm256_sub_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(8.f)), s);
  }
  __m256 LoadTail(int64_t r, int64_t k, int64_t) const { return Load(r, k); }
  float RowScale(int64_t) const { return 1.f; }
};

// How far ahead of the loads the weight rows are prefetched.
constexpr int64_t kPrefetchLines = 8;

// y[j * ldy + i] = dot(w row r0 + i, x row j) for i < R, j < N; weights are
// prefetched when kPrefetch (the memory-bound direct path).
template <int R, int N, bool kPrefetch = true, typename L>
inline void Tile(const L& w, int64_t r0, const float* x, int64_t ldx,
                 int64_t cols, float* y, int64_t ldy) {
  __m256 acc[R][N];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < N; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 8 <= cols; k += 8) {
    // Each row is its own stream and rows are short, so the hardware
    // prefetchers barely ramp up before a row ends: fetch ahead explicitly.
    if (kPrefetch && k % L::kPerLine == 0) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(static_cast<const char*>(
                         w.Address(r0 + i, k + kPrefetchLines * L::kPerLine)),
                     _MM_HINT_T0);
      }
    }
    __m256 xv[N];
    for (int j = 0; j < N; ++j) xv[j] = _mm256_loadu_ps(x + j * ldx + k);
    for (int i = 0; i < R; ++i) {
      const __m256 wv = w.Load(r0 + i, k);
      for (int j = 0; j < N; ++j)
        acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  if (k < cols) {
    const __m256i mask = TailMask(cols - k);
    __m256 xv[N];
    for (int j = 0; j < N; ++j)
      xv[j] = _mm256_maskload_ps(x + j * ldx + k, mask);
    for (int i = 0; i < R; ++i) {
      const __m256 wv = w.LoadTail(r0 + i, k, cols - k);
      for (int j = 0; j < N; ++j)
        acc[i][j] = _mm256_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    const float s = w.RowScale(r0 + i);
    for (int j = 0; j < N; ++j) y[j * ldy + i] = HSum(acc[i][j]) * s;
  }
}

// Rows [r0, r0 + rows) (rows <= 4) against n <= 3 activation rows.
template <int N, bool kPrefetch, typename L>
inline void SmallTile(const L& w, int64_t r0, int64_t rows, const float* x,
                      int64_t cols, float* y, int64_t ldy) {
  if (rows == 4) {
    Tile<4, N, kPrefetch>(w, r0, x, cols, cols, y, ldy);
  } else {
    for (int64_t i = 0; i < rows; ++i)
      Tile<1, N, kPrefetch>(w, r0 + i, x, cols, cols, y + i, ldy);
  }
}

template <bool kPrefetch, typename L>
void TileAnyN(const L& w, int64_t r0, int64_t rows, const float* x, int64_t n,
              int64_t cols, float* y, int64_t ldy) {
  int64_t j = 0;
  for (; j + 3 <= n; j += 3)
    SmallTile<3, kPrefetch>(w, r0, rows, x + j * cols, cols, y + j * ldy, ldy);
  if (n - j == 2)
    SmallTile<2, kPrefetch>(w, r0, rows, x + j * cols, cols, y + j * ldy, ldy);
  if (n - j == 1)
    SmallTile<1, kPrefetch>(w, r0, rows, x + j * cols, cols, y + j * ldy, ldy);
}

// n <= 3: weights widened in registers straight from memory.
template <typename L>
void DirectRows(const L& w, const float* x, int64_t n, int64_t cols, int64_t rb,
                int64_t re, float* y, int64_t ldy) {
  int64_t r = rb;
  if (n == 1) {
    for (; r + 8 <= re; r += 8) Tile<8, 1>(w, r, x, cols, cols, y + r, ldy);
  }
  for (; r < re; r += 4)
    TileAnyN<true>(w, r, std::min<int64_t>(4, re - r), x, n, cols, y + r, ldy);
}

// Activation rows per block, sized so a block stays in L2 while every
// weight panel of the row range passes over it.
int64_t ActivationBlock(int64_t cols) {
  const int64_t rows = (256 << 10) / (cols * 4);
  return std::clamp<int64_t>(rows / 3 * 3, 3, 96);
}

// n > 3: each panel of four weight rows is widened once per activation
// block into a float32 buffer (f32 weights are used in place).
template <typename L>
void PanelRows(const L& w, bool widen, const float* x, int64_t n, int64_t cols,
               int64_t rb, int64_t re, float* y, int64_t ldy) {
  const int64_t ldp = (cols + 7) / 8 * 8;
  thread_local std::vector<float> panel;
  if (widen) panel.assign(4 * ldp, 0.f);
  const int64_t block = ActivationBlock(cols);
  for (int64_t xb = 0; xb < n; xb += block) {
    const int64_t nb = std::min(block, n - xb);
    for (int64_t r = rb; r < re; r += 4) {
      const int64_t rows = std::min<int64_t>(4, re - r);
      float* yb = y + xb * ldy + r;
      if (!widen) {
        TileAnyN<false>(w, r, rows, x + xb * cols, nb, cols, yb, ldy);
        continue;
      }
      for (int64_t i = 0; i < rows; ++i) {
        float* dst = panel.data() + i * ldp;
        const __m256 s = _mm256_set1_ps(w.RowScale(r + i));
        int64_t k = 0;
        for (; k + 8 <= cols; k += 8)
          _mm256_storeu_ps(dst + k, _mm256_mul_ps(w.Load(r + i, k), s));
        if (k < cols)
          _mm256_storeu_ps(dst + k,
                           _mm256_mul_ps(w.LoadTail(r + i, k, cols - k), s));
      }
      F32Loader p;
      p.p = panel.data();
      p.ld = ldp;
      TileAnyN<false>(p, 0, rows, x + xb * cols, nb, cols, yb, ldy);
    }
  }
}

template <typename L>
void Rows(const L& w, bool is_f32, const float* x, int64_t n, int64_t cols,
          int64_t rb, int64_t re, float* y, int64_t ldy) {
  if (n <= 3) {
    DirectRows(w, x, n, cols, rb, re, y, ldy);
  } else {
    PanelRows(w, !is_f32, x, n, cols, rb, re, y, ldy);
  }
}

}  // namespace

void MatMulRowsAvx2(const float* x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y) {
  const int64_t cols = w.cols;
  switch (w.type) {
    case WeightType::kF32: {
      F32Loader l;
      l.p = static_cast<const float*>(w.data);
      l.ld = cols;
      Rows(l, true, x, n, cols, row_begin, row_end, y, w.rows);
      break;
    }
    case WeightType::kBF16: {
      Bf16Loader l;
      l.p = static_cast<const uint16_t*>(w.data);
      l.ld = cols;
      Rows(l, false, x, n, cols, row_begin, row_end, y, w.rows);
      break;
    }
    case WeightType::kF16: {
      F16Loader l;
      l.p = static_cast<const uint16_t*>(w.data);
      l.ld = cols;
      Rows(l, false, x, n, cols, row_begin, row_end, y, w.rows);
      break;
    }
    case WeightType::kInt8: {
      Int8Loader l;
      l.p = static_cast<const int8_t*>(w.data);
      l.ld = cols;
      l.scales = w.scales;
      Rows(l, false, x, n, cols, row_begin, row_end, y, w.rows);
      break;
    }
    case WeightType::kInt4: {
      const int64_t groups = (cols + w.group_size - 1) / w.group_size;
      const Int4Loader l{static_cast<const uint8_t*>(w.data),
                         groups * w.group_size / 2, w.scales, groups,
                         __builtin_ctz(static_cast<unsigned>(w.group_size))};
      Rows(l, false, x, n, cols, row_begin, row_end, y, w.rows);
      break;
    }
  }
}

float DotAvx2(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 =
        _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8),
                           _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i < n; i += 8) {
    const __m256i mask = TailMask(std::min<int64_t>(8, n - i));
    acc0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, mask),
                           _mm256_maskload_ps(b + i, mask), acc0);
  }
  return HSum(_mm256_add_ps(acc0, acc1));
}

void AxpyAvx2(float alpha, const float* x, int64_t n, float* y) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i),
                                            _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

float SumAvx2(const float* data, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int j = 0; j < 4; ++j)
      acc[j] = _mm256_add_ps(acc[j], _mm256_loadu_ps(data + i + 8 * j));
  }
  float tail = 0.f;
  for (; i < n; ++i) tail += data[i];
  return HSum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
                            _mm256_add_ps(acc[2], acc[3]))) +
         tail;
}

float FmaLoopAvx2(int64_t iterations) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  __m256 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
  return HSum(s);
}

}  // namespace ringmoe::kernels::internal

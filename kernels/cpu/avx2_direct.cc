// AVX2 products against few activation rows (n <= 3: decode) with the
// weights widened in registers as they are read (MatMulRowsDirect; int8 and
// int4 go to avx2_quantized.cc, mxfp4 to avx2_mxfp4.cc), and AccumulateRows.
#include <immintrin.h>

#include <cstdlib>
#include <type_traits>

#include "kernels/cpu/avx2_internal.h"
#include "kernels/cpu/avx2_products.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"

namespace ringmoe::kernels::avx2 {

namespace {

// y[j * ldy + i] = dot(w row r0 + i, x row j) for i < R, j < N; weights are
// prefetched kAhead lines ahead (the memory-bound direct path) or not (0).
// An interleaving loader's whole chunks of 32 columns are read whole.
template <int R, int N, int kAhead, typename L>
inline void Tile(const L& w, int64_t r0, const float* x, int64_t ldx,
                 int64_t cols, float* y, int64_t ldy) {
  const WeightPrefetcher prefetch(L::kType);
  __m256 acc[R][N];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < N; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  if constexpr (L::kInterleavedChunks) {
    for (; k + 32 <= cols; k += 32) {
      if (kAhead > 0 && k % L::kPerLine == 0) {
        for (int i = 0; i < R; ++i) {
          prefetch.TileRow<N>(w.Address(r0 + i, k + kAhead * L::kPerLine));
        }
      }
      for (int i = 0; i < R; ++i) {
        __m256 wv[4];
        w.LoadChunk(r0 + i, k, wv);
        for (int t = 0; t < 4; ++t) {
          for (int j = 0; j < N; ++j) {
            acc[i][j] = _mm256_fmadd_ps(
                wv[t], _mm256_loadu_ps(x + j * ldx + k + 8 * t), acc[i][j]);
          }
        }
      }
    }
  }
  for (; k + 8 <= cols; k += 8) {
    // Each row is its own stream and rows are short, so the hardware
    // prefetchers barely ramp up before a row ends: fetch ahead explicitly.
    if (kAhead > 0 && k % L::kPerLine == 0) {
      for (int i = 0; i < R; ++i) {
        prefetch.TileRow<N>(w.Address(r0 + i, k + kAhead * L::kPerLine));
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
    for (int j = 0; j < N; ++j) y[j * ldy + i] = HSum(acc[i][j]);
  }
}

// Rows r0 + s * stride (s < S) against one activation row, together; each
// row's sum is formed exactly as it would be alone (kAccumulators
// accumulators over 32 columns a step, the same tail), so the grouping
// never changes a result. Four accumulators keep the FMA latency off the
// critical path for three streams; six streams (long rows) take two each,
// twelve in all, as many as fit the 16 registers beside the activations.
// An interleaving loader's chunks take two: with four vectors of weights
// from each chunk, twelve accumulators spilled two to memory, whose
// loop-carried chains then went through a store and a load every step.
template <int S, int kAccumulators, typename L>
inline void StreamRowGroup(const L& w, int64_t r0, int64_t stride,
                           const float* x, int64_t cols, float* y) {
  static_assert(kAccumulators == 2 || kAccumulators == 4);
  const WeightPrefetcher prefetch(L::kType);
  __m256 acc[S][kAccumulators];
  RINGMOE_UNROLL
  for (int s = 0; s < S; ++s) {
    RINGMOE_UNROLL
    for (int j = 0; j < kAccumulators; ++j) acc[s][j] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 32 <= cols; k += 32) {
    RINGMOE_UNROLL
    for (int s = 0; s < S; ++s) {
      RINGMOE_UNROLL
      for (int64_t line = 0; line < 32; line += L::kPerLine)
        prefetch.Stream(w.Address(r0 + s * stride, k + line));
    }
    if constexpr (L::kInterleavedChunks) {
      RINGMOE_UNROLL
      for (int s = 0; s < S; ++s) {
        __m256 wv[4];
        w.LoadChunk(r0 + s * stride, k, wv);
        RINGMOE_UNROLL
        for (int j = 0; j < 4; ++j) {
          acc[s][j % 2] = _mm256_fmadd_ps(wv[j], _mm256_loadu_ps(x + k + 8 * j),
                                          acc[s][j % 2]);
        }
      }
    } else {
      RINGMOE_UNROLL
      for (int j = 0; j < 4; ++j) {
        const __m256 xv = _mm256_loadu_ps(x + k + 8 * j);
        RINGMOE_UNROLL
        for (int s = 0; s < S; ++s) {
          acc[s][j % kAccumulators] =
              _mm256_fmadd_ps(w.Load(r0 + s * stride, k + 8 * j), xv,
                              acc[s][j % kAccumulators]);
        }
      }
    }
  }
  for (; k + 8 <= cols; k += 8) {
    const __m256 xv = _mm256_loadu_ps(x + k);
    RINGMOE_UNROLL
    for (int s = 0; s < S; ++s)
      acc[s][0] = _mm256_fmadd_ps(w.Load(r0 + s * stride, k), xv, acc[s][0]);
  }
  if (k < cols) {
    const __m256 xv = _mm256_maskload_ps(x + k, TailMask(cols - k));
    RINGMOE_UNROLL
    for (int s = 0; s < S; ++s) {
      acc[s][1] = _mm256_fmadd_ps(w.LoadTail(r0 + s * stride, k, cols - k), xv,
                                  acc[s][1]);
    }
  }
  RINGMOE_UNROLL
  for (int s = 0; s < S; ++s) {
    __m256 sum = _mm256_add_ps(acc[s][0], acc[s][1]);
    if constexpr (kAccumulators == 4)
      sum = _mm256_add_ps(sum, _mm256_add_ps(acc[s][2], acc[s][3]));
    y[r0 + s * stride] = HSum(sum);
  }
}

// Rows [rb, re) of w against one activation row, as ForEachStreamGroup's
// streams, each prefetched kStreamPrefetchBytes ahead where
// WeightPrefetcher::Stream says so: kStreamSegments streams while the
// activations stay in L1 (ShortActivationBytes()), kLongRowStreams beyond.
// Interleaving *adjacent* rows instead (a tile's streams a row apart) ran
// about 15% slower end to end, and so did tiles of four rows for long rows
// (each reading the activations once per four) in the faster memory state.
template <typename L>
void StreamRows(const L& w, int64_t rb, int64_t re, const float* x,
                int64_t cols, float* y) {
  if (cols * 4 <= ShortActivationBytes()) {
    ForEachStreamGroup<kStreamSegments>(
        rb, re, [&](int64_t r0, int64_t stride, auto rows) {
          StreamRowGroup<decltype(rows)::value, 4>(w, r0, stride, x, cols, y);
        });
    return;
  }
  ForEachStreamGroup<kLongRowStreams>(
      rb, re, [&](int64_t r0, int64_t stride, auto rows) {
        StreamRowGroup<decltype(rows)::value, 2>(w, r0, stride, x, cols, y);
      });
}

// Rows [r0, r0 + rows) (rows <= 4) against n <= 3 activation rows.
template <int N, int kAhead, typename L>
inline void SmallTile(const L& w, int64_t r0, int64_t rows, const float* x,
                      int64_t cols, float* y, int64_t ldy) {
  if (rows == 4) {
    Tile<4, N, kAhead>(w, r0, x, cols, cols, y, ldy);
  } else {
    for (int64_t i = 0; i < rows; ++i)
      Tile<1, N, kAhead>(w, r0 + i, x, cols, cols, y + i, ldy);
  }
}

template <int kAhead, typename L>
void TileAnyN(const L& w, int64_t r0, int64_t rows, const float* x, int64_t n,
              int64_t cols, float* y, int64_t ldy) {
  int64_t j = 0;
  for (; j + 3 <= n; j += 3)
    SmallTile<3, kAhead>(w, r0, rows, x + j * cols, cols, y + j * ldy, ldy);
  if (n - j == 2)
    SmallTile<2, kAhead>(w, r0, rows, x + j * cols, cols, y + j * ldy, ldy);
  if (n - j == 1)
    SmallTile<1, kAhead>(w, r0, rows, x + j * cols, cols, y + j * ldy, ldy);
}

// n <= 3: weights widened in registers straight from memory, one
// activation row alone as StreamRows' streams.
template <typename L>
void DirectRows(const L& w, const float* x, int64_t n, int64_t cols, int64_t rb,
                int64_t re, float* y, int64_t ldy, bool alone) {
  if (alone) return StreamRows(w, rb, re, x, cols, y);
  for (int64_t r = rb; r < re; r += 4)
    TileAnyN<kPrefetchLines>(w, r, Min<int64_t>(4, re - r), x, n, cols, y + r,
                             ldy);
}

// How far ahead of the rows AccumulateRows reads it prefetches: its rows
// are short (an MLA head's slice), so the hardware prefetchers lose each
// one's start.
constexpr int64_t kAccumulateRowsAhead = 8;

// add(std::integral_constant<int, R>(), first) for the rows [0, count) in
// groups of R = 4 from first = 0, the last group of what is left.
template <typename Fn>
inline void InGroupsOfFour(int64_t count, Fn&& add) {
  int64_t r = 0;
  for (; r + 4 <= count; r += 4) add(std::integral_constant<int, 4>(), r);
  switch (count - r) {
    case 3:
      return add(std::integral_constant<int, 3>(), r);
    case 2:
      return add(std::integral_constant<int, 2>(), r);
    case 1:
      return add(std::integral_constant<int, 1>(), r);
  }
}

// y[k] += Σ_i coeff[i] · w(first + i, k) for i < R, k < cols: the R rows
// read along their length, y loaded and stored once per R rows.
template <int R, typename L>
inline void AddRows(const L& w, int64_t cols, int64_t first, const float* coeff,
                    float* y) {
  __m256 s[R];
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) s[i] = _mm256_set1_ps(coeff[i]);
  int64_t k = 0;
  for (; k + 8 <= cols; k += 8) {
    if (k % L::kPerLine == 0) {
      RINGMOE_UNROLL
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(static_cast<const char*>(
                         w.Address(first + i + kAccumulateRowsAhead, k)),
                     _MM_HINT_T0);
      }
    }
    __m256 acc = _mm256_loadu_ps(y + k);
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i)
      acc = _mm256_fmadd_ps(s[i], w.Load(first + i, k), acc);
    _mm256_storeu_ps(y + k, acc);
  }
  if (k < cols) {
    const __m256i mask = TailMask(cols - k);
    __m256 acc = _mm256_maskload_ps(y + k, mask);
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      acc = _mm256_fmadd_ps(s[i], w.LoadTail(first + i, k, cols - k), acc);
    }
    _mm256_maskstore_ps(y + k, mask, acc);
  }
}

// y[i * ldy + k] += Σ_r c[i * ldc + r - rb] · w(r, k), four rows at a time.
template <typename L>
void AccumulateRowsWith(const L& w, int64_t cols, const float* c, int64_t ldc,
                        int64_t n, int64_t rb, int64_t re, float* y,
                        int64_t ldy) {
  for (int64_t i = 0; i < n; ++i) {
    InGroupsOfFour(re - rb, [&](auto rows, int64_t r) {
      AddRows<decltype(rows)::value>(w, cols, rb + r, c + i * ldc + r,
                                     y + i * ldy);
    });
  }
}

// Lays out x's whole chunks of 32 columns as Fp8InterleavedLoader reads
// its weights: chunk position 8t + d takes column 4d + t (t < 4, d < 8), a
// transpose of the chunk seen as 8 rows of 4; later columns stay in place.
void InterleaveFp8Chunks(float* x, int64_t cols) {
  for (int64_t k = 0; k + 32 <= cols; k += 32) {
    const __m256 v0 = _mm256_loadu_ps(x + k);
    const __m256 v1 = _mm256_loadu_ps(x + k + 8);
    const __m256 v2 = _mm256_loadu_ps(x + k + 16);
    const __m256 v3 = _mm256_loadu_ps(x + k + 24);
    // Rows d and d + 4 of the chunk side by side: {0, 4}, {1, 5}, ...
    const __m256 a = _mm256_permute2f128_ps(v0, v2, 0x20);
    const __m256 b = _mm256_permute2f128_ps(v0, v2, 0x31);
    const __m256 c = _mm256_permute2f128_ps(v1, v3, 0x20);
    const __m256 e = _mm256_permute2f128_ps(v1, v3, 0x31);
    const __m256 ab_low = _mm256_unpacklo_ps(a, b);
    const __m256 ab_high = _mm256_unpackhi_ps(a, b);
    const __m256 ce_low = _mm256_unpacklo_ps(c, e);
    const __m256 ce_high = _mm256_unpackhi_ps(c, e);
    _mm256_storeu_ps(x + k, _mm256_shuffle_ps(ab_low, ce_low, 0x44));
    _mm256_storeu_ps(x + k + 8, _mm256_shuffle_ps(ab_low, ce_low, 0xee));
    _mm256_storeu_ps(x + k + 16, _mm256_shuffle_ps(ab_high, ce_high, 0x44));
    _mm256_storeu_ps(x + k + 24, _mm256_shuffle_ps(ab_high, ce_high, 0xee));
  }
}

// fp8 against n <= 3 activation rows: within one block of rows every
// weight of a column block shares one scale, so the activations take the
// scales once per row block and the weights widen with no multiply (a
// block of 128 rows re-scales the activations once per 128 weight rows).
// The weights widen to their values times 2^-120 (Fp8TimesTwoToMinus120),
// the activations take kFp8ActivationUnit and the sums kFp8SumUnit.
void Fp8DirectRows(const Matrix& w, const float* x, int64_t n, int64_t rb,
                   int64_t re, float* y, bool alone) {
  const int64_t cols = w.cols;
  float* scaled = static_cast<float*>(ThreadScratch(
      ScratchSlot::kScaledActivations, n * cols * int64_t{sizeof(float)}));
  const Fp8InterleavedLoader weights{
      {}, static_cast<const uint8_t*>(w.data), cols};
  ForEachFp8RowBlock(w, rb, re, [&](int64_t begin, int64_t end, int64_t block) {
    ScaleFp8Activations(w, block, x, n, scaled);
    for (int64_t j = 0; j < n; ++j)
      InterleaveFp8Chunks(scaled + j * cols, cols);
    DirectRows(weights, scaled, n, cols, begin, end, y, w.rows, alone);
  });
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t r = rb; r < re; ++r) y[j * w.rows + r] *= kFp8SumUnit;
  }
}

// The inverse of InterleaveFp8Chunks for the sums of one chunk: in[t] holds
// columns 4d + t (lane d), out[j] columns 8j..8j + 7 in order (a 4 x 8
// transpose).
inline void DeinterleaveFp8Chunk(const __m256 in[4], __m256 out[4]) {
  // Per 128-bit lane: columns d and d + 4 as 4 values of t each.
  const __m256 t01_low = _mm256_unpacklo_ps(in[0], in[1]);
  const __m256 t01_high = _mm256_unpackhi_ps(in[0], in[1]);
  const __m256 t23_low = _mm256_unpacklo_ps(in[2], in[3]);
  const __m256 t23_high = _mm256_unpackhi_ps(in[2], in[3]);
  const __m256 d04 = _mm256_shuffle_ps(t01_low, t23_low, 0x44);
  const __m256 d15 = _mm256_shuffle_ps(t01_low, t23_low, 0xee);
  const __m256 d26 = _mm256_shuffle_ps(t01_high, t23_high, 0x44);
  const __m256 d37 = _mm256_shuffle_ps(t01_high, t23_high, 0xee);
  out[0] = _mm256_permute2f128_ps(d04, d15, 0x20);
  out[1] = _mm256_permute2f128_ps(d26, d37, 0x20);
  out[2] = _mm256_permute2f128_ps(d04, d15, 0x31);
  out[3] = _mm256_permute2f128_ps(d26, d37, 0x31);
}

// R rows of an AccumulateFp8Rows segment from `first` (coefficients
// `coeff`) added into the sums of every whole chunk of 32 columns (`sums`,
// interleaved like the chunk), each chunk's sums loaded and stored once
// for the R rows. The rows are read along, as streams.
template <int R>
inline void AddFp8Rows(const Fp8InterleavedLoader& w, int64_t first,
                       int64_t chunk_cols, const float* coeff, float* sums) {
  __m256 s[R];
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) s[i] = _mm256_broadcast_ss(coeff + i);
  for (int64_t k = 0; k < chunk_cols; k += 32) {
    __m256 acc[4];
    RINGMOE_UNROLL
    for (int t = 0; t < 4; ++t) acc[t] = _mm256_loadu_ps(sums + k + 8 * t);
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      if (k % 64 == 0) {
        _mm_prefetch(static_cast<const char*>(
                         w.Address(first + i + kAccumulateRowsAhead, k)),
                     _MM_HINT_T0);
      }
      __m256 wv[4];
      w.LoadChunk(first + i, k, wv);
      RINGMOE_UNROLL
      for (int t = 0; t < 4; ++t) acc[t] = _mm256_fmadd_ps(s[i], wv[t], acc[t]);
    }
    RINGMOE_UNROLL
    for (int t = 0; t < 4; ++t) _mm256_storeu_ps(sums + k + 8 * t, acc[t]);
  }
}

// AccumulateRows for fp8: within one block of rows every weight of a
// column block shares one scale, so a segment of rows sums its products
// with the weights alone (Fp8InterleavedLoader) and y takes the block
// scales once per segment, with Fp8DirectRows' units (kFp8ActivationUnit
// on the coefficients, kFp8SumUnit with the scales). The whole chunks'
// sums stay in a thread buffer (L1: a row's worth of floats) and the rows
// are read four at a time along their length; the last columns that make
// no whole chunk are summed in registers row by row.
void AccumulateFp8Rows(const float* c, int64_t ldc, int64_t n, const Matrix& w,
                       int64_t rb, int64_t re, float* y, int64_t ldy) {
  constexpr int64_t kSegmentRows = 128;
  const int64_t cols = w.cols, chunk_cols = cols / 32 * 32;
  const Fp8InterleavedLoader weights{
      {}, static_cast<const uint8_t*>(w.data), cols};
  const int64_t scales_per_row = (cols + w.block_cols - 1) / w.block_cols;
  float* sums = static_cast<float*>(ThreadScratch(
      ScratchSlot::kFp8RowSums, chunk_cols * int64_t{sizeof(float)}));
  alignas(32) float coeff[kSegmentRows];
  for (int64_t i = 0; i < n; ++i) {
    float* yi = y + i * ldy;
    for (int64_t begin = rb; begin < re;) {
      const int64_t block = begin / w.block_rows;
      const int64_t end = Min<int64_t>(
          Min<int64_t>(re, (block + 1) * w.block_rows), begin + kSegmentRows);
      const int64_t count = end - begin;
      for (int64_t r = 0; r < count; ++r)
        coeff[r] = c[i * ldc + begin - rb + r] * kFp8ActivationUnit;
      const float* scales = w.block_scales + block * scales_per_row;
      const auto scale_at = [&](int64_t k) {
        return _mm256_set1_ps(scales[k / w.block_cols] * kFp8SumUnit);
      };
      for (int64_t k = 0; k < chunk_cols; k += 8)
        _mm256_storeu_ps(sums + k, _mm256_setzero_ps());
      InGroupsOfFour(count, [&](auto rows, int64_t r) {
        AddFp8Rows<decltype(rows)::value>(weights, begin + r, chunk_cols,
                                          coeff + r, sums);
      });
      for (int64_t k = 0; k < chunk_cols; k += 32) {
        __m256 chunk[4], natural[4];
        for (int t = 0; t < 4; ++t)
          chunk[t] = _mm256_loadu_ps(sums + k + 8 * t);
        DeinterleaveFp8Chunk(chunk, natural);
        for (int j = 0; j < 4; ++j) {
          float* out = yi + k + 8 * j;
          _mm256_storeu_ps(out, _mm256_fmadd_ps(natural[j], scale_at(k + 8 * j),
                                                _mm256_loadu_ps(out)));
        }
      }
      for (int64_t k = chunk_cols; k < cols; k += 8) {
        const int64_t width = Min<int64_t>(8, cols - k);
        __m256 sum = _mm256_setzero_ps();
        for (int64_t j = 0; j < count; ++j) {
          const __m256 wv = width == 8 ? weights.Load(begin + j, k)
                                       : weights.LoadTail(begin + j, k, width);
          sum = _mm256_fmadd_ps(_mm256_broadcast_ss(coeff + j), wv, sum);
        }
        const __m256i mask = TailMask(width);
        _mm256_maskstore_ps(yi + k, mask,
                            _mm256_fmadd_ps(sum, scale_at(k),
                                            _mm256_maskload_ps(yi + k, mask)));
      }
      begin = end;
    }
  }
}

}  // namespace

void ScaleFp8Activations(const Matrix& w, int64_t row_block, const float* x,
                         int64_t n, float* scaled) {
  const int64_t cols = w.cols;
  const float* scales =
      w.block_scales + row_block * ((cols + w.block_cols - 1) / w.block_cols);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t k0 = 0; k0 < cols; k0 += w.block_cols) {
      const float scale = scales[k0 / w.block_cols] * kFp8ActivationUnit;
      const __m256 s = _mm256_set1_ps(scale);
      const int64_t k1 = Min<int64_t>(cols, k0 + w.block_cols);
      int64_t k = k0;
      for (; k + 8 <= k1; k += 8) {
        _mm256_storeu_ps(scaled + j * cols + k,
                         _mm256_mul_ps(_mm256_loadu_ps(x + j * cols + k), s));
      }
      for (; k < k1; ++k) {
        scaled[j * cols + k] = x[j * cols + k] * scale;
      }
    }
  }
}

void AccumulateRows(const float* c, int64_t ldc, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y, int64_t ldy) {
  VisitLoader(w, [&](const auto& loader) {
    if constexpr (std::is_same_v<std::decay_t<decltype(loader)>, Fp8Loader>) {
      AccumulateFp8Rows(c, ldc, n, w, row_begin, row_end, y, ldy);
    } else {
      AccumulateRowsWith(loader, w.cols, c, ldc, n, row_begin, row_end, y, ldy);
    }
  });
}

void MatMulRowsDirect(const float* x, int64_t n, const Matrix& w,
                      int64_t row_begin, int64_t row_end, float* y,
                      bool alone) {
  const int64_t cols = w.cols;
  switch (w.type) {
    case WeightType::kF32:
      return DirectRows(F32Loader{{}, static_cast<const float*>(w.data), cols},
                        x, n, cols, row_begin, row_end, y, w.rows, alone);
    case WeightType::kBF16:
      return DirectRows(
          Bf16Loader{{}, static_cast<const uint16_t*>(w.data), cols}, x, n,
          cols, row_begin, row_end, y, w.rows, alone);
    case WeightType::kF16:
      return DirectRows(
          F16Loader{{}, static_cast<const uint16_t*>(w.data), cols}, x, n, cols,
          row_begin, row_end, y, w.rows, alone);
    case WeightType::kFp8E4M3:
      return Fp8DirectRows(w, x, n, row_begin, row_end, y, alone);
    case WeightType::kInt8:
    case WeightType::kInt4:
    case WeightType::kMxfp4:
      // They take their activations quantized once per product
      // (MatMulRowsInt8, MatMulRowsInt4, MatMulRowsMxfp4).
      std::abort();
  }
}

}  // namespace ringmoe::kernels::avx2

// AVX2 products of mxfp4 weights against few activation rows (up to
// DirectProductRows, ops.h), as integer products on the activations
// quantized in three int8 levels, or in two (ActivationPrecision::kBf16) or
// one (kInt8) (Mxfp4Span, isa.h), and that quantizer (which the AVX-512
// unit shares). Widening each
// weight to float costs about a vector µop per weight; here 64 weights meet
// each level of each activation row in two vpmaddubsw and a vpmaddwd, two
// blocks of 32 take one convert and one FMA, and the weights' bias comes off
// once per eight blocks as one FMA. With more activation rows
// weights widened to float once for all of them cost less (the blocked
// products).
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/avx2_internal.h"
#include "kernels/cpu/avx2_products.h"
#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx2 {

namespace {

// Σ of the 8 int32 lanes.
inline int32_t HSumInt(__m256i v) {
  __m128i s =
      _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10110001));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

void QuantizeMxfp4Activations(const float* x, int64_t cols, int64_t blocks,
                              int levels, Mxfp4Span* spans, float* scales) {
  const __m256 level = _mm256_set1_ps(256.f);
  const __m256i top = _mm256_set1_epi32(128);
  const int64_t padded = (blocks + kMxfp4BlocksPerSpan - 1) /
                         kMxfp4BlocksPerSpan * kMxfp4BlocksPerSpan;
  for (int64_t b = 0; b < padded; ++b) {
    Mxfp4Span& span = spans[b / kMxfp4BlocksPerSpan];
    const int part = static_cast<int>(b % kMxfp4BlocksPerSpan);
    __m256 v[4];
    const float max_abs = LoadBlock32(x + Min(32 * b, cols),
                                      Clamp<int64_t>(cols - 32 * b, 0, 32), v);
    const __m256 inv = _mm256_set1_ps(max_abs > 0 ? 127.f / max_abs : 0.f);
    __m256i q[kMxfp4Levels][4];
    for (int j = 0; j < 4; ++j) {
      const __m256 t = _mm256_mul_ps(v[j], inv);
      const __m256i q1_rounded = _mm256_cvtps_epi32(t);
      if (levels == 1) {
        q[0][j] = q1_rounded;
        span.offset[4 * part + j] = kMxfp4WeightBias * HSumInt(q1_rounded);
        continue;
      }
      const __m256 r = _mm256_mul_ps(
          _mm256_sub_ps(t, _mm256_cvtepi32_ps(q1_rounded)), level);
      const __m256i q2_rounded = _mm256_cvtps_epi32(r);
      // All ones (-1) where q2 rounded to 128.
      const __m256i halfway = _mm256_cmpeq_epi32(q2_rounded, top);
      q[0][j] = _mm256_sub_epi32(q1_rounded, halfway);
      q[1][j] = _mm256_sub_epi32(
          q2_rounded, _mm256_and_si256(halfway, _mm256_set1_epi32(256)));
      __m256i sum = _mm256_add_epi32(_mm256_slli_epi32(q[0][j], 8), q[1][j]);
      if (levels == kMxfp4Levels) {
        q[2][j] = _mm256_min_epi32(
            _mm256_cvtps_epi32(_mm256_mul_ps(
                _mm256_sub_ps(r, _mm256_cvtepi32_ps(q2_rounded)), level)),
            _mm256_set1_epi32(127));
        sum = _mm256_add_epi32(_mm256_slli_epi32(sum, 8), q[2][j]);
      }
      span.offset[4 * part + j] = kMxfp4WeightBias * HSumInt(sum);
    }
    for (int l = 0; l < levels; ++l) {
      StoreEvenOddBytes(q[l], span.even[l] + 16 * part,
                        span.odd[l] + 16 * part);
    }
    // s / 2 (the weights are 2 * e2m1) over q1's weight in the levels' sum.
    scales[b] = max_abs / 127.f /
                (levels == 1   ? 2.f
                 : levels == 2 ? 512.f
                               : 131072.f);
  }
  for (int64_t b = padded; b % 16 != 0; ++b) scales[b] = 0.f;
}

namespace {

struct Mxfp4Rows {
  const uint8_t* p;  // a row is blocks * 16 bytes
  int64_t blocks;    // per row
  const uint8_t* exponents;
};

// Mxfp4Tile takes eight blocks' scales at a time in the order 0, 2, 4, 6, 1,
// 3, 5, 7, so that one in-lane vpermilps gives the pair of blocks 2k, 2k + 1
// its scales (block 2k's in lanes 0-3, block 2k + 1's in lanes 4-7).
constexpr int kArrangedLane[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// Eight e8m0 exponents as their scales 2^(e - 127), exactly (2^-127, a
// subnormal, for e = 0), in the order of kArrangedLane.
inline __m256 E8m0x8(const uint8_t* e) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(e)),
      _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, -1, -1, -1, -1, -1, -1, -1, -1)));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(
      _mm256_slli_epi32(v, 23), _mm256_set1_epi32(0x00400000),
      _mm256_cmpeq_epi32(v, _mm256_setzero_si256())));
}

// Two blocks' weight bytes (32) as their codes for Mxfp4Dot: each nibble
// looked up (vpshufb) as 2 * e2m1 + 12, the low nibbles' in `lo`, the high
// ones' in `hi`.
struct Mxfp4Codes {
  __m256i lo, hi;
};
inline Mxfp4Codes LookUpCodes(__m256i bytes) {
  const __m256i table = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11,
                                         10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16,
                                         18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  return {_mm256_shuffle_epi8(table, _mm256_and_si256(bytes, nibble)),
          _mm256_shuffle_epi8(
              table, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble))};
}

// Σ (2 * e2m1 + 12) * (65536 q1 + 256 q2 + q3) (L = 3), * (256 q1 + q2)
// (L = 2) or * q1 (L = 1) per int32 lane of two blocks against half
// `half` of span `x`: the codes meet each level in two
// vpmaddubsw (pair sums at most 2 · 24 · 128, two of them still int16); the
// levels are joined in int32 (at most 24 · 8 · (127 · 65536 + 128 · 257),
// below 2^31). The weights' bias (the span's offsets) is left on.
template <int L>
inline __m256i Mxfp4Dot(const Mxfp4Codes& w, const Mxfp4Span& x, int half) {
  static_assert(L >= 1 && L <= kMxfp4Levels);
  __m256i pairs[L];
  for (int l = 0; l < L; ++l) {
    pairs[l] = _mm256_add_epi16(
        _mm256_maddubs_epi16(
            w.lo, _mm256_load_si256(
                      reinterpret_cast<const __m256i*>(x.even[l] + 32 * half))),
        _mm256_maddubs_epi16(
            w.hi, _mm256_load_si256(
                      reinterpret_cast<const __m256i*>(x.odd[l] + 32 * half))));
  }
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (L == 1) {
    return _mm256_madd_epi16(pairs[0], ones);
  } else {
    const __m256i upper =
        _mm256_add_epi32(_mm256_madd_epi16(pairs[0], _mm256_set1_epi16(256)),
                         _mm256_madd_epi16(pairs[1], ones));
    if constexpr (L == 2) return upper;
    return _mm256_add_epi32(_mm256_slli_epi32(upper, 8),
                            _mm256_madd_epi16(pairs[2], ones));
  }
}

// Puts one activation row's block scales in kArrangedLane's order and
// writes its block offsets likewise (Mxfp4QuantizedRows).
void ArrangeBlocks(const Mxfp4Span* spans, int64_t num_spans,
                   int64_t padded_blocks, float* scales, float* offsets) {
  for (int64_t g = 0; g < padded_blocks; g += 8) {
    float group[8];
    for (int p = 0; p < 8; ++p) group[p] = scales[g + p];
    for (int p = 0; p < 8; ++p) {
      const int64_t b = g + p;
      int64_t offset = 0;
      if (b < num_spans * kMxfp4BlocksPerSpan) {
        const int32_t* lanes = spans[b / kMxfp4BlocksPerSpan].offset +
                               4 * (b % kMxfp4BlocksPerSpan);
        offset = int64_t{lanes[0]} + lanes[1] + lanes[2] + lanes[3];
      }
      scales[g + kArrangedLane[p]] = group[p];
      offsets[g + kArrangedLane[p]] = static_cast<float>(offset);
    }
  }
}

// y[j * ldy + i * stride] = row r0 + i * stride of w · activation row j, i <
// R, j < N, in groups of 8 blocks: one convert and one FMA per two blocks,
// with each block's weight scale times its activation scale, and one FMA
// taking the eight blocks' offsets times those scales off. Against one
// activation row with kAhead == kRowsAreStreams (or one row) the rows are
// pieces of sequential streams (ForEachStreamGroup) prefetched as
// WeightPrefetcher::Stream says; otherwise each row prefetches kAhead lines
// ahead. Each row's sum is formed alike in any tile. L: the activations'
// levels (Mxfp4Dot).
template <int L, int R, int N, int kAhead>
void Mxfp4Tile(const Mxfp4Rows& w, int64_t r0, int64_t stride,
               const Mxfp4QuantizedRows& x, float* y, int64_t ldy) {
  constexpr bool kStream = N == 1 && (R == 1 || kAhead == kRowsAreStreams);
  const WeightPrefetcher prefetch(WeightType::kMxfp4);
  const int64_t row_bytes = w.blocks * 16;
  const uint8_t* rows[R];
  const uint8_t* exponents[R];
  __m256 acc[R][N];
  for (int i = 0; i < R; ++i) {
    rows[i] = w.p + (r0 + i * stride) * row_bytes;
    exponents[i] = w.exponents + (r0 + i * stride) * w.blocks;
    for (int j = 0; j < N; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  for (int64_t b0 = 0; b0 < w.blocks; b0 += 8) {
    const int64_t count = Min<int64_t>(8, w.blocks - b0);
    for (int i = 0; i < R; ++i) {
      for (int line = 0; line < 2; ++line) {
        if (kStream) {
          prefetch.Stream(rows[i] + 16 * b0 + 64 * line);
        } else {
          prefetch.TileRow<N>(rows[i] + 16 * b0 + 64 * (line + kAhead));
        }
      }
    }
    // The scales' padding is zero: past the row's last block a lane's
    // scale is 0 times the 2^-127 of a zero exponent.
    __m256 x_scales[N], x_offsets[N];
    for (int j = 0; j < N; ++j) {
      x_scales[j] = _mm256_load_ps(x.scales + j * x.padded_blocks + b0);
      x_offsets[j] = _mm256_load_ps(x.offsets + j * x.padded_blocks + b0);
    }
    for (int i = 0; i < R; ++i) {
      alignas(8) uint8_t last[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const uint8_t* e = exponents[i] + b0;
      if (count < 8) {
        for (int64_t k = 0; k < count; ++k) last[k] = e[k];
        e = last;
      }
      const __m256 w_scales = E8m0x8(e);
      __m256 scales[N];
      for (int j = 0; j < N; ++j)
        scales[j] = _mm256_mul_ps(w_scales, x_scales[j]);
      // The pair of blocks b0 + 2k, b0 + 2k + 1.
      const auto pair = [&](auto k_constant) {
        constexpr int k = decltype(k_constant)::value;
        if (2 * k >= count) return;
        const int64_t b = b0 + 2 * k;
        // A row's odd last block alone (its second half of the span meets
        // zero bytes, zero activations, a zero offset and a zero scale).
        const Mxfp4Codes codes = LookUpCodes(
            b + 1 < w.blocks
                ? _mm256_loadu_si256(
                      reinterpret_cast<const __m256i*>(rows[i] + 16 * b))
                : _mm256_zextsi128_si256(_mm_loadu_si128(
                      reinterpret_cast<const __m128i*>(rows[i] + 16 * b))));
        for (int j = 0; j < N; ++j) {
          const __m256i dot = Mxfp4Dot<L>(
              codes, x.spans[j * x.num_spans + b / kMxfp4BlocksPerSpan], k % 2);
          acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                      _mm256_permute_ps(scales[j], 0x55 * k),
                                      acc[i][j]);
        }
      };
      pair(std::integral_constant<int, 0>());
      pair(std::integral_constant<int, 1>());
      pair(std::integral_constant<int, 2>());
      pair(std::integral_constant<int, 3>());
      for (int j = 0; j < N; ++j)
        acc[i][j] = _mm256_fnmadd_ps(x_offsets[j], scales[j], acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < N; ++j) y[j * ldy + i * stride] = HSum(acc[i][j]);
  }
}

// MatMulRowsMxfp4 on activations quantized in L levels (xq, n rows).
template <int L>
void Mxfp4Products(const Mxfp4Rows& rows, const Mxfp4QuantizedRows& xq,
                   int64_t n, int64_t row_begin, int64_t row_end, float* y,
                   int64_t ldy, bool alone) {
  const int64_t activation_bytes =
      xq.num_spans * static_cast<int64_t>(sizeof(Mxfp4Span));
  if (!alone) {
    // Groups of up to three activation rows (the tiles' registers hold no
    // more) that fit L1.
    ForEachRowBlockAndGroup(
        row_begin, row_end, Mxfp4BlockRows(rows.blocks), n,
        Clamp<int64_t>(L1DataCacheBytes() / activation_bytes, 1, 3),
        [&](int64_t r0, int64_t r1, int64_t j, int64_t size) {
          Mxfp4QuantizedRows xj = xq;
          xj.spans += j * xq.num_spans;
          xj.scales += j * xq.padded_blocks;
          xj.offsets += j * xq.padded_blocks;
          for (int64_t r = r0; r < r1; ++r) {
            switch (size) {
              case 1:
                Mxfp4Tile<L, 1, 1, kPrefetchLines>(rows, r, 1, xj,
                                                   y + j * ldy + r, ldy);
                break;
              case 2:
                Mxfp4Tile<L, 1, 2, kPrefetchLines>(rows, r, 1, xj,
                                                   y + j * ldy + r, ldy);
                break;
              default:
                Mxfp4Tile<L, 1, 3, kPrefetchLines>(rows, r, 1, xj,
                                                   y + j * ldy + r, ldy);
                break;
            }
          }
        });
    return;
  }
  ForEachOneRowTile(activation_bytes, row_begin, row_end,
                    [&](int64_t r0, int64_t stride, auto group) {
                      Mxfp4Tile<L, decltype(group)::value, 1, kRowsAreStreams>(
                          rows, r0, stride, xq, y + r0, ldy);
                    });
}

}  // namespace

Mxfp4QuantizedRows Mxfp4QuantizedLayout(int64_t cols) {
  Mxfp4QuantizedRows q;
  q.blocks = (cols + kMxfp4Block - 1) / kMxfp4Block;
  q.num_spans = (q.blocks + kMxfp4BlocksPerSpan - 1) / kMxfp4BlocksPerSpan;
  q.padded_blocks = (q.blocks + 15) / 16 * 16;
  return q;
}

Mxfp4QuantizedRows QuantizeMxfp4Rows(const float* x, int64_t n, int64_t cols,
                                     int levels, Mxfp4Span* spans,
                                     float* scales, float* offsets) {
  Mxfp4QuantizedRows q = Mxfp4QuantizedLayout(cols);
  for (int64_t j = 0; j < n; ++j) {
    Mxfp4Span* row_spans = spans + j * q.num_spans;
    float* row_scales = scales + j * q.padded_blocks;
    QuantizeMxfp4Activations(x + j * cols, cols, q.blocks, levels, row_spans,
                             row_scales);
    if (offsets != nullptr) {
      ArrangeBlocks(row_spans, q.num_spans, q.padded_blocks, row_scales,
                    offsets + j * q.padded_blocks);
    }
  }
  q.spans = spans;
  q.scales = scales;
  q.offsets = offsets;
  return q;
}

void MatMulRowsMxfp4(const Mxfp4QuantizedRows& x, int64_t n, const Matrix& w,
                     int64_t row_begin, int64_t row_end, float* y, bool alone,
                     int levels) {
  const Mxfp4Rows rows{static_cast<const uint8_t*>(w.data), x.blocks,
                       w.exponents};
  if (levels == 1) {
    return Mxfp4Products<1>(rows, x, n, row_begin, row_end, y, w.rows, alone);
  }
  if (levels == 2) {
    return Mxfp4Products<2>(rows, x, n, row_begin, row_end, y, w.rows, alone);
  }
  Mxfp4Products<kMxfp4Levels>(rows, x, n, row_begin, row_end, y, w.rows, alone);
}

}  // namespace ringmoe::kernels::avx2

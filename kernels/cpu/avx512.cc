// AVX-512 products for one activation row (batch-1 decode), for mxfp4 up
// to DirectProductRows (batched decode of gpt-oss's experts) and for bf16
// from 2 to DirectProductRows rows (batched decode, small prefills). This
// translation unit alone is compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni; ops.cc calls into it only when UseAvx512() holds.
//
// int8, int4, mxfp4 and fp8: at one activation row their AVX2 kernels do
// several vector µops per 8 weight bytes, and 512-bit vectors (with VNNI for
// int8, int4 and mxfp4) halve that, on activations quantized (int8, int4,
// and mxfp4's three int8 levels, Mxfp4Span in isa.h) or scaled (fp8) exactly
// as the AVX2 path does. bf16 at one row was tried (32 weights per load,
// shift and mask, two FMAs) and was no faster than the AVX2 path, bound by
// memory as it is, slower on weights not 64-byte aligned
// (docs/PERFORMANCE.md); at 2+ rows the same widening is shared by all of
// them (Bf16Tile). One row's int8, int4, mxfp4 and fp8 weight rows are read
// as in avx2_quantized.cc, as three prefetched sequential streams per thread,
// six where the activations outgrow L1 (ForEachOneRowTile).
// Everything it defines lives in namespace avx512 (see isa.h).
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx512 {

#include "kernels/cpu/isa_unit-inl.h"

using avx2::Int8Chunk;
using avx2::kMxfp4BlocksPerSpan;
using avx2::kMxfp4Levels;
using avx2::Mxfp4Span;

namespace {

// 16 blocks of 32 columns at once, b0.. b0 + count - 1 (count ≤ 16) of a
// row: lane k holds block b0 + k's weight scale (f16, one per group of G =
// 32 or 64 columns, `s` the row's) times its activation scale (x_scales,
// one per block, zero from the row's last block up to a multiple of 16).
template <int G>
inline __m512 SixteenBlockScales(const uint16_t* s, int64_t b0, int count,
                                 const float* x_scales) {
  __m512 weight_scales;
  if (G == 32) {
    weight_scales = _mm512_cvtph_ps(
        count == 16
            ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + b0))
            : _mm256_maskz_loadu_epi16(_cvtu32_mask16((1u << count) - 1),
                                       s + b0));
  } else {
    const __m256 groups = _mm256_cvtph_ps(_mm_maskz_loadu_epi16(
        static_cast<__mmask8>((1u << ((count + 1) / 2)) - 1), s + b0 / 2));
    weight_scales = _mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7),
        _mm512_castps256_ps512(groups));
  }
  return _mm512_mul_ps(weight_scales, _mm512_loadu_ps(x_scales + b0));
}

// The lanes of vector j of a span of 16 blocks whose 64-byte vectors hold
// kBlocks blocks each (int32 lane l covers that vector's bytes 4l..4l+3):
// block kBlocks * j + l * kBlocks / 16, for _mm512_permutexvar_ps of
// SixteenBlockScales.
template <int kBlocks>
inline __m512i BlockOfLane(int j) {
  static_assert(kBlocks == 2 || kBlocks == 4,
                "16 lanes cover 2 blocks (int8) or 4 (int4, mxfp4)");
  return _mm512_add_epi32(
      _mm512_srli_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                          12, 13, 14, 15),
                        kBlocks == 2 ? 3 : 2),
      _mm512_set1_epi32(kBlocks * j));
}

// The loop of the integer tiles (Int8Tile, NibbleTile): weight rows
// r0 + i * stride (i < R), `row` the first and `row_step` bytes apart, of
// `blocks` blocks of kBlockBytes weight bytes (64 / kBlockBytes blocks per
// 64-byte vector), 16 blocks at a time, against N activation rows.
// `scales(i, a, b0, count)` is row i's SixteenBlockScales for blocks
// b0..b0 + count - 1 against activation row a; `widen(wv)` prepares the
// bytes wv of a weight vector once for all N, and `dot(widened, v, a,
// scale, acc)` adds its products with activation row a's vector v (its
// lanes' scales `scale`) to acc. Whole spans go unrolled into two
// accumulators per weight row and activation row; the row's last blocks,
// masked, into the first (an index known only at run time would keep the
// accumulators in memory): each sum is formed alike whatever R and N.
// y[a * ldy + i * y_step] = the sum of weight row i and activation row a.
// Against one activation row the weight rows are ForEachOneRowTile's
// streams, prefetched as WeightPrefetcher::Stream says; against more, one
// row at a time (blocks of rows kept in L2, see ForEachRowBlockAndGroup),
// prefetched kLongRowPrefetchLines ahead.
template <int kBlockBytes, int R, int N, typename ScalesFn, typename WidenFn,
          typename DotFn>
void RowSpans(const uint8_t* row, int64_t row_step, int64_t blocks,
              WeightType type, const ScalesFn& scales, const WidenFn& widen,
              const DotFn& dot, float* y, int64_t y_step, int64_t ldy) {
  constexpr int kBlocks = 64 / kBlockBytes;
  const WeightPrefetcher prefetch(type);
  __m512 acc[R][N][2];
  for (int i = 0; i < R; ++i) {
    for (int a = 0; a < N; ++a)
      acc[i][a][0] = acc[i][a][1] = _mm512_setzero_ps();
  }
  for (int64_t b0 = 0; b0 < blocks; b0 += 16) {
    const int count = static_cast<int>(Min<int64_t>(16, blocks - b0));
    __m512 combined[R][N];
    for (int i = 0; i < R; ++i) {
      for (int a = 0; a < N; ++a) combined[i][a] = scales(i, a, b0, count);
    }
    const uint8_t* at = row + kBlockBytes * b0;
    const int64_t v0 = b0 / kBlocks;
    if (count == 16) {
      RINGMOE_UNROLL
      for (int j = 0; j < 16 / kBlocks; ++j) {
        if (N == 1) {
          PrefetchStreams<R>(prefetch, at + 64 * j, row_step, 0);
        } else {
          for (int i = 0; i < R; ++i) {
            prefetch.TileRow<N>(at + i * row_step +
                                64 * (j + kLongRowPrefetchLines));
          }
        }
        const __m512i lanes = BlockOfLane<kBlocks>(j);
        for (int i = 0; i < R; ++i) {
          const auto widened =
              widen(_mm512_loadu_si512(at + i * row_step + 64 * j));
          for (int a = 0; a < N; ++a) {
            acc[i][a][j % 2] = dot(widened, v0 + j, a,
                                   _mm512_permutexvar_ps(lanes, combined[i][a]),
                                   acc[i][a][j % 2]);
          }
        }
      }
      continue;
    }
    for (int j = 0; kBlocks * j < count; ++j) {
      const __mmask64 bytes = _cvtu64_mask64(
          ~uint64_t{0} >>
          (64 - kBlockBytes * Min(kBlocks, count - kBlocks * j)));
      const __m512i lanes = BlockOfLane<kBlocks>(j);
      for (int i = 0; i < R; ++i) {
        const auto widened =
            widen(_mm512_maskz_loadu_epi8(bytes, at + i * row_step + 64 * j));
        for (int a = 0; a < N; ++a) {
          acc[i][a][0] =
              dot(widened, v0 + j, a,
                  _mm512_permutexvar_ps(lanes, combined[i][a]), acc[i][a][0]);
        }
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int a = 0; a < N; ++a) {
      y[a * ldy + i * y_step] =
          _mm512_reduce_add_ps(_mm512_add_ps(acc[i][a][0], acc[i][a][1]));
    }
  }
}

// The most activation rows an integer tile (Int8Tile, NibbleTile,
// Mxfp4Tile) takes at once: four rows' sums for each weight row (eight
// accumulators) and their scales fit the registers.
constexpr int kActivationGroup = 4;

// Weight rows [rb, re) against n activation rows of `activation_bytes` each
// as the integer tiles take them: `tile(std::integral_constant<int, R>(),
// std::integral_constant<int, N>(), r, stride, a)` computes weight rows
// r + i * stride (i < R) against activation rows a..a + N - 1. One
// activation row as ForEachOneRowTile<kLongStreams>'s streams; more in
// groups of up to kActivationGroup that fit L1 over blocks of `block_rows`
// weight rows kept in L2 (ForEachRowBlockAndGroup), a group of one as one
// row does.
template <int kLongStreams, typename TileFn>
void ForEachFewRowTile(int64_t n, int64_t rb, int64_t re,
                       int64_t activation_bytes, int64_t block_rows,
                       const TileFn& tile) {
  using One = std::integral_constant<int, 1>;
  const auto streams = [&](int64_t r0, int64_t r1, int64_t a) {
    ForEachOneRowTile<kLongStreams>(activation_bytes, r0, r1,
                                    [&](int64_t r, int64_t stride, auto rows) {
                                      tile(rows, One(), r, stride, a);
                                    });
  };
  if (n == 1) return streams(rb, re, 0);
  ForEachRowBlockAndGroup(
      rb, re, block_rows, n,
      Clamp<int64_t>(L1DataCacheBytes() / activation_bytes, 1,
                     kActivationGroup),
      [&](int64_t r0, int64_t r1, int64_t a, int64_t size) {
        const auto each_row = [&](auto activations) {
          for (int64_t r = r0; r < r1; ++r) tile(One(), activations, r, 1, a);
        };
        switch (size) {
          case 1:
            streams(r0, r1, a);
            break;
          case 2:
            each_row(std::integral_constant<int, 2>());
            break;
          case 3:
            each_row(std::integral_constant<int, 3>());
            break;
          default:
            each_row(std::integral_constant<int, kActivationGroup>());
            break;
        }
      });
}

// int8 against int16 activations (avx2::QuantizeActivationsInt16), 64
// weights (two blocks of 32) per two vpdpbusd: each q is split into its
// high byte h = q >> 8 (signed) and low byte l = q & 255 (unsigned), q =
// 256 h + l, so that each meets the weights as bytes, h the weights plus
// 128 (unsigned) and l the weights themselves (signed). Starting from
// -128 Σ h per int32 lane (its four columns, computed with the levels):
//   (-128 Σ h + Σ (w + 128) h) · 256 + Σ l w = Σ w q
// exactly (at most 2^24 in magnitude), then one convert and one FMA with
// each block's weight scale times its activation scale (SixteenBlockScales,
// one permute per vector). Seven vector µops per 64 weights, where
// vpmovsxbw + vpmaddwd took eight beside a scalar scale product per block
// (docs/PERFORMANCE.md).
// Under ActivationPrecision::kInt8 the activations are one int8 level per
// block of 32 (avx2::QuantizeActivationsInt8InOrder, llama.cpp's Q8_0 × Q8_0
// precision): they take `high`'s place, `low` goes unused and one vpdpbusd
// per 64 weights gives Σ w q (five vector µops).
struct alignas(64) Int16Levels {
  int8_t high[64];
  uint8_t low[64];
  int32_t start[16];  // -128 Σ high over each lane's four columns
};

// The scales of the first `blocks` blocks of Int8Chunks (two per chunk)
// into block_scales, zero from `blocks` up to a multiple of 16
// (SixteenBlockScales reads 16 at a time).
void ChunkBlockScales(const Int8Chunk* chunks, int64_t blocks,
                      float* block_scales) {
  for (int64_t b = 0; b < blocks; ++b)
    block_scales[b] = chunks[b / 2].scale[4 * (b % 2)];
  for (int64_t b = blocks; b < (blocks + 15) / 16 * 16; ++b)
    block_scales[b] = 0.f;
}

// -128 Σ high over each int32 lane's four columns.
inline __m512i LevelStart(__m512i high) {
  return _mm512_sub_epi32(
      _mm512_setzero_si512(),
      _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                            _mm512_set1_epi8(1), high),
                        7));
}

// Splits `blocks` blocks of 32 int16 activations into (blocks + 1) / 2
// Int16Levels (an odd last block paired with zeros).
void SplitInt16Levels(const int16_t* q, int64_t blocks, Int16Levels* out) {
  for (int64_t p = 0; p < (blocks + 1) / 2; ++p) {
    __m256i high[2], low[2];
    for (int h = 0; h < 2; ++h) {
      const __m512i v = 2 * p + h < blocks
                            ? _mm512_loadu_si512(q + 32 * (2 * p + h))
                            : _mm512_setzero_si512();
      high[h] = _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8));
      low[h] = _mm512_cvtepi16_epi8(v);
    }
    const __m512i high_bytes =
        _mm512_inserti64x4(_mm512_castsi256_si512(high[0]), high[1], 1);
    _mm512_store_si512(out[p].high, high_bytes);
    _mm512_store_si512(
        out[p].low,
        _mm512_inserti64x4(_mm512_castsi256_si512(low[0]), low[1], 1));
    _mm512_store_si512(out[p].start, LevelStart(high_bytes));
  }
}

// The (blocks + 1) / 2 Int16Levels of one activation row quantized to one
// int8 level in column order (avx2::QuantizeActivationsInt8InOrder): its
// bytes as `high`, an odd last block paired with zeros.
void Int8Levels(const int8_t* q, int64_t blocks, Int16Levels* out) {
  for (int64_t p = 0; p < (blocks + 1) / 2; ++p) {
    const __m512i high = _mm512_maskz_loadu_epi8(
        2 * p + 1 < blocks ? ~__mmask64{0} : _cvtu64_mask64(0xffffffffu),
        q + 64 * p);
    _mm512_store_si512(out[p].high, high);
    _mm512_store_si512(out[p].start, LevelStart(high));
  }
}

// Rows r0 + i * stride (i < R) of int8 weights with f16 scales per group of
// G (32 or 64) against N activation rows' Int16Levels (row a's from
// x + a * ldx) and block scales (row a's from x_scales + a * ld_scales,
// zero from `blocks` up to a multiple of 16): their int16 split in two
// levels (L = 2) or their one int8 level (L = 1, Int8Levels), each weight
// vector offset by 128 once for all N: y[a * ldy + r0 + i * stride].
template <int L, int G, int R, int N>
void Int8Tile(const int8_t* w, int64_t row_bytes, const uint16_t* scales,
              int64_t groups, const Int16Levels* x, int64_t ldx,
              const float* x_scales, int64_t ld_scales, int64_t blocks,
              int64_t r0, int64_t stride, float* y, int64_t ldy) {
  const uint16_t* ws = scales + r0 * groups;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  struct Weights {
    __m512i plain, biased;
  };
  RowSpans<32, R, N>(
      reinterpret_cast<const uint8_t*>(w + r0 * row_bytes), stride * row_bytes,
      blocks, WeightType::kInt8,
      [&](int i, int a, int64_t b0, int count) {
        return SixteenBlockScales<G>(ws + i * stride * groups, b0, count,
                                     x_scales + a * ld_scales);
      },
      [&](__m512i wv) {
        return Weights{wv, _mm512_xor_si512(wv, bias)};
      },
      [&](const Weights& wv, int64_t v, int a, __m512 scale, __m512 acc) {
        const Int16Levels& xv = x[a * ldx + v];
        __m512i dot = _mm512_dpbusd_epi32(
            _mm512_load_si512(xv.start), wv.biased, _mm512_load_si512(xv.high));
        if (L == 2) {
          dot = _mm512_dpbusd_epi32(_mm512_slli_epi32(dot, 8),
                                    _mm512_load_si512(xv.low), wv.plain);
        }
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
      },
      y + r0, stride, ldy);
}

// Rows [rb, re) of int8 weights against n activation rows (y[a * ldy + r])
// prepared by PrepareIntegerActivations (Int16Levels: their int16 split in
// two levels, or their one int8 level where activation_levels is 1), as
// ForEachFewRowTile takes them.
void Int8Rows(const IntegerActivations& x, int64_t n, const Matrix& w,
              int64_t rb, int64_t re, float* y, int activation_levels) {
  const int64_t cols = w.cols;
  const int64_t groups = (cols + w.group_size - 1) / w.group_size;
  const int64_t blocks = (cols + 31) / 32;
  const int64_t padded_blocks = x.padded_blocks;
  const int64_t num_levels = x.row_bytes / int64_t{sizeof(Int16Levels)};
  const auto* levels = static_cast<const Int16Levels*>(x.rows);
  const float* q_scale = x.scales;
  const bool one_level = activation_levels == 1;
  const auto* data = static_cast<const int8_t*>(w.data);
  const int64_t row_bytes = groups * w.group_size;
  const auto run = [&](auto level_count) {
    constexpr int L = decltype(level_count)::value;
    const auto tile = [&](auto rows, auto activations, int64_t r,
                          int64_t stride, int64_t a) {
      constexpr int R = decltype(rows)::value, N = decltype(activations)::value;
      const Int16Levels* xa = levels + a * num_levels;
      const float* sa = q_scale + a * padded_blocks;
      if (w.group_size == 64) {
        Int8Tile<L, 64, R, N>(data, row_bytes, w.scales, groups, xa, num_levels,
                              sa, padded_blocks, blocks, r, stride,
                              y + a * w.rows, w.rows);
      } else {
        Int8Tile<L, 32, R, N>(data, row_bytes, w.scales, groups, xa, num_levels,
                              sa, padded_blocks, blocks, r, stride,
                              y + a * w.rows, w.rows);
      }
    };
    ForEachFewRowTile<kLongRowStreams>(
        n, rb, re, num_levels * static_cast<int64_t>(sizeof(Int16Levels)),
        L2BlockRows(row_bytes + groups * int64_t{sizeof(uint16_t)}), tile);
  };
  if (one_level) return run(std::integral_constant<int, 1>());
  run(std::integral_constant<int, 2>());
}

// fp8 products read 64 weights per load and widen them as float bits, the
// recipe of avx2::Fp8InterleavedLoader on 512-bit vectors: as 16-bit words
// the odd bytes sit in the high halves and the even ones get there by one
// shift left; an arithmetic shift right by 4 puts a byte's exponent and
// mantissa where a float's sit in the top 16 bits; a word's high half is
// then a float of its column by the mask kFp8FloatBitsMask, its low half
// by a 32-bit shift left and the same mask: nine integer µops per 64
// weights, fewer than widening through f16 with vcvtph2ps, which was
// slower than the AVX2 path (docs/PERFORMANCE.md). Float t of int32 lane
// d is column 4d + t of the chunk, so the activations of each whole 64
// columns are laid out as ordered[16 t + d] = x[4 d + t] once per row block
// (the columns after the last whole chunk stay in order).
constexpr int kFp8Chunk = 64;
void OrderFp8Activations(const float* x, int64_t cols, float* ordered) {
  const int64_t whole = cols / kFp8Chunk * kFp8Chunk;
  for (int64_t k = 0; k < whole; k += kFp8Chunk) {
    const __m512 v0 = _mm512_loadu_ps(x + k);
    const __m512 v1 = _mm512_loadu_ps(x + k + 16);
    const __m512 v2 = _mm512_loadu_ps(x + k + 32);
    const __m512 v3 = _mm512_loadu_ps(x + k + 48);
    for (int t = 0; t < 4; ++t) {
      // Columns 4d + t, d < 8, of v0:v1 and of v2:v3 (the upper eight lanes
      // of each unused), then the two halves side by side.
      const __m512i index =
          _mm512_add_epi32(_mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 0,
                                             0, 0, 0, 0, 0, 0),
                           _mm512_set1_epi32(t));
      _mm512_storeu_ps(
          ordered + k + 16 * t,
          _mm512_shuffle_f32x4(_mm512_permutex2var_ps(v0, index, v1),
                               _mm512_permutex2var_ps(v2, index, v3), 0x44));
    }
  }
  std::memcpy(ordered + whole, x + whole, (cols - whole) * sizeof(float));
}

// fp8 rows r0 + i * stride (i < R) against one activation row scaled by
// avx2::ScaleFp8Activations with kFp8ActivationUnit (so a weight widens
// with no multiply) and ordered by OrderFp8Activations; y[r] is the row's
// sum, still to be multiplied by kFp8SumUnit. Two accumulators per row,
// each row's sum formed alike whatever R.
template <int R>
void Fp8Tile(const uint8_t* w, int64_t cols, const float* x, int64_t r0,
             int64_t stride, float* y) {
  const uint8_t* row = w + r0 * cols;
  const int64_t row_step = stride * cols;
  const __m512i mask = _mm512_set1_epi32(kFp8FloatBitsMask);
  const auto float_of = [&](__m512i v) {
    return _mm512_castsi512_ps(_mm512_and_si512(v, mask));
  };
  const WeightPrefetcher prefetch(WeightType::kFp8E4M3);
  __m512 acc[R][2];
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + kFp8Chunk <= cols; k += kFp8Chunk) {
    PrefetchStreams<R>(prefetch, row + k, row_step, 0);
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      const __m512i bytes = _mm512_loadu_si512(row + i * row_step + k);
      const __m512i odd = _mm512_srai_epi16(bytes, 4);
      const __m512i even = _mm512_srai_epi16(_mm512_slli_epi16(bytes, 8), 4);
      acc[i][0] = _mm512_fmadd_ps(float_of(_mm512_slli_epi32(even, 16)),
                                  _mm512_loadu_ps(x + k), acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(float_of(_mm512_slli_epi32(odd, 16)),
                                  _mm512_loadu_ps(x + k + 16), acc[i][1]);
      acc[i][0] = _mm512_fmadd_ps(float_of(even), _mm512_loadu_ps(x + k + 32),
                                  acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(float_of(odd), _mm512_loadu_ps(x + k + 48),
                                  acc[i][1]);
    }
  }
  // The tail, in column order: 16 at a time, sign-extended to 32 bits and
  // shifted left by 20 (avx2::Fp8TimesTwoToMinus120).
  for (; k < cols; k += 16) {
    const int64_t left = Min<int64_t>(16, cols - k);
    const __mmask16 lanes = static_cast<__mmask16>((1u << left) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(lanes, x + k);
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      const __m512i words = _mm512_cvtepi8_epi32(
          _mm_maskz_loadu_epi8(lanes, row + i * row_step + k));
      acc[i][0] = _mm512_fmadd_ps(float_of(_mm512_slli_epi32(words, 20)), xv,
                                  acc[i][0]);
    }
  }
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) {
    y[r0 + i * stride] =
        _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
  }
}

// 2^(e - 127) of the `lanes` exponents at e (e = 0: 2^-127), one per lane.
inline __m512 E8m0x16(const uint8_t* e, __mmask16 lanes) {
  const __m512i v = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(lanes, e));
  return _mm512_mask_blend_ps(
      _mm512_cmpeq_epi32_mask(v, _mm512_setzero_si512()),
      _mm512_castsi512_ps(_mm512_slli_epi32(v, 23)), _mm512_set1_ps(0x1p-127f));
}

// Rows r0..r0 + R - 1 of mxfp4 weights against the first N activation rows
// of x, quantized in L levels (kMxfp4Levels; 2 for
// ActivationPrecision::kBf16, 1 for kInt8), y[a * ldy + r0 + i]: a span's
// 64 weight bytes are split into nibbles and looked up (vpshufb) as 2 *
// e2m1 + 12 once for all N rows, then meet each row's activation levels in
// two dpbusd each, shifting the sum by 8 before each next level; less the
// offsets that is Σ 2 * e2m1 * (65536 q1 + 256 q2 + q3), (256 q1 + q2) or
// q1 for L = 3, 2, 1 exactly, the AVX2 path's integers. One convert
// and one FMA with each block's weight scale times its activation scale,
// taken 16 blocks at a time. Each (weight row, activation row) sum is
// formed alike whatever R and N: a batch's rows come out the same in any
// grouping.
template <int L, int R, int N>
void Mxfp4Tile(const uint8_t* w, const uint8_t* exponents,
               const avx2::Mxfp4QuantizedRows& x, int64_t r0, int64_t stride,
               float* y, int64_t ldy) {
  const int64_t blocks = x.blocks;
  const int64_t row_bytes = blocks * 16;
  const uint8_t* row = w + r0 * row_bytes;
  const uint8_t* e = exponents + r0 * blocks;
  const __m512i table = _mm512_broadcast_i32x4(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  // The lanes of span j of 16 blocks take block 4j + lane / 4's scale.
  __m512i scale_lane[kMxfp4BlocksPerSpan];
  for (int j = 0; j < kMxfp4BlocksPerSpan; ++j)
    scale_lane[j] = BlockOfLane<kMxfp4BlocksPerSpan>(j);
  struct Codes {
    __m512i lo, hi;
  };
  const auto look_up = [&](__m512i bytes) {
    return Codes{
        _mm512_shuffle_epi8(table, _mm512_and_si512(bytes, nibble)),
        _mm512_shuffle_epi8(
            table, _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble))};
  };
  const auto span = [&](const Codes& codes, const Mxfp4Span& xp, __m512 scale,
                        __m512 acc) {
    __m512i dot = _mm512_setzero_si512();
    for (int l = 0; l < L; ++l) {
      if (l > 0) dot = _mm512_slli_epi32(dot, 8);
      dot = _mm512_dpbusd_epi32(dot, codes.lo, _mm512_load_si512(xp.even[l]));
      dot = _mm512_dpbusd_epi32(dot, codes.hi, _mm512_load_si512(xp.odd[l]));
    }
    dot = _mm512_sub_epi32(dot, _mm512_load_si512(xp.offset));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
  };
  const WeightPrefetcher prefetch(WeightType::kMxfp4);
  const auto prefetch_lines = [&](int64_t b0) {
    for (int line = 0; line < kMxfp4BlocksPerSpan; ++line) {
      if (N == 1) {
        PrefetchStreams<R>(prefetch, row + 16 * b0, stride * row_bytes,
                           64 * line);
      } else {
        // One row at a time: the rows are one sequential stream.
        prefetch.TileRow<N>(row + 16 * b0 +
                            64 * (line + kLongRowPrefetchLines));
      }
    }
  };
  __m512 acc[R][N][2];
  for (int i = 0; i < R; ++i) {
    for (int a = 0; a < N; ++a)
      acc[i][a][0] = acc[i][a][1] = _mm512_setzero_ps();
  }
  for (int64_t b0 = 0; b0 < blocks; b0 += 16) {
    const int count = static_cast<int>(Min<int64_t>(16, blocks - b0));
    const __mmask16 exponent_lanes = _cvtu32_mask16((1u << count) - 1);
    __m512 scales[R][N];
    for (int i = 0; i < R; ++i) {
      const __m512 weight_scales =
          E8m0x16(e + i * stride * blocks + b0, exponent_lanes);
      for (int a = 0; a < N; ++a) {
        scales[i][a] = _mm512_mul_ps(
            weight_scales, _mm512_load_ps(x.scales + a * x.padded_blocks + b0));
      }
    }
    const int64_t p0 = b0 / kMxfp4BlocksPerSpan;
    // Span j of the 16 blocks, its bytes at `p` (of row 0) loaded by
    // load(p): the accumulators' index j % 2 is a constant only where the
    // loop over j is unrolled, so the two loops below call this with j known.
    const auto spans_of = [&](int j, const auto& load) {
      for (int i = 0; i < R; ++i) {
        const Codes codes =
            look_up(load(row + i * stride * row_bytes + 16 * b0 + 64 * j));
        for (int a = 0; a < N; ++a) {
          acc[i][a][j % 2] =
              span(codes, x.spans[a * x.num_spans + p0 + j],
                   _mm512_permutexvar_ps(scale_lane[j], scales[i][a]),
                   acc[i][a][j % 2]);
        }
      }
    };
    if (count == 16) {
      prefetch_lines(b0);
      RINGMOE_UNROLL
      for (int j = 0; j < kMxfp4BlocksPerSpan; ++j) {
        spans_of(j, [](const uint8_t* p) { return _mm512_loadu_si512(p); });
      }
      continue;
    }
    // The row's last, partial 16 blocks: masked loads (zero bytes meet zero
    // activations and offsets).
    RINGMOE_UNROLL
    for (int j = 0; kMxfp4BlocksPerSpan * j < count; ++j) {
      const int span_blocks =
          Min<int>(kMxfp4BlocksPerSpan, count - kMxfp4BlocksPerSpan * j);
      const __mmask64 bytes =
          _cvtu64_mask64(~uint64_t{0} >> (64 - 16 * span_blocks));
      spans_of(j, [bytes](const uint8_t* p) {
        return _mm512_maskz_loadu_epi8(bytes, p);
      });
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int a = 0; a < N; ++a) {
      y[a * ldy + r0 + i * stride] =
          _mm512_reduce_add_ps(_mm512_add_ps(acc[i][a][0], acc[i][a][1]));
    }
  }
}

// Rows [rb, re) of mxfp4 weights against n activation rows quantized in
// `levels` levels (q), as ForEachFewRowTile takes them (six streams for
// long rows).
void Mxfp4Rows(const avx2::Mxfp4QuantizedRows& q, int64_t n, const Matrix& w,
               int64_t rb, int64_t re, float* y, int levels) {
  const int64_t blocks = q.blocks;
  const int64_t activation_bytes =
      q.num_spans * static_cast<int64_t>(sizeof(Mxfp4Span));
  const auto* data = static_cast<const uint8_t*>(w.data);
  const auto run = [&](auto levels_constant) {
    constexpr int L = decltype(levels_constant)::value;
    const auto tile = [&](auto rows, auto activations, int64_t r,
                          int64_t stride, int64_t a) {
      avx2::Mxfp4QuantizedRows xa = q;
      xa.spans += a * q.num_spans;
      xa.scales += a * q.padded_blocks;
      Mxfp4Tile<L, decltype(rows)::value, decltype(activations)::value>(
          data, w.exponents, xa, r, stride, y + a * w.rows, w.rows);
    };
    ForEachFewRowTile<kLongRowStreams>(n, rb, re, activation_bytes,
                                       Mxfp4BlockRows(blocks), tile);
  };
  if (levels == 1) return run(std::integral_constant<int, 1>());
  if (levels == 2) return run(std::integral_constant<int, 2>());
  run(std::integral_constant<int, kMxfp4Levels>());
}

// int4 against int8 activations (avx2::QuantizeActivationsInt8): two
// consecutive Int8Chunks joined so that 64 bytes of weights meet their
// activations in single 512-bit loads. The weights are split into nibbles
// (codes 8 above the values, see avx2_quantized.cc) and multiplied as bytes
// by two vpdpbusd starting from the negated offsets (each int32 lane ends
// with the same integer as the AVX2 path's vpmaddubsw + vpmaddwd less its
// offset), then converted and scaled per lane by one permute of
// SixteenBlockScales: eight vector µops per 128 weights.
struct alignas(64) NibblePair {
  int8_t even[64];
  int8_t odd[64];
  int32_t start[16];  // -8 Σ activations over each lane's eight columns
};

// Joins `count` chunks into (count + 1) / 2 pairs (an odd last chunk paired
// with zeros) and writes each block's activation scale to block_scales,
// zero from block 2 * count up to a multiple of 16.
void PairChunks(const Int8Chunk* chunks, int64_t count, NibblePair* out,
                float* block_scales) {
  const Int8Chunk zero{};
  for (int64_t p = 0; p < (count + 1) / 2; ++p) {
    for (int h = 0; h < 2; ++h) {
      const Int8Chunk& c = 2 * p + h < count ? chunks[2 * p + h] : zero;
      std::memcpy(out[p].even + 32 * h, c.even, sizeof(c.even));
      std::memcpy(out[p].odd + 32 * h, c.odd, sizeof(c.odd));
      for (int l = 0; l < 8; ++l) out[p].start[8 * h + l] = -c.offset[l];
    }
  }
  ChunkBlockScales(chunks, 2 * count, block_scales);
}

// Rows r0 + i * stride (i < R) of int4 weights (row_bytes each, 16 per
// block of 32) with f16 scales per group of G (32 or 64) against N
// activation rows' NibblePairs (row a's from x + a * ldx) and block scales
// (row a's from x_scales + a * ld_scales), each weight vector split into
// nibbles once for all N: y[a * ldy + r0 + i * stride].
template <int G, int R, int N>
void NibbleTile(const uint8_t* w, int64_t row_bytes, const uint16_t* scales,
                int64_t groups, const NibblePair* x, int64_t ldx,
                const float* x_scales, int64_t ld_scales, int64_t r0,
                int64_t stride, float* y, int64_t ldy) {
  const uint16_t* ws = scales + r0 * groups;
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  struct Nibbles {
    __m512i lo, hi;
  };
  RowSpans<16, R, N>(
      w + r0 * row_bytes, stride * row_bytes, row_bytes / 16, WeightType::kInt4,
      [&](int i, int a, int64_t b0, int count) {
        return SixteenBlockScales<G>(ws + i * stride * groups, b0, count,
                                     x_scales + a * ld_scales);
      },
      [&](__m512i wv) {
        return Nibbles{_mm512_and_si512(wv, nibble),
                       _mm512_and_si512(_mm512_srli_epi16(wv, 4), nibble)};
      },
      [&](const Nibbles& w4, int64_t v, int a, __m512 scale, __m512 acc) {
        const NibblePair& xp = x[a * ldx + v];
        __m512i dot = _mm512_dpbusd_epi32(_mm512_load_si512(xp.start), w4.lo,
                                          _mm512_load_si512(xp.even));
        dot = _mm512_dpbusd_epi32(dot, w4.hi, _mm512_load_si512(xp.odd));
        return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, acc);
      },
      y + r0, stride, ldy);
}

// Rows [rb, re) of int4 weights against n activation rows (y[a * ldy + r])
// prepared by PrepareIntegerActivations (int8 chunks, as the AVX2 path
// quantizes them, paired), as ForEachFewRowTile takes them.
template <int G>
void NibbleRows(const IntegerActivations& x, int64_t n, const uint8_t* data,
                int64_t row_bytes, const uint16_t* scales, int64_t groups,
                int64_t rb, int64_t re, float* y, int64_t ldy) {
  const int64_t num_pairs = x.row_bytes / int64_t{sizeof(NibblePair)};
  const int64_t padded_blocks = x.padded_blocks;
  const auto* pairs = static_cast<const NibblePair*>(x.rows);
  const float* block_scales = x.scales;
  const int64_t activation_bytes =
      num_pairs * static_cast<int64_t>(sizeof(NibblePair));
  const auto tile = [&](auto rows, auto activations, int64_t r, int64_t stride,
                        int64_t a) {
    NibbleTile<G, decltype(rows)::value, decltype(activations)::value>(
        data, row_bytes, scales, groups, pairs + a * num_pairs, num_pairs,
        block_scales + a * padded_blocks, padded_blocks, r, stride, y + a * ldy,
        ldy);
  };
  // Six streams drew less than three at 7168 columns (docs/PERFORMANCE.md,
  // "Six streams for long rows").
  ForEachFewRowTile<kStreamSegments>(
      n, rb, re, activation_bytes,
      L2BlockRows(row_bytes + groups * int64_t{sizeof(uint16_t)}), tile);
}

// NibbleRows for w's group size.
void Int4Rows(const IntegerActivations& x, int64_t n, const Matrix& w,
              int64_t rb, int64_t re, float* y) {
  const int64_t groups = (w.cols + w.group_size - 1) / w.group_size;
  const auto* data = static_cast<const uint8_t*>(w.data);
  const int64_t row_bytes = groups * w.group_size / 2;
  if (w.group_size == 64) {
    return NibbleRows<64>(x, n, data, row_bytes, w.scales, groups, rb, re, y,
                          w.rows);
  }
  NibbleRows<32>(x, n, data, row_bytes, w.scales, groups, rb, re, y, w.rows);
}

// bf16 weights against 2 to DirectProductRows(kBF16) float32 activation
// rows (batched decode). A 64-byte load holds 32 weights as 16 pairs:
// shifting each 32-bit lane left by 16 widens the even columns to float and
// clearing its low half the odd ones, two simple integer µops per 32
// weights (the AVX2 path spends two shuffles and two shifts per 16, and
// repeats them for every group of three activation rows), against
// activations laid out to match (SplitByColumnParity). A tile of R weight
// rows and N activation rows widens each weight once for all N (the AVX2
// tiles were bound by that vector work at 4-8 rows, docs/PERFORMANCE.md).

// x's n rows of `cols` as rows of ldx = 32 · ceil(cols / 32) floats, each
// 32 columns as their 16 even columns then their 16 odd ones, zeros past
// cols.
void SplitByColumnParity(const float* x, int64_t n, int64_t cols, int64_t ldx,
                         float* out) {
  alignas(64) static constexpr int32_t kEven[16] = {
      0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
  alignas(64) static constexpr int32_t kOdd[16] = {
      1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
  const __m512i even = _mm512_load_si512(kEven);
  const __m512i odd = _mm512_load_si512(kOdd);
  for (int64_t j = 0; j < n; ++j) {
    const float* row = x + j * cols;
    float* dst = out + j * ldx;
    for (int64_t k = 0; k < ldx; k += 32) {
      const int64_t left = Clamp<int64_t>(cols - k, 0, 32);
      const __m512 low = _mm512_maskz_loadu_ps(
          _cvtu32_mask16((1u << Min<int64_t>(left, 16)) - 1), row + k);
      const __m512 high = _mm512_maskz_loadu_ps(
          _cvtu32_mask16((1u << Max<int64_t>(left - 16, 0)) - 1), row + k + 16);
      _mm512_store_ps(dst + k, _mm512_permutex2var_ps(low, even, high));
      _mm512_store_ps(dst + k + 16, _mm512_permutex2var_ps(low, odd, high));
    }
  }
}

// y[a * ldy + r0 + i] = dot(w row r0 + i, x row a) for i < R, a < N, with
// `xs` as SplitByColumnParity lays it out (rows ldx apart). Each output's
// sum is formed alike whatever R, N and the rows around it.
template <int R, int N>
void Bf16Tile(const uint16_t* w, int64_t cols, const float* xs, int64_t ldx,
              int64_t r0, float* y, int64_t ldy) {
  const uint16_t* row = w + r0 * cols;
  const __m512i high_halves = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  const WeightPrefetcher prefetch(WeightType::kBF16);
  __m512 acc[R][N];
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) {
    RINGMOE_UNROLL
    for (int a = 0; a < N; ++a) acc[i][a] = _mm512_setzero_ps();
  }
  const auto chunk = [&](int64_t k, const auto& load) {
    __m512 even[R], odd[R];
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      const __m512i pairs = load(row + i * cols + k);
      even[i] = _mm512_castsi512_ps(_mm512_slli_epi32(pairs, 16));
      odd[i] = _mm512_castsi512_ps(_mm512_and_si512(pairs, high_halves));
    }
    RINGMOE_UNROLL
    for (int a = 0; a < N; ++a) {
      __m512 x_even = _mm512_load_ps(xs + a * ldx + k);
      __m512 x_odd = _mm512_load_ps(xs + a * ldx + k + 16);
      // Kept in registers: GCC otherwise folds each load into all R FMAs
      // that use it, R loads where one does, and the tile was bound by
      // loads (docs/PERFORMANCE.md).
      asm("" : "+v"(x_even), "+v"(x_odd));
      RINGMOE_UNROLL
      for (int i = 0; i < R; ++i) {
        acc[i][a] = _mm512_fmadd_ps(even[i], x_even, acc[i][a]);
        acc[i][a] = _mm512_fmadd_ps(odd[i], x_odd, acc[i][a]);
      }
    }
  };
  int64_t k = 0;
  for (; k + 32 <= cols; k += 32) {
    // The next tile's rows at the same columns, one tile's time ahead:
    // faster from memory than each row's own line kLongRowPrefetchLines
    // ahead (docs/PERFORMANCE.md).
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) prefetch.TileRow<N>(row + (R + i) * cols + k);
    chunk(k, [](const uint16_t* p) { return _mm512_loadu_si512(p); });
  }
  if (k < cols) {
    const __mmask32 tail = _cvtu32_mask32((1u << (cols - k)) - 1);
    chunk(k, [tail](const uint16_t* p) {
      return _mm512_maskz_loadu_epi16(tail, p);
    });
  }
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) {
    RINGMOE_UNROLL
    for (int a = 0; a < N; ++a)
      y[a * ldy + r0 + i] = _mm512_reduce_add_ps(acc[i][a]);
  }
}

// Activation rows per Bf16Tile: 8 rows and 3 weight rows are 24
// accumulators, 6 widened weights and 2 activations, the 32 registers.
constexpr int kBf16ActivationGroup = 8;

// Rows [rb, re) of bf16 weights against n activation rows, in groups of up
// to kBf16ActivationGroup over blocks of weight rows that stay in L2
// (ForEachRowBlockAndGroup); tiles of four weight rows against up to four
// activation rows, three against more.
void Bf16Rows(const float* x, int64_t n, const Matrix& w, int64_t rb,
              int64_t re, float* y) {
  const int64_t cols = w.cols;
  const int64_t ldx = (cols + 31) / 32 * 32;
  float* xs = Scratch<float>(ScratchSlot::kSplitActivations, n * ldx);
  SplitByColumnParity(x, n, cols, ldx, xs);
  const auto* data = static_cast<const uint16_t*>(w.data);
  const int64_t block_rows =
      n <= kBf16ActivationGroup
          ? re - rb
          : Max<int64_t>(12, L2CacheBytes() / 4 / (cols * 2) / 12 * 12);
  ForEachRowBlockAndGroup(
      rb, re, block_rows, n, kBf16ActivationGroup,
      [&](int64_t r0, int64_t r1, int64_t first, int64_t size) {
        const float* xa = xs + first * ldx;
        float* ya = y + first * w.rows;
        const auto rows_of = [&](auto activations) {
          constexpr int N = decltype(activations)::value;
          constexpr int R = N <= 4 ? 4 : 3;
          int64_t r = r0;
          for (; r + R <= r1; r += R)
            Bf16Tile<R, N>(data, cols, xa, ldx, r, ya, w.rows);
          for (; r < r1; ++r)
            Bf16Tile<1, N>(data, cols, xa, ldx, r, ya, w.rows);
        };
        WithCount<kBf16ActivationGroup>(size, rows_of);
      });
}

}  // namespace

void MatMulRow(const float* x, const Matrix& w, int64_t row_begin,
               int64_t row_end, float* y) {
  const int64_t cols = w.cols;
  switch (w.type) {
    case WeightType::kFp8E4M3: {
      float* scaled = Scratch<float>(ScratchSlot::kScaledActivations, 2 * cols);
      float* ordered = scaled + cols;
      const auto* data = static_cast<const uint8_t*>(w.data);
      ForEachFp8RowBlock(w, row_begin, row_end,
                         [&](int64_t begin, int64_t end, int64_t block) {
                           avx2::ScaleFp8Activations(w, block, x, 1, scaled);
                           OrderFp8Activations(scaled, cols, ordered);
                           ForEachOneRowTile(
                               cols * int64_t{sizeof(float)}, begin, end,
                               [&](int64_t r, int64_t stride, auto rows) {
                                 Fp8Tile<decltype(rows)::value>(
                                     data, cols, ordered, r, stride, y);
                               });
                         });
      for (int64_t r = row_begin; r < row_end; ++r) y[r] *= kFp8SumUnit;
      break;
    }
    default:
      avx2::MatMulRowsDirect(x, 1, w, row_begin, row_end, y, /*alone=*/true);
      break;
  }
}

void MatMulRowsMxfp4(const avx2::Mxfp4QuantizedRows& x, int64_t n,
                     const Matrix& w, int64_t row_begin, int64_t row_end,
                     float* y, int levels) {
  Mxfp4Rows(x, n, w, row_begin, row_end, y, levels);
}

IntegerActivations IntegerActivationLayout(const Matrix& w) {
  IntegerActivations x;
  if (w.type == WeightType::kInt8) {
    const int64_t blocks = (w.cols + 31) / 32;
    x.row_bytes = (blocks + 1) / 2 * int64_t{sizeof(Int16Levels)};
    x.padded_blocks = (blocks + 15) / 16 * 16;
  } else {
    const int64_t groups = (w.cols + w.group_size - 1) / w.group_size;
    const int64_t chunks = (groups * w.group_size / 2 + 31) / 32;
    x.row_bytes = (chunks + 1) / 2 * int64_t{sizeof(NibblePair)};
    x.padded_blocks = (2 * chunks + 15) / 16 * 16;
  }
  return x;
}

IntegerActivations PrepareIntegerActivations(const float* x, int64_t n,
                                             const Matrix& w,
                                             int activation_levels, void* rows,
                                             float* scales) {
  IntegerActivations out = IntegerActivationLayout(w);
  out.rows = rows;
  out.scales = scales;
  const int64_t cols = w.cols;
  auto* bytes = static_cast<uint8_t*>(rows);
  if (w.type == WeightType::kInt4) {
    const int64_t groups = (cols + w.group_size - 1) / w.group_size;
    const int64_t chunks = (groups * w.group_size / 2 + 31) / 32;
    Int8Chunk* xq =
        Scratch<Int8Chunk>(ScratchSlot::kActivationsInt8, n * chunks);
    avx2::QuantizeActivationsInt8(x, n, cols, chunks, xq);
    for (int64_t a = 0; a < n; ++a) {
      PairChunks(xq + a * chunks, chunks,
                 reinterpret_cast<NibblePair*>(bytes + a * out.row_bytes),
                 scales + a * out.padded_blocks);
    }
    return out;
  }
  const int64_t blocks = (cols + 31) / 32;
  const bool one_level = activation_levels == 1;
  for (int64_t a = 0; a < n; ++a) {
    float* scale = scales + a * out.padded_blocks;
    auto* levels = reinterpret_cast<Int16Levels*>(bytes + a * out.row_bytes);
    if (one_level) {
      int8_t* q8 = Scratch<int8_t>(ScratchSlot::kActivationsInt8, blocks * 32);
      avx2::QuantizeActivationsInt8InOrder(x + a * cols, 1, cols, q8, scale);
      Int8Levels(q8, blocks, levels);
    } else {
      int16_t* q16 =
          Scratch<int16_t>(ScratchSlot::kActivationsInt16, blocks * 32);
      avx2::QuantizeActivationsInt16(x + a * cols, 1, cols, q16, scale);
      SplitInt16Levels(q16, blocks, levels);
    }
    // A loop, not std::fill: that would be emitted into this unit, outside
    // its namespace (isa_symbols_test).
    for (int64_t b = blocks; b < out.padded_blocks; ++b) scale[b] = 0.f;
  }
  return out;
}

void MatMulRowsInt4(const IntegerActivations& x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y) {
  Int4Rows(x, n, w, row_begin, row_end, y);
}

void MatMulRowsInt8(const IntegerActivations& x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y,
                    int activation_levels) {
  Int8Rows(x, n, w, row_begin, row_end, y, activation_levels);
}

void MatMulRowsBf16(const float* x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y) {
  Bf16Rows(x, n, w, row_begin, row_end, y);
}

}  // namespace ringmoe::kernels::avx512

// AVX2 products of int8 and int4 weights against few activation rows, as
// integer products on quantized activations (MatMulRowsInt8/Int4,
// avx2_products.h), and the activation quantizers (isa.h).
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2_internal.h"
#include "kernels/cpu/avx2_products.h"
#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx2 {

namespace {

// int4 weights against few activation rows: widening nibbles to float
// costs more vector work per byte than memory delivers, so the activations
// are quantized to int8 instead (blocks of 32 columns, scale = max|x| / 127,
// round to nearest even) and 64 weights at a time are multiplied as bytes
// (vpmaddubsw, vpmaddwd), with one float multiply-add per 64, on
// activations laid out as Int8Chunk (isa.h).

// Quantizes one block of 32 activations (`count` <= 32 real ones, the rest
// zero) into half `half` of `chunk`.
void QuantizeBlock(const float* x, int64_t count, int half, Int8Chunk* chunk) {
  __m256 v[4];
  const float max_abs = LoadBlock32(x, count, v);
  const __m256 inv = _mm256_set1_ps(max_abs > 0 ? 127.f / max_abs : 0.f);
  __m256i q[4];
  for (int j = 0; j < 4; ++j)
    q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], inv));
  StoreEvenOddBytes(q, chunk->even + 16 * half, chunk->odd + 16 * half);
  for (int i = 0; i < 4; ++i) chunk->scale[4 * half + i] = max_abs / 127.f;
}

}  // namespace

void QuantizeActivationsInt8(const float* x, int64_t n, int64_t cols,
                             int64_t chunks, Int8Chunk* out) {
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t c = 0; c < chunks; ++c) {
      Int8Chunk* chunk = out + j * chunks + c;
      for (int half = 0; half < 2; ++half) {
        const int64_t begin = c * 64 + half * 32;
        QuantizeBlock(x + j * cols + Min(begin, cols),
                      Clamp<int64_t>(cols - begin, 0, 32), half, chunk);
      }
      const __m256i sums = _mm256_madd_epi16(
          _mm256_add_epi16(
              _mm256_maddubs_epi16(
                  ones8, _mm256_load_si256(
                             reinterpret_cast<const __m256i*>(chunk->even))),
              _mm256_maddubs_epi16(
                  ones8, _mm256_load_si256(
                             reinterpret_cast<const __m256i*>(chunk->odd)))),
          ones16);
      _mm256_store_si256(reinterpret_cast<__m256i*>(chunk->offset),
                         _mm256_slli_epi32(sums, 3));
    }
  }
}

namespace {

// int4 weights: two 4-bit codes per byte (element 2i in the low nibble of
// byte i), each 8 above the weight's integer value, as unsigned bytes for
// vpmaddubsw against int8 activations (Int8Chunk), whose offset (8 · Σx
// per lane) takes the bias back off; f16 scales per group of 32 or 64.

// Chunk c's weight scales per lane: group size 64 has one, 32 has two
// (lanes 0-3 and 4-7).
template <int G>
inline __m256 ChunkScales(const uint16_t* row_scales, int64_t c) {
  if (G == 64) return _mm256_set1_ps(_cvtsh_ss(row_scales[c]));
  const __m128 two =
      _mm_cvtph_ps(_mm_cvtsi32_si128(Halves32(row_scales + 2 * c)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two),
                                  _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

// Σ code · x per int32 lane of one chunk (see Int8Chunk): the product
// with the weights' bias of 8 still in.
inline __m256i NibbleBiasedDot(__m256i w, const Int8Chunk& x) {
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m256i lo = _mm256_and_si256(w, mask);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), mask);
  // Pair sums are at most 2 · 15 · 127 per product, so int16 holds two.
  const __m256i pairs = _mm256_add_epi16(
      _mm256_maddubs_epi16(
          lo, _mm256_load_si256(reinterpret_cast<const __m256i*>(x.even))),
      _mm256_maddubs_epi16(
          hi, _mm256_load_si256(reinterpret_cast<const __m256i*>(x.odd))));
  return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
}

// Σ (code - 8) · x per int32 lane of one chunk.
inline __m256i NibbleDot(__m256i w, const Int8Chunk& x) {
  return _mm256_sub_epi32(
      NibbleBiasedDot(w, x),
      _mm256_load_si256(reinterpret_cast<const __m256i*>(x.offset)));
}

// One-row tiles take four chunks at a time, their eight blocks of 32 in
// the order 0, 2, 4, 6, 1, 3, 5, 7: a chunk's first block in the low
// 128-bit lane and its second in the high one, so that one in-lane permute
// (ChunkLaneScales) spreads chunk k's two scales over its lanes, where
// forming them chunk by chunk took a convert, a cross-lane permute and a
// multiply. The weights' bias comes off once per four chunks too: each
// block's scale times the Σ of its lanes' offsets, a correction multiplied
// by the weight scales in one multiply-add.
template <int G>
inline __m256 FourChunkWeightScales(const uint16_t* row_scales, int64_t c) {
  if constexpr (G == 32) {
    const __m128i halves =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(row_scales + 2 * c));
    return _mm256_cvtph_ps(_mm_shuffle_epi8(
        halves,
        _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15)));
  } else {
    const __m128 four = _mm_cvtph_ps(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row_scales + c)));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(four), four, 1);
  }
}
template <int k>
inline __m256 ChunkLaneScales(__m256 four_chunks) {
  return _mm256_permute_ps(four_chunks, k * 0x55);
}

// One activation row's block scales and corrections in the four-chunk
// order (ArrangeFourChunks).
struct FourChunkActivations {
  const float* scales;
  const float* corrections;
};

// Writes the four-chunk scales and corrections of `chunks` chunks (whole
// groups of four) of one activation row.
void ArrangeFourChunks(const Int8Chunk* x, int64_t chunks, float* scales,
                       float* corrections) {
  for (int64_t c = 0; c < chunks / 4 * 4; ++c) {
    for (int half = 0; half < 2; ++half) {
      const float scale = x[c].scale[4 * half];
      int32_t offset = 0;
      for (int lane = 0; lane < 4; ++lane)
        offset += x[c].offset[4 * half + lane];
      const int64_t at = 2 * (c - c % 4) + 4 * half + c % 4;
      scales[at] = scale;
      corrections[at] = scale * static_cast<float>(offset);
    }
  }
}

struct NibbleRows {
  const uint8_t* p;
  int64_t row_bytes;
  const uint16_t* scales;
  int64_t groups;  // scales per row
};

// NibbleTile's prefetches for chunk c of its rows (every other chunk: a
// line holds two).
template <int R, int N, bool kStream, int kAhead>
inline void PrefetchChunk(const WeightPrefetcher& prefetch,
                          const uint8_t* const (&rows)[R], int64_t c) {
  if (c % 2 != 0) return;
  for (int i = 0; i < R; ++i) {
    if (kStream) {
      prefetch.Stream(rows[i] + 32 * c);
    } else if (kAhead > 0) {
      prefetch.TileRow<N>(rows[i] + 32 * c + 64 * kAhead);
    }
  }
}

// y[j * ldy + i * stride] = row r0 + i * stride of w · activation row j,
// i < R, j < N. Against one activation row, a lone row or
// kRowsAreStreams' rows are pieces of sequential streams
// (ForEachStreamGroup), prefetched as WeightPrefetcher::Stream says; other
// tiles prefetch kAhead lines ahead in each of their rows. One-row tiles
// take whole groups of four chunks at a time where kFourChunks; every other
// tile forms each row's sum alike, whatever N is.
template <int G, int R, int N, int kAhead = kPrefetchLines,
          bool kFourChunks = true>
void NibbleTile(const NibbleRows& w, int64_t r0, int64_t stride,
                const Int8Chunk* x, int64_t ldx, FourChunkActivations four,
                float* y, int64_t ldy) {
  constexpr bool kStream = N == 1 && (R == 1 || kAhead == kRowsAreStreams);
  const WeightPrefetcher prefetch(WeightType::kInt4);
  __m256 acc[R][N];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < N; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  const uint8_t* rows[R];
  const uint16_t* scales[R];
  for (int i = 0; i < R; ++i) {
    rows[i] = w.p + (r0 + i * stride) * w.row_bytes;
    scales[i] = w.scales + (r0 + i * stride) * w.groups;
  }
  const int64_t full = w.row_bytes / 32;
  int64_t c = 0;
  if constexpr (N == 1 && kFourChunks) {
    for (; c + 4 <= full; c += 4) {
      PrefetchChunk<R, N, kStream, kAhead>(prefetch, rows, c);
      PrefetchChunk<R, N, kStream, kAhead>(prefetch, rows, c + 2);
      const __m256 x_scales = _mm256_loadu_ps(four.scales + 2 * c);
      const __m256 x_corrections = _mm256_loadu_ps(four.corrections + 2 * c);
      RINGMOE_UNROLL
      for (int i = 0; i < R; ++i) {
        const __m256 ws = FourChunkWeightScales<G>(scales[i], c);
        const __m256 lane_scales = _mm256_mul_ps(ws, x_scales);
        // k's value read from its type: converting the integral_constant
        // would emit its operator into this unit (isa_symbols_test).
        const auto step = [&](auto k) {
          constexpr int kChunk = decltype(k)::value;
          const __m256i wv = _mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(rows[i] + 32 * (c + kChunk)));
          acc[i][0] = _mm256_fmadd_ps(
              _mm256_cvtepi32_ps(NibbleBiasedDot(wv, x[c + kChunk])),
              ChunkLaneScales<kChunk>(lane_scales), acc[i][0]);
        };
        step(std::integral_constant<int, 0>());
        step(std::integral_constant<int, 1>());
        step(std::integral_constant<int, 2>());
        step(std::integral_constant<int, 3>());
        acc[i][0] = _mm256_fnmadd_ps(ws, x_corrections, acc[i][0]);
      }
    }
  }
  for (; c < full; ++c) {
    PrefetchChunk<R, N, kStream, kAhead>(prefetch, rows, c);
    for (int i = 0; i < R; ++i) {
      const __m256i wv = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(rows[i] + 32 * c));
      const __m256 ws = ChunkScales<G>(scales[i], c);
      for (int j = 0; j < N; ++j) {
        const Int8Chunk& xc = x[j * ldx + c];
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(NibbleDot(wv, xc)),
                                    _mm256_mul_ps(ws, _mm256_load_ps(xc.scale)),
                                    acc[i][j]);
      }
    }
  }
  if (w.row_bytes % 32 != 0) {
    // An odd number of 32-groups: the last chunk has only its first half
    // (the activations' second half is zero).
    for (int i = 0; i < R; ++i) {
      const __m256i wv = _mm256_zextsi128_si256(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(rows[i] + 32 * full)));
      const __m256 ws = _mm256_set1_ps(_cvtsh_ss(scales[i][w.groups - 1]));
      for (int j = 0; j < N; ++j) {
        const Int8Chunk& xc = x[j * ldx + full];
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(NibbleDot(wv, xc)),
                                    _mm256_mul_ps(ws, _mm256_load_ps(xc.scale)),
                                    acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < N; ++j) y[j * ldy + i * stride] = HSum(acc[i][j]);
  }
}

// Rows [rb, re) against n activation rows: one row as ForEachOneRowTile's
// streams; more in tiles of four
// weight rows, each against the activation rows three at a time, so the
// weights are read from memory once whatever n is.
template <int G>
void NibbleRowRange(const NibbleRows& w, int64_t rb, int64_t re,
                    const Int8Chunk* x, int64_t n, int64_t ldx,
                    FourChunkActivations four, int64_t ld4, float* y,
                    int64_t ldy, bool alone) {
  if (alone) {
    const int64_t activation_bytes =
        ldx * static_cast<int64_t>(sizeof(Int8Chunk));
    ForEachOneRowTile<kStreamSegments>(
        activation_bytes, rb, re, [&](int64_t r0, int64_t stride, auto rows) {
          NibbleTile<G, decltype(rows)::value, 1, kRowsAreStreams>(
              w, r0, stride, x, ldx, four, y + r0, ldy);
        });
    return;
  }
  // Tiles of three activation rows and two (four left go as two and two),
  // and one row only where it is all of x: all of them form each row's sum
  // alike, so a row's result does not depend on n.
  const auto tile = [&](int64_t r, auto rows) {
    constexpr int R = decltype(rows)::value;
    for (int64_t j = 0; j < n;) {
      const Int8Chunk* xj = x + j * ldx;
      const FourChunkActivations fourj{four.scales + j * ld4,
                                       four.corrections + j * ld4};
      float* yj = y + j * ldy + r;
      const int64_t count = n - j == 4 ? 2 : Min<int64_t>(3, n - j);
      j += count;
      switch (count) {
        case 1:
          NibbleTile<G, R, 1, kPrefetchLines, /*kFourChunks=*/false>(
              w, r, 1, xj, ldx, fourj, yj, ldy);
          break;
        case 2:
          NibbleTile<G, R, 2>(w, r, 1, xj, ldx, fourj, yj, ldy);
          break;
        default:
          NibbleTile<G, R, 3>(w, r, 1, xj, ldx, fourj, yj, ldy);
          break;
      }
    }
  };
  int64_t r = rb;
  for (; r + 4 <= re; r += 4) tile(r, std::integral_constant<int, 4>());
  for (; r < re; ++r) tile(r, std::integral_constant<int, 1>());
}

// Activation rows prepared as Int8Chunks (PrepareDirectActivations)
// against int4 weights.
template <int G>
void NibbleDirectRows(const NibbleRows& w, const DirectActivations& x,
                      int64_t n, int64_t rb, int64_t re, float* y, int64_t ldy,
                      bool alone) {
  const int64_t chunks = (w.row_bytes + 31) / 32;
  // Four-chunk scales exist for one row only (PrepareDirectActivations).
  const int64_t ld4 = n == 1 ? 8 * (chunks / 4) : 0;
  NibbleRowRange<G>(w, rb, re, static_cast<const Int8Chunk*>(x.q), n, chunks,
                    {x.scales, x.scales + ld4}, ld4, y, ldy, alone);
}

// int8 weights against few activation rows: widening every weight to float
// costs three vector µops per 8 weights, so the activations are quantized
// to int16 instead (blocks of 32 columns, scale = max|x| / 32767, round to
// nearest even) and each block's 32 products are summed exactly in integers
// (vpmovsxbw, vpmaddwd), leaving one convert and one float multiply-add per
// 32 weights. int8 activations (as int4 uses) are cheaper still, but their
// 0.4% error flips near-tied greedy tokens (docs/PERFORMANCE.md); int16's
// is 256 times smaller. They are taken only where the caller allows them
// (ActivationPrecision::kInt8: Q8_0 × Q8_0, llama.cpp's precision) and
// against one activation row, as on AVX-512.
struct Int8Rows {
  const int8_t* p;
  int64_t row_bytes;
  const uint16_t* scales;  // f16
  int64_t groups;          // per row
};

// Activation rows quantized for Int8Tile, as int16 or int8 (T): `blocks`
// blocks of 32 per row in column order.
template <typename T>
struct BlockActivations {
  const T* q;          // [n, blocks * 32]
  const float* scale;  // [n, blocks]
  int64_t blocks;
};

// Quantizes one block of 32 activations (`count` <= 32 real ones, the rest
// zero) to T (int16 or int8) in column order into out[32], scale max|x| /
// 32767 or 127, rounded to nearest even; returns the block scale.
template <typename T>
float QuantizeBlockInOrder(const float* x, int64_t count, T* out) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2);
  constexpr float kLargest = sizeof(T) == 2 ? 32767.f : 127.f;
  __m256 v[4];
  const float max_abs = LoadBlock32(x, count, v);
  const __m256 inv = _mm256_set1_ps(max_abs > 0 ? kLargest / max_abs : 0.f);
  __m256i words[2];
  for (int j = 0; j < 2; ++j) {
    // Within each 128-bit lane: four columns of v[2j], then four of
    // v[2j + 1].
    words[j] = _mm256_packs_epi32(
        _mm256_cvtps_epi32(_mm256_mul_ps(v[2 * j], inv)),
        _mm256_cvtps_epi32(_mm256_mul_ps(v[2 * j + 1], inv)));
  }
  if constexpr (sizeof(T) == 2) {
    for (int j = 0; j < 2; ++j) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * j),
                          _mm256_permute4x64_epi64(words[j], 0xd8));
    }
  } else {
    // Its 32-bit lanes hold columns 0-3, 8-11, 16-19, 24-27, 4-7, 12-15,
    // 20-23 and 28-31.
    const __m256i bytes = _mm256_packs_epi16(words[0], words[1]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm256_permutevar8x32_epi32(
                            bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  return max_abs / kLargest;
}

// Quantizes n rows of `cols` activations as QuantizeBlockInOrder<T>:
// q[n, blocks * 32] with the padding of the last block zero, scale[n,
// blocks], blocks = ceil(cols / 32).
template <typename T>
void QuantizeActivationsInOrder(const float* x, int64_t n, int64_t cols, T* q,
                                float* scale) {
  const int64_t blocks = (cols + 31) / 32;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < blocks; ++b) {
      scale[j * blocks + b] = QuantizeBlockInOrder(
          x + j * cols + 32 * b, Min<int64_t>(cols - 32 * b, 32),
          q + (j * blocks + b) * 32);
    }
  }
}

}  // namespace

void QuantizeActivationsInt16(const float* x, int64_t n, int64_t cols,
                              int16_t* q, float* scale) {
  QuantizeActivationsInOrder(x, n, cols, q, scale);
}

void QuantizeActivationsInt8InOrder(const float* x, int64_t n, int64_t cols,
                                    int8_t* q, float* scale) {
  QuantizeActivationsInOrder(x, n, cols, q, scale);
}

namespace {

// Σ w · x over one block of 32 as 8 int32 lanes: at most 4 · 128 · 32767 each.
inline __m256i Int8BlockDot(const int8_t* w, const int16_t* x) {
  const __m256i lo = _mm256_cvtepi8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  const __m256i hi = _mm256_cvtepi8_epi16(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16)));
  return _mm256_add_epi32(
      _mm256_madd_epi16(
          lo, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))),
      _mm256_madd_epi16(
          hi, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16))));
}

// The same against one int8 level: |w| (unsigned; 128 for -128) meets x
// with w's sign, so a pair of products sums to at most 2 · 128 · 127 in
// int16 (x is never -128).
inline __m256i Int8BlockDot(const int8_t* w, const int8_t* x) {
  const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm256_madd_epi16(
      _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv)),
      _mm256_set1_epi16(1));
}

// The f16 weight scales of activation blocks b .. b + 7 (of 32 columns)
// of one row, whose groups of G columns span G / 32 blocks, as floats.
template <int G>
inline __m256 EightBlockScales(const uint16_t* row_scales, int64_t b) {
  static_assert(G == 32 || G == 64);
  if constexpr (G == 32) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(row_scales + b)));
  } else {
    const __m128 four = _mm_cvtph_ps(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row_scales + b / 2)));
    return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(four),
                                    _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
  }
}

// As NibbleTile, for int8 weights against int16 or int8 activations (T):
// weight groups of G columns span G / 32 activation blocks.
template <int G, int R, int N, int kAhead = kPrefetchLines, typename T>
void Int8Tile(const Int8Rows& w, int64_t r0, int64_t stride,
              const BlockActivations<T>& x, float* y, int64_t ldy) {
  constexpr bool kStream = N == 1 && (R == 1 || kAhead == kRowsAreStreams);
  constexpr int kBlocksPerGroup = G / 32;
  const WeightPrefetcher prefetch(WeightType::kInt8);
  __m256 acc[R][N];
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) {
    RINGMOE_UNROLL
    for (int j = 0; j < N; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  const int8_t* rows[R];
  const uint16_t* scales[R];
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) {
    rows[i] = w.p + (r0 + i * stride) * w.row_bytes;
    scales[i] = w.scales + (r0 + i * stride) * w.groups;
  }
  // acc[i][j] += block b of row i · activation row j, times scale(i, j).
  const auto step = [&](int64_t b, const auto& scale) {
    if (kStream && b % 2 == 0) {
      RINGMOE_UNROLL
      for (int i = 0; i < R; ++i) prefetch.Stream(rows[i] + 32 * b);
    }
    if (!kStream && kAhead > 0 && b % 2 == 0) {
      RINGMOE_UNROLL
      for (int i = 0; i < R; ++i) {
        prefetch.TileRow<N>(rows[i] + 32 * b + 64 * kAhead);
      }
    }
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      RINGMOE_UNROLL
      for (int j = 0; j < N; ++j) {
        const __m256i dot =
            Int8BlockDot(rows[i] + 32 * b, x.q + (j * x.blocks + b) * 32);
        acc[i][j] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), scale(i, j), acc[i][j]);
      }
    }
  };
  // Eight blocks' scales (weight scale times activation scale) are formed
  // at once, with one conversion and one multiply per row, and each block
  // broadcasts its own from memory: one scale per block had each block
  // convert, broadcast and multiply on the vector pipes, which the
  // products share. Only against one activation row: with two or three,
  // the scale arrays beside 8-12 accumulators outgrew the registers and
  // lost 7-25%.
  int64_t b = 0;
  for (; N == 1 && b + 8 <= x.blocks; b += 8) {
    alignas(32) float block_scales[R][N][8];
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      const __m256 ws = EightBlockScales<G>(scales[i], b);
      RINGMOE_UNROLL
      for (int j = 0; j < N; ++j) {
        _mm256_store_ps(
            block_scales[i][j],
            _mm256_mul_ps(ws, _mm256_loadu_ps(x.scale + j * x.blocks + b)));
      }
    }
    RINGMOE_UNROLL
    for (int k = 0; k < 8; ++k) {
      step(b + k, [&](int i, int j) {
        return _mm256_broadcast_ss(&block_scales[i][j][k]);
      });
    }
  }
  for (; b < x.blocks; ++b) {
    step(b, [&](int i, int j) {
      return _mm256_mul_ps(
          _mm256_set1_ps(_cvtsh_ss(scales[i][b / kBlocksPerGroup])),
          _mm256_broadcast_ss(x.scale + j * x.blocks + b));
    });
  }
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) {
    RINGMOE_UNROLL
    for (int j = 0; j < N; ++j) y[j * ldy + i * stride] = HSum(acc[i][j]);
  }
}

// As NibbleRowRange, for int8 weights (against int8 activations alone).
template <int G, typename T>
void Int8RowRange(const Int8Rows& w, int64_t rb, int64_t re,
                  const BlockActivations<T>& x, int64_t n, float* y,
                  int64_t ldy, bool alone) {
  if (alone) {
    const int64_t activation_bytes =
        x.blocks * 32 * static_cast<int64_t>(sizeof(T));
    ForEachOneRowTile(activation_bytes, rb, re,
                      [&](int64_t r0, int64_t stride, auto rows) {
                        Int8Tile<G, decltype(rows)::value, 1, kRowsAreStreams>(
                            w, r0, stride, x, y + r0, ldy);
                      });
    return;
  }
  const auto tile = [&](int64_t r, auto rows) {
    constexpr int R = decltype(rows)::value;
    for (int64_t j = 0; j < n; j += 3) {
      const BlockActivations<T> xj{x.q + j * x.blocks * 32,
                                   x.scale + j * x.blocks, x.blocks};
      float* yj = y + j * ldy + r;
      switch (Min<int64_t>(3, n - j)) {
        case 1:
          Int8Tile<G, R, 1>(w, r, 1, xj, yj, ldy);
          break;
        case 2:
          Int8Tile<G, R, 2>(w, r, 1, xj, yj, ldy);
          break;
        default:
          Int8Tile<G, R, 3>(w, r, 1, xj, yj, ldy);
          break;
      }
    }
  };
  int64_t r = rb;
  for (; r + 4 <= re; r += 4) tile(r, std::integral_constant<int, 4>());
  for (; r < re; ++r) tile(r, std::integral_constant<int, 1>());
}

// Activation rows prepared by PrepareDirectActivations against int8
// weights: as int16, or as one int8 level where `one_level` (x's one row
// is then the whole batch).
template <int G>
void Int8DirectRows(const Int8Rows& w, const DirectActivations& x, int64_t n,
                    int64_t cols, int64_t rb, int64_t re, float* y, int64_t ldy,
                    bool alone, bool one_level) {
  const int64_t blocks = (cols + 31) / 32;
  if (one_level) {
    return Int8RowRange<G>(
        w, rb, re,
        BlockActivations<int8_t>{static_cast<const int8_t*>(x.q), x.scales,
                                 blocks},
        1, y, ldy, alone);
  }
  Int8RowRange<G>(w, rb, re,
                  BlockActivations<int16_t>{static_cast<const int16_t*>(x.q),
                                            x.scales, blocks},
                  n, y, ldy, alone);
}

}  // namespace

DirectActivations DirectActivationLayout(const Matrix& w, int64_t n,
                                         bool one_level) {
  DirectActivations x;
  if (w.type == WeightType::kInt4) {
    const int64_t groups = (w.cols + w.group_size - 1) / w.group_size;
    const int64_t chunks = (groups * w.group_size / 2 + 31) / 32;
    x.q_bytes = n * chunks * int64_t{sizeof(Int8Chunk)};
    // Only a row alone is read four chunks at a time (NibbleTile).
    x.scale_count = n == 1 ? 2 * 8 * (chunks / 4) : 0;
  } else {
    // Only blocks holding real columns: with groups of 64 a row may end in
    // a block of padding, whose zero weights need not be read.
    const int64_t blocks = (w.cols + 31) / 32;
    x.q_bytes = n * blocks * 32 * (one_level ? 1 : int64_t{sizeof(int16_t)});
    x.scale_count = n * blocks;
  }
  return x;
}

DirectActivations PrepareDirectActivations(const float* x, int64_t n,
                                           const Matrix& w, bool one_level,
                                           void* q, float* scales) {
  DirectActivations out = DirectActivationLayout(w, n, one_level);
  out.q = q;
  out.scales = scales;
  if (w.type == WeightType::kInt4) {
    const int64_t groups = (w.cols + w.group_size - 1) / w.group_size;
    const int64_t chunks = (groups * w.group_size / 2 + 31) / 32;
    const int64_t ld4 = 8 * (chunks / 4);
    auto* xq = static_cast<Int8Chunk*>(q);
    QuantizeActivationsInt8(x, n, w.cols, chunks, xq);
    if (n == 1) ArrangeFourChunks(xq, chunks, scales, scales + ld4);
  } else if (one_level) {
    QuantizeActivationsInt8InOrder(x, n, w.cols, static_cast<int8_t*>(q),
                                   scales);
  } else {
    QuantizeActivationsInt16(x, n, w.cols, static_cast<int16_t*>(q), scales);
  }
  return out;
}

void MatMulRowsInt8(const DirectActivations& x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y, bool alone,
                    bool one_level) {
  const int64_t cols = w.cols;
  const int64_t groups = (cols + w.group_size - 1) / w.group_size;
  const Int8Rows rows{static_cast<const int8_t*>(w.data), groups * w.group_size,
                      w.scales, groups};
  if (w.group_size == 64) {
    return Int8DirectRows<64>(rows, x, n, cols, row_begin, row_end, y, w.rows,
                              alone, one_level);
  }
  return Int8DirectRows<32>(rows, x, n, cols, row_begin, row_end, y, w.rows,
                            alone, one_level);
}

void MatMulRowsInt4(const DirectActivations& x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y, bool alone) {
  const int64_t groups = (w.cols + w.group_size - 1) / w.group_size;
  const NibbleRows rows{static_cast<const uint8_t*>(w.data),
                        groups * w.group_size / 2, w.scales, groups};
  if (w.group_size == 64) {
    return NibbleDirectRows<64>(rows, x, n, row_begin, row_end, y, w.rows,
                                alone);
  }
  return NibbleDirectRows<32>(rows, x, n, row_begin, row_end, y, w.rows, alone);
}

}  // namespace ringmoe::kernels::avx2

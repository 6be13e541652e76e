// AVX2/FMA/F16C kernels. This translation unit alone is compiled with
// -mavx2 -mfma -mf16c; ops.cc calls into it only when UseAvx2() holds.
// Everything it defines lives in namespace avx2 (see isa.h).
//
// Products are computed as dot products of weight rows with activation rows
// in register tiles of R weight rows × N activation rows. Up to three
// activation rows, weights are widened in registers as they are read
// (decode: bound by memory bandwidth; with one activation row, one weight
// row after another, so the matrix is read as one sequential stream, or four
// at a time when the activations outgrow L1: see DirectRows), except int8
// and int4, whose products run on quantized activations (see Int8Rows and
// Int8Chunk). With more rows, a panel of four weight rows is widened to
// float32 once into a small buffer and reused for every activation row
// (prefill: bound by FMA throughput).
#include <immintrin.h>
#include <math.h>

#include <cstring>

#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx2 {

#include "kernels/cpu/isa_unit-inl.h"

namespace {

inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float HMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline __m256i TailMask(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// e^x for 8 floats, to a few float ulps: x = n·ln2 + r with |r| <= ln2/2,
// e^r by its Taylor series to r^7 (truncation below 1e-8), times 2^n built in
// the exponent bits. x is clamped to [-87.3, 88.3] so 2^n stays a normal
// float: below, the result is flushed to 0 (as std::exp's denormals are
// negligible in the sums it feeds); above, it saturates near FLT_MAX.
inline __m256 Exp(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3f));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // ln2 in two parts, so n·ln2_hi is exact and r keeps its low bits.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);
  __m256 p = _mm256_set1_ps(1.f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.f));
  const __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow,
                          _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

// Weight loaders: Load widens 8 weights at (row, k) when k + 8 <= cols;
// LoadTail the last `count` < 8 of a row, zero-filled.
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
  float Scalar(int64_t r, int64_t k) const {
    const uint32_t bits = static_cast<uint32_t>(p[r * ld + k]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
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
  float Scalar(int64_t r, int64_t k) const { return _cvtsh_ss(p[r * ld + k]); }
};

// float8 e4m3fn weights: the sign, exponent and mantissa bits moved into
// an IEEE half make the fp8 value times 2^-8 exactly (subnormals included;
// NaN codes are not), so F16C widens them and the block scale times 2^8
// restores the value: the same product as fp8 * scale in float32. A block
// spans at least 8 columns, so 8 weights at a multiple of 8 share a scale.
struct Fp8Loader : ScalarTail<Fp8Loader> {
  static constexpr int64_t kPerLine = 64;
  const uint8_t* p;
  int64_t ld;  // cols
  const float* scales;
  int64_t scales_per_row;
  int row_shift;  // log2(block_rows)
  int col_shift;  // log2(block_cols)
  const void* Address(int64_t r, int64_t k) const { return p + r * ld + k; }
  float Scale(int64_t r, int64_t k) const {
    return scales[(r >> row_shift) * scales_per_row + (k >> col_shift)] * 256.f;
  }
  __m256 Load(int64_t r, int64_t k) const {
    const __m128i b = _mm_cvtepu8_epi16(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + r * ld + k)));
    const __m128i h = _mm_or_si128(
        _mm_and_si128(_mm_slli_epi16(b, 7), _mm_set1_epi16(0x3f80)),
        _mm_and_si128(_mm_slli_epi16(b, 8),
                      _mm_set1_epi16(static_cast<int16_t>(0x8000))));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(Scale(r, k)));
  }
  float Scalar(int64_t r, int64_t k) const {
    const uint16_t b = p[r * ld + k];
    const auto h = static_cast<uint16_t>(((b & 0x7f) << 7) | ((b & 0x80) << 8));
    return _cvtsh_ss(h) * Scale(r, k);
  }
};

Fp8Loader MakeFp8Loader(const Matrix& w) {
  return {{},
          static_cast<const uint8_t*>(w.data),
          w.cols,
          w.block_scales,
          (w.cols + w.block_cols - 1) / w.block_cols,
          __builtin_ctz(static_cast<unsigned>(w.block_rows)),
          __builtin_ctz(static_cast<unsigned>(w.block_cols))};
}

// Rows are padded to whole groups, so a tail load stays inside the row and
// the padding (zero bytes) widens to zero.
struct Int8Loader {
  static constexpr int64_t kPerLine = 64;
  const int8_t* p;
  int64_t row_bytes;
  const uint16_t* scales;  // f16
  int64_t groups;          // per row
  int group_shift;         // log2(group_size)
  const void* Address(int64_t r, int64_t k) const {
    return p + r * row_bytes + k;
  }
  __m256 Load(int64_t r, int64_t k) const {
    const __m128i b = _mm_loadl_epi64(
        reinterpret_cast<const __m128i*>(p + r * row_bytes + k));
    const __m256 s =
        _mm256_set1_ps(_cvtsh_ss(scales[r * groups + (k >> group_shift)]));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s);
  }
  __m256 LoadTail(int64_t r, int64_t k, int64_t) const { return Load(r, k); }
};

// Calls fn with the loader of w's type: every type but int4, whose nibbles
// only the integer products read.
template <typename Fn>
void VisitLoader(const Matrix& w, Fn&& fn) {
  const int64_t cols = w.cols;
  switch (w.type) {
    case WeightType::kF32:
      return fn(F32Loader{{}, static_cast<const float*>(w.data), cols});
    case WeightType::kBF16:
      return fn(Bf16Loader{{}, static_cast<const uint16_t*>(w.data), cols});
    case WeightType::kF16:
      return fn(F16Loader{{}, static_cast<const uint16_t*>(w.data), cols});
    case WeightType::kInt8: {
      const int64_t groups = (cols + w.group_size - 1) / w.group_size;
      return fn(Int8Loader{static_cast<const int8_t*>(w.data),
                           groups * w.group_size, w.scales, groups,
                           __builtin_ctz(static_cast<unsigned>(w.group_size))});
    }
    case WeightType::kFp8E4M3:
      return fn(MakeFp8Loader(w));
    case WeightType::kInt4:
      return;
  }
}

// How many cache lines ahead of the loads the weight rows of a tile against
// a few activation rows are prefetched (kLongRowPrefetchLines for one
// activation row; see DirectRows).
constexpr int kPrefetchLines = 8;

// int4 weights against few activation rows: widening nibbles to float
// costs more vector work per byte than memory delivers, so the activations
// are quantized to int8 instead (blocks of 32 columns, scale = max|x| / 127,
// round to nearest even) and 64 weights at a time are multiplied as bytes
// (vpmaddubsw, vpmaddwd), with one float multiply-add per 64, on
// activations laid out as Int8Chunk (isa.h).

// Loads one block of 32 activations (`count` <= 32 real ones, the rest
// zero) into v[4] and returns their largest magnitude.
float LoadBlock32(const float* x, int64_t count, __m256 v[4]) {
  alignas(32) float buf[32];
  if (count < 32) {
    std::memset(buf, 0, sizeof(buf));
    std::memcpy(buf, x, count * sizeof(float));
    x = buf;
  }
  __m256 amax = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.f);
  for (int j = 0; j < 4; ++j) {
    v[j] = _mm256_loadu_ps(x + 8 * j);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[j]));
  }
  return HMax(amax);
}

// Quantizes one block of 32 activations (`count` <= 32 real ones, the rest
// zero) into half `half` of `chunk`.
void QuantizeBlock(const float* x, int64_t count, int half, Int8Chunk* chunk) {
  __m256 v[4];
  const float max_abs = LoadBlock32(x, count, v);
  const __m256 inv = _mm256_set1_ps(max_abs > 0 ? 127.f / max_abs : 0.f);
  __m256i q[4];
  for (int j = 0; j < 4; ++j)
    q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], inv));
  // The packs work within 128-bit lanes; the permute restores column order.
  const __m256i bytes = _mm256_permutevar8x32_epi32(
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                         _mm256_packs_epi32(q[2], q[3])),
      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  // Even columns to the low 8 bytes of each lane, odd to the high 8.
  const __m256i split = _mm256_shuffle_epi8(
      bytes,
      _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0,
                       2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m256i grouped = _mm256_permute4x64_epi64(split, 0xd8);  // 0, 2, 1, 3
  _mm_store_si128(reinterpret_cast<__m128i*>(chunk->even + 16 * half),
                  _mm256_castsi256_si128(grouped));
  _mm_store_si128(reinterpret_cast<__m128i*>(chunk->odd + 16 * half),
                  _mm256_extracti128_si256(grouped, 1));
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

// Σ (nibble - 8) · x per int32 lane of one chunk (see Int8Chunk).
inline __m256i Int4ChunkDot(__m256i w, const Int8Chunk& x) {
  const __m256i mask = _mm256_set1_epi8(0x0f);
  const __m256i lo = _mm256_and_si256(w, mask);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), mask);
  // Pair sums are at most 2 · 15 · 127 per product, so int16 holds two.
  const __m256i pairs = _mm256_add_epi16(
      _mm256_maddubs_epi16(
          lo, _mm256_load_si256(reinterpret_cast<const __m256i*>(x.even))),
      _mm256_maddubs_epi16(
          hi, _mm256_load_si256(reinterpret_cast<const __m256i*>(x.odd))));
  return _mm256_sub_epi32(
      _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)),
      _mm256_load_si256(reinterpret_cast<const __m256i*>(x.offset)));
}

struct Int4Rows {
  const uint8_t* p;
  int64_t row_bytes;
  const uint16_t* scales;  // f16
  int64_t groups;          // per row
};

// Weight scales of chunk c of a row, per lane: group size 64 has one, 32
// has two (lanes 0-3 and 4-7).
template <int G>
inline __m256 Int4ChunkScale(const uint16_t* row_scales, int64_t c) {
  if (G == 64) return _mm256_set1_ps(_cvtsh_ss(row_scales[c]));
  const __m128 two =
      _mm_cvtph_ps(_mm_cvtsi32_si128(Halves32(row_scales + 2 * c)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(two),
                                  _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
}

// y[j * ldy + i] = row r0 + i of w · activation row j, i < R, j < N; x holds
// `ldx` chunks per activation row. One row against one activation row is a
// piece of a single sequential stream (see StreamRows); other tiles
// prefetch kAhead lines ahead in each of their rows.
template <int G, int R, int N, int kAhead = kPrefetchLines>
void Int4Tile(const Int4Rows& w, int64_t r0, const Int8Chunk* x, int64_t ldx,
              float* y, int64_t ldy) {
  constexpr bool kStream = R == 1 && N == 1;
  __m256 acc[R][N];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < N; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  const uint8_t* rows[R];
  const uint16_t* scales[R];
  for (int i = 0; i < R; ++i) {
    rows[i] = w.p + (r0 + i) * w.row_bytes;
    scales[i] = w.scales + (r0 + i) * w.groups;
  }
  const int64_t full = w.row_bytes / 32;
  for (int64_t c = 0; c < full; ++c) {
    if (kStream && c % 2 == 0) PrefetchStream(rows[0] + 32 * c);
    if (!kStream && kAhead > 0 && c % 2 == 0) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(
            reinterpret_cast<const char*>(rows[i] + 32 * c + 64 * kAhead),
            _MM_HINT_T0);
      }
    }
    for (int i = 0; i < R; ++i) {
      const __m256i wv = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(rows[i] + 32 * c));
      const __m256 ws = Int4ChunkScale<G>(scales[i], c);
      for (int j = 0; j < N; ++j) {
        const Int8Chunk& xc = x[j * ldx + c];
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Int4ChunkDot(wv, xc)),
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
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Int4ChunkDot(wv, xc)),
                                    _mm256_mul_ps(ws, _mm256_load_ps(xc.scale)),
                                    acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < N; ++j) y[j * ldy + i] = HSum(acc[i][j]);
  }
}

// Rows [rb, re) against n activation rows: one row as Int4Tile's single
// stream (or tiles of four, see ForEachRowTile); more in tiles of four
// weight rows, each against the activation rows three at a time, so the
// weights are read from memory once whatever n is.
template <int G>
void Int4RowRange(const Int4Rows& w, int64_t rb, int64_t re, const Int8Chunk* x,
                  int64_t n, int64_t ldx, float* y, int64_t ldy) {
  if (n == 1) {
    ForEachRowTile(ldx * static_cast<int64_t>(sizeof(Int8Chunk)), rb, re,
                   [&](int64_t r0, auto rows) {
                     constexpr int R = decltype(rows)::value;
                     Int4Tile<G, R, 1, kLongRowPrefetchLines>(w, r0, x, ldx,
                                                              y + r0, ldy);
                   });
    return;
  }
  const auto tile = [&](int64_t r, auto rows) {
    constexpr int R = decltype(rows)::value;
    for (int64_t j = 0; j < n; j += 3) {
      const Int8Chunk* xj = x + j * ldx;
      float* yj = y + j * ldy + r;
      switch (Min<int64_t>(3, n - j)) {
        case 1:
          Int4Tile<G, R, 1>(w, r, xj, ldx, yj, ldy);
          break;
        case 2:
          Int4Tile<G, R, 2>(w, r, xj, ldx, yj, ldy);
          break;
        default:
          Int4Tile<G, R, 3>(w, r, xj, ldx, yj, ldy);
          break;
      }
    }
  };
  int64_t r = rb;
  for (; r + 4 <= re; r += 4) tile(r, std::integral_constant<int, 4>());
  for (; r < re; ++r) tile(r, std::integral_constant<int, 1>());
}

// Activation rows against int4 weights, through Int8Chunk.
template <int G>
void Int4DirectRows(const Int4Rows& w, const float* x, int64_t n, int64_t cols,
                    int64_t rb, int64_t re, float* y, int64_t ldy) {
  const int64_t chunks = (w.row_bytes + 31) / 32;
  Int8Chunk* xq = Scratch<Int8Chunk>(ScratchSlot::kActivationsInt8, n * chunks);
  QuantizeActivationsInt8(x, n, cols, chunks, xq);
  Int4RowRange<G>(w, rb, re, xq, n, chunks, y, ldy);
}

// int8 weights against few activation rows: widening every weight to float
// costs three vector µops per 8 weights, so the activations are quantized
// to int16 instead (blocks of 32 columns, scale = max|x| / 32767, round to
// nearest even) and each block's 32 products are summed exactly in integers
// (vpmovsxbw, vpmaddwd), leaving one convert and one float multiply-add per
// 32 weights. int8 activations (as int4 uses) would be cheaper still, but
// their 0.4% error flips near-tied greedy tokens (docs/PERFORMANCE.md);
// int16's is 256 times smaller.
struct Int8Rows {
  const int8_t* p;
  int64_t row_bytes;
  const uint16_t* scales;  // f16
  int64_t groups;          // per row
};

// Activation rows quantized for Int8Tile: `blocks` blocks of 32 per row.
struct Int16Activations {
  const int16_t* q;    // [n, blocks * 32]
  const float* scale;  // [n, blocks]
  int64_t blocks;
};

// Quantizes one block of 32 activations (`count` <= 32 real ones, the rest
// zero) to int16 in column order into out[32]; returns the block scale.
float QuantizeBlock16(const float* x, int64_t count, int16_t* out) {
  __m256 v[4];
  const float max_abs = LoadBlock32(x, count, v);
  const __m256 inv = _mm256_set1_ps(max_abs > 0 ? 32767.f / max_abs : 0.f);
  for (int j = 0; j < 4; j += 2) {
    // vpackssdw interleaves 128-bit lanes; the permute restores the order.
    const __m256i packed =
        _mm256_packs_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[j], inv)),
                           _mm256_cvtps_epi32(_mm256_mul_ps(v[j + 1], inv)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 8 * j),
                        _mm256_permute4x64_epi64(packed, 0xd8));
  }
  return max_abs / 32767.f;
}

}  // namespace

void QuantizeActivationsInt16(const float* x, int64_t n, int64_t cols,
                              int16_t* q, float* scale) {
  const int64_t blocks = (cols + 31) / 32;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < blocks; ++b) {
      scale[j * blocks + b] = QuantizeBlock16(x + j * cols + 32 * b,
                                              Min<int64_t>(cols - 32 * b, 32),
                                              q + (j * blocks + b) * 32);
    }
  }
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

// y[j * ldy + i] = row r0 + i of w · activation row j, i < R, j < N.
// Weight groups of G columns span G / 32 activation blocks. Prefetches as
// Int4Tile does.
template <int G, int R, int N, int kAhead = kPrefetchLines>
void Int8Tile(const Int8Rows& w, int64_t r0, const Int16Activations& x,
              float* y, int64_t ldy) {
  constexpr bool kStream = R == 1 && N == 1;
  constexpr int kBlocksPerGroup = G / 32;
  __m256 acc[R][N];
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < N; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  const int8_t* rows[R];
  const uint16_t* scales[R];
  for (int i = 0; i < R; ++i) {
    rows[i] = w.p + (r0 + i) * w.row_bytes;
    scales[i] = w.scales + (r0 + i) * w.groups;
  }
  for (int64_t b = 0; b < x.blocks; ++b) {
    if (kStream && b % 2 == 0) PrefetchStream(rows[0] + 32 * b);
    if (!kStream && kAhead > 0 && b % 2 == 0) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(
            reinterpret_cast<const char*>(rows[i] + 32 * b + 64 * kAhead),
            _MM_HINT_T0);
      }
    }
    __m256 xs[N];
    for (int j = 0; j < N; ++j)
      xs[j] = _mm256_broadcast_ss(x.scale + j * x.blocks + b);
    for (int i = 0; i < R; ++i) {
      const __m256 ws =
          _mm256_set1_ps(_cvtsh_ss(scales[i][b / kBlocksPerGroup]));
      for (int j = 0; j < N; ++j) {
        const __m256i dot =
            Int8BlockDot(rows[i] + 32 * b, x.q + (j * x.blocks + b) * 32);
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                    _mm256_mul_ps(ws, xs[j]), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < N; ++j) y[j * ldy + i] = HSum(acc[i][j]);
  }
}

// As Int4RowRange, for int8 weights.
template <int G>
void Int8RowRange(const Int8Rows& w, int64_t rb, int64_t re,
                  const Int16Activations& x, int64_t n, float* y, int64_t ldy) {
  if (n == 1) {
    ForEachRowTile(x.blocks * 32 * static_cast<int64_t>(sizeof(int16_t)), rb,
                   re, [&](int64_t r0, auto rows) {
                     constexpr int R = decltype(rows)::value;
                     Int8Tile<G, R, 1, kLongRowPrefetchLines>(w, r0, x, y + r0,
                                                              ldy);
                   });
    return;
  }
  const auto tile = [&](int64_t r, auto rows) {
    constexpr int R = decltype(rows)::value;
    for (int64_t j = 0; j < n; j += 3) {
      const Int16Activations xj{x.q + j * x.blocks * 32, x.scale + j * x.blocks,
                                x.blocks};
      float* yj = y + j * ldy + r;
      switch (Min<int64_t>(3, n - j)) {
        case 1:
          Int8Tile<G, R, 1>(w, r, xj, yj, ldy);
          break;
        case 2:
          Int8Tile<G, R, 2>(w, r, xj, yj, ldy);
          break;
        default:
          Int8Tile<G, R, 3>(w, r, xj, yj, ldy);
          break;
      }
    }
  };
  int64_t r = rb;
  for (; r + 4 <= re; r += 4) tile(r, std::integral_constant<int, 4>());
  for (; r < re; ++r) tile(r, std::integral_constant<int, 1>());
}

// Activation rows against int8 weights, through QuantizeBlock16.
template <int G>
void Int8DirectRows(const Int8Rows& w, const float* x, int64_t n, int64_t cols,
                    int64_t rb, int64_t re, float* y, int64_t ldy) {
  // Only blocks holding real columns: with groups of 64 a row may end in a
  // block of padding, whose zero weights need not be read.
  const int64_t blocks = (cols + 31) / 32;
  int16_t* q =
      Scratch<int16_t>(ScratchSlot::kActivationsInt16, n * blocks * 32);
  float* scale = Scratch<float>(ScratchSlot::kActivationScales, n * blocks);
  QuantizeActivationsInt16(x, n, cols, q, scale);
  Int8RowRange<G>(w, rb, re, Int16Activations{q, scale, blocks}, n, y, ldy);
}

// y[j * ldy + i] = dot(w row r0 + i, x row j) for i < R, j < N; weights are
// prefetched kAhead lines ahead (the memory-bound direct path) or not (0).
template <int R, int N, int kAhead, typename L>
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
    if (kAhead > 0 && k % L::kPerLine == 0) {
      for (int i = 0; i < R; ++i) {
        _mm_prefetch(static_cast<const char*>(
                         w.Address(r0 + i, k + kAhead * L::kPerLine)),
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
    for (int j = 0; j < N; ++j) y[j * ldy + i] = HSum(acc[i][j]);
  }
}

// Rows [rb, re) of w against one activation row, one row after another.
// Consecutive rows are adjacent in memory, so this reads the matrix as a
// single sequential stream, prefetched kStreamPrefetchBytes ahead;
// interleaving the rows of a tile (8 streams a row apart) ran about 15%
// slower end to end. Four accumulators keep the FMA latency off the
// critical path.
template <typename L>
void StreamRows(const L& w, int64_t rb, int64_t re, const float* x,
                int64_t cols, float* y) {
  for (int64_t r = rb; r < re; ++r) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t k = 0;
    for (; k + 32 <= cols; k += 32) {
      for (int64_t line = 0; line < 32; line += L::kPerLine)
        PrefetchStream(w.Address(r, k + line));
      for (int j = 0; j < 4; ++j) {
        acc[j] = _mm256_fmadd_ps(w.Load(r, k + 8 * j),
                                 _mm256_loadu_ps(x + k + 8 * j), acc[j]);
      }
    }
    for (; k + 8 <= cols; k += 8) {
      acc[0] = _mm256_fmadd_ps(w.Load(r, k), _mm256_loadu_ps(x + k), acc[0]);
    }
    if (k < cols) {
      acc[1] = _mm256_fmadd_ps(w.LoadTail(r, k, cols - k),
                               _mm256_maskload_ps(x + k, TailMask(cols - k)),
                               acc[1]);
    }
    y[r] = HSum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
                              _mm256_add_ps(acc[2], acc[3])));
  }
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

// n <= 3: weights widened in registers straight from memory. One
// activation row against rows longer than StreamActivationBytes() would
// fetch it from L2 for every weight row, twice the weights' bytes (half the
// speed at 14336 columns): tiles of four rows fetch it once per four, and
// prefetch far ahead for their four streams.
template <typename L>
void DirectRows(const L& w, const float* x, int64_t n, int64_t cols, int64_t rb,
                int64_t re, float* y, int64_t ldy) {
  if (n == 1) {
    ForEachRowTile(cols * 4, rb, re, [&](int64_t r0, auto rows) {
      if constexpr (decltype(rows)::value == 1) {
        StreamRows(w, r0, r0 + 1, x, cols, y);
      } else {
        Tile<4, 1, kLongRowPrefetchLines>(w, r0, x, cols, cols, y + r0, ldy);
      }
    });
    return;
  }
  for (int64_t r = rb; r < re; r += 4)
    TileAnyN<kPrefetchLines>(w, r, Min<int64_t>(4, re - r), x, n, cols, y + r,
                             ldy);
}

// n > 3 (prefill): products as sums of outer products, blocked as BLIS
// blocks a GEMM but with the operands' roles chosen so the weights need no
// transposing pack. Per block of kc columns the activation rows are packed
// once, in groups of 16 (8 for a short last group), column-major within a
// group ([k][16]); per block of up to mc weight rows the weights are
// widened to float32 (dequantized; f32 weights are read in place). A tile
// of 6 weight rows × 16 activation rows then takes, per column, two
// activation vectors and six broadcast weights into twelve FMAs (12 × 8
// with one vector). kc keeps a packed group in half of L1 while the
// weight rows stream past it from the widened block, which mc keeps in
// half of L2; both come from the sizes the C library reports.
constexpr int64_t kActGroup = 16;

struct PackedBlocking {
  int64_t kc;  // columns per block
  int64_t mc;  // weight rows per widened block
};

PackedBlocking PackedBlockingFor(int64_t cols) {
  const int64_t kc = Clamp<int64_t>(
      L1DataCacheBytes() / 2 / (kActGroup * 4) / 8 * 8, 64, 1024);
  const int64_t mc =
      Max<int64_t>(L2CacheBytes() / 2 / (Min(kc, cols) * 4) / 12 * 12, 12);
  return {kc, mc};
}

// Transposes the 8 × 8 floats of r: lane j of r[i] becomes lane i of r[j].
inline void Transpose8x8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// sums[v][i] = Σ_k w[i * ldw + k] · xp[(k * V + v) * 8 ...+ 8] for i < R:
// R weight rows against one packed group of 8V activation rows over
// kc >= 1 columns. Kept apart from what consumes the sums, and written as
// a do-while, because otherwise GCC 12 keeps a memory copy of the
// accumulators and stores them on every iteration.
template <int R, int V>
__attribute__((noinline)) void OuterSums(const float* w, int64_t ldw,
                                         const float* xp, int64_t kc,
                                         __m256 (&sums)[V][8]) {
  __m256 acc[V][R];
  for (int v = 0; v < V; ++v) {
    for (int i = 0; i < R; ++i) acc[v][i] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  do {
    __m256 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm256_load_ps(xp + (k * V + v) * 8);
    for (int i = 0; i < R; ++i) {
      const __m256 wv = _mm256_broadcast_ss(w + i * ldw + k);
      for (int v = 0; v < V; ++v)
        acc[v][i] = _mm256_fmadd_ps(wv, xv[v], acc[v][i]);
    }
  } while (++k < kc);
  for (int v = 0; v < V; ++v) {
    for (int i = 0; i < 8; ++i)
      sums[v][i] = i < R ? acc[v][i] : _mm256_setzero_ps();
  }
}

// y[j * ldy + i] (= or +=) the sums of OuterSums for i < rows (<= R <= 8)
// and j < acts (<= 8V). The tile is transposed so that each activation
// row's results are one 8-float store: a plain one, with zeros past `rows`,
// where `room` >= 8 floats of the row belong to this call's caller
// (masked stores are several times slower on AMD's cores), else masked.
template <int R, int V>
void OuterTile(const float* w, int64_t ldw, const float* xp, int64_t kc,
               int64_t rows, int64_t acts, bool accumulate, float* y,
               int64_t ldy, int64_t room) {
  __m256 sums[V][8];
  OuterSums<R, V>(w, ldw, xp, kc, sums);
  const bool plain = room >= 8;
  const __m256i mask = TailMask(Min<int64_t>(rows, 8));
  for (int v = 0; v < V; ++v) {
    Transpose8x8(sums[v]);
    for (int64_t j = 0; j < 8 && 8 * v + j < acts; ++j) {
      float* yj = y + (8 * v + j) * ldy;
      __m256 out = sums[v][j];
      if (plain) {
        if (accumulate) out = _mm256_add_ps(out, _mm256_loadu_ps(yj));
        _mm256_storeu_ps(yj, out);
      } else {
        if (accumulate) out = _mm256_add_ps(out, _mm256_maskload_ps(yj, mask));
        _mm256_maskstore_ps(yj, mask, out);
      }
    }
  }
}

// Rows [0, rows) of a widened block against one packed group, in tiles of
// R rows (one shorter tile for the remainder); `room` floats from y on
// each activation row are the caller's.
template <int V>
void OuterRows(const float* w, int64_t ldw, int64_t rows, const float* xp,
               int64_t kc, int64_t acts, bool accumulate, float* y, int64_t ldy,
               int64_t room) {
  constexpr int R = V == 2 ? 6 : 8;
  int64_t r = 0;
  for (; r + R <= rows; r += R) {
    OuterTile<R, V>(w + r * ldw, ldw, xp, kc, R, acts, accumulate, y + r, ldy,
                    room - r);
  }
  if (r < rows) {
    OuterTile<R - 1, V>(w + r * ldw, ldw, xp, kc, rows - r, acts, accumulate,
                        y + r, ldy, room - r);
  }
}

// Packs columns [k0, k0 + kc) of the n activation rows for OuterSums:
// group g (rows 16g.., the last one a group of 8 if at most 8 rows
// remain) at xp + 16g · ldk, column-major ([k][width]), zero beyond row n;
// ldk >= kc rounded up to 8.
void PackActivations(const float* x, int64_t n, int64_t cols, int64_t k0,
                     int64_t kc, int64_t ldk, float* xp) {
  for (int64_t j0 = 0; j0 < n; j0 += kActGroup) {
    const int64_t width = n - j0 > 8 ? 16 : 8;
    float* dst = xp + j0 * ldk;
    for (int64_t h = 0; h < width; h += 8) {
      for (int64_t k = 0; k < kc; k += 8) {
        const __m256i mask = TailMask(Min<int64_t>(kc - k, 8));
        __m256 r[8];
        for (int l = 0; l < 8; ++l) {
          const int64_t j = j0 + h + l;
          r[l] = j < n ? _mm256_maskload_ps(x + j * cols + k0 + k, mask)
                       : _mm256_setzero_ps();
        }
        Transpose8x8(r);
        for (int l = 0; l < 8; ++l)
          _mm256_storeu_ps(dst + (k + l) * width + h, r[l]);
      }
    }
  }
}

template <typename L>
void PackedRows(const L& w, bool is_f32, const float* x, int64_t n,
                int64_t cols, int64_t rb, int64_t re, float* y, int64_t ldy) {
  const PackedBlocking b = PackedBlockingFor(cols);
  const int64_t groups = (n + kActGroup - 1) / kActGroup;
  float* xp =
      Scratch<float>(ScratchSlot::kActivationPanel, groups * kActGroup * b.kc);
  float* wb =
      is_f32 ? nullptr : Scratch<float>(ScratchSlot::kWeightPanel, b.mc * b.kc);
  for (int64_t k0 = 0; k0 < cols; k0 += b.kc) {
    const int64_t kc = Min(b.kc, cols - k0);
    PackActivations(x, n, cols, k0, kc, b.kc, xp);
    for (int64_t m0 = rb; m0 < re; m0 += b.mc) {
      const int64_t rows = Min(b.mc, re - m0);
      const float* wp;
      int64_t ldw;
      if (is_f32) {
        wp = static_cast<const float*>(w.Address(m0, k0));
        ldw = cols;
      } else {
        for (int64_t i = 0; i < rows; ++i) {
          float* dst = wb + i * b.kc;
          int64_t k = 0;
          for (; k + 8 <= kc; k += 8)
            _mm256_storeu_ps(dst + k, w.Load(m0 + i, k0 + k));
          if (k < kc)
            _mm256_storeu_ps(dst + k, w.LoadTail(m0 + i, k0 + k, kc - k));
        }
        wp = wb;
        ldw = b.kc;
      }
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t j0 = g * kActGroup;
        const int64_t acts = Min(kActGroup, n - j0);
        float* yg = y + j0 * ldy + m0;
        if (acts > 8) {
          OuterRows<2>(wp, ldw, rows, xp + j0 * b.kc, kc, acts, k0 > 0, yg, ldy,
                       re - m0);
        } else {
          OuterRows<1>(wp, ldw, rows, xp + j0 * b.kc, kc, acts, k0 > 0, yg, ldy,
                       re - m0);
        }
      }
    }
  }
}

// scores[h * ld + j] = scale · (query head h · keys[j]) for the H query
// heads at q (head_dim apart) and keys j in [lo, hi): each key row is
// loaded once for all H heads.
template <int H>
inline void HeadScores(const float* q, int64_t head_dim,
                       const float* const* keys, int64_t lo, int64_t hi,
                       float scale, float* scores, int64_t ld) {
  const int64_t full = head_dim / 8 * 8;
  const __m256i tail = TailMask(head_dim - full);
  for (int64_t j = lo; j < hi; ++j) {
    __m256 dot[H];
    for (int h = 0; h < H; ++h) dot[h] = _mm256_setzero_ps();
    for (int64_t d = 0; d < head_dim; d += 8) {
      const bool last = d == full;
      const __m256 kv = last ? _mm256_maskload_ps(keys[j] + d, tail)
                             : _mm256_loadu_ps(keys[j] + d);
      for (int h = 0; h < H; ++h) {
        const float* qh = q + h * head_dim + d;
        dot[h] = _mm256_fmadd_ps(
            last ? _mm256_maskload_ps(qh, tail) : _mm256_loadu_ps(qh), kv,
            dot[h]);
      }
    }
    for (int h = 0; h < H; ++h) scores[h * ld + j] = HSum(dot[h]) * scale;
  }
}

// Decode attention: the `H` (<= 4) query heads starting at `q` that share
// one kv head, over `count` positions whose key and value rows (this kv
// head's part) are `keys[i]` and `values[i]`. Each key and value row is read
// once for all H heads instead of once per head. `scores` holds H rows of
// `ld` >= count floats.
template <int H>
void AttendHeads(const float* q, int64_t head_dim, const float* const* keys,
                 const float* const* values, int64_t count, float scale,
                 float* scores, int64_t ld, float* out, float* log_sum_exp) {
  const int64_t full = head_dim / 8 * 8;
  const __m256i tail = TailMask(head_dim - full);
  HeadScores<H>(q, head_dim, keys, 0, count, scale, scores, ld);
  // Softmax per head; the padding to a whole vector is -inf, whose
  // exponential is 0.
  for (int h = 0; h < H; ++h) {
    float* s = scores + h * ld;
    for (int64_t i = count; i < ld; ++i) s[i] = -INFINITY;
    __m256 max = _mm256_set1_ps(-INFINITY);
    for (int64_t i = 0; i < ld; i += 8)
      max = _mm256_max_ps(max, _mm256_loadu_ps(s + i));
    const float m = HMax(max);
    const __m256 mv = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t i = 0; i < ld; i += 8) {
      const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
      sum = _mm256_add_ps(sum, e);
      _mm256_storeu_ps(s + i, e);
    }
    const float total = HSum(sum);
    const __m256 inv = _mm256_set1_ps(1.f / total);
    for (int64_t i = 0; i < ld; i += 8)
      _mm256_storeu_ps(s + i, _mm256_mul_ps(_mm256_loadu_ps(s + i), inv));
    log_sum_exp[h] = m + logf(total);
  }
  for (int64_t d = 0; d < head_dim; d += 8) {
    const __m256i mask = d == full ? tail : _mm256_set1_epi32(-1);
    __m256 acc[H];
    for (int h = 0; h < H; ++h) acc[h] = _mm256_setzero_ps();
    for (int64_t i = 0; i < count; ++i) {
      const __m256 vv = _mm256_maskload_ps(values[i] + d, mask);
      for (int h = 0; h < H; ++h) {
        acc[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(scores + h * ld + i), vv,
                                 acc[h]);
      }
    }
    for (int h = 0; h < H; ++h)
      _mm256_maskstore_ps(out + h * head_dim + d, mask, acc[h]);
  }
}

// y[i * ldy + k] += Σ_r c[i * ldc + r - rb] · w(r, k): each token's outputs
// accumulate in registers, 32 columns at a time, over the rows.
template <typename L>
void AccumulateRowsWith(const L& w, int64_t cols, const float* c, int64_t ldc,
                        int64_t n, int64_t rb, int64_t re, float* y,
                        int64_t ldy) {
  for (int64_t i = 0; i < n; ++i) {
    float* yi = y + i * ldy;
    const float* ci = c + i * ldc - rb;
    int64_t k = 0;
    for (; k + 32 <= cols; k += 32) {
      __m256 acc[4];
      for (int j = 0; j < 4; ++j) acc[j] = _mm256_loadu_ps(yi + k + 8 * j);
      for (int64_t r = rb; r < re; ++r) {
        const __m256 s = _mm256_set1_ps(ci[r]);
        for (int j = 0; j < 4; ++j)
          acc[j] = _mm256_fmadd_ps(s, w.Load(r, k + 8 * j), acc[j]);
      }
      for (int j = 0; j < 4; ++j) _mm256_storeu_ps(yi + k + 8 * j, acc[j]);
    }
    for (; k + 8 <= cols; k += 8) {
      __m256 acc = _mm256_loadu_ps(yi + k);
      for (int64_t r = rb; r < re; ++r)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(ci[r]), w.Load(r, k), acc);
      _mm256_storeu_ps(yi + k, acc);
    }
    if (k < cols) {
      const __m256i mask = TailMask(cols - k);
      __m256 acc = _mm256_maskload_ps(yi + k, mask);
      for (int64_t r = rb; r < re; ++r) {
        acc = _mm256_fmadd_ps(_mm256_set1_ps(ci[r]), w.LoadTail(r, k, cols - k),
                              acc);
      }
      _mm256_maskstore_ps(yi + k, mask, acc);
    }
  }
}

}  // namespace

void AccumulateRows(const float* c, int64_t ldc, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y, int64_t ldy) {
  VisitLoader(w, [&](const auto& loader) {
    AccumulateRowsWith(loader, w.cols, c, ldc, n, row_begin, row_end, y, ldy);
  });
}

void MatMulRowsDirect(const float* x, int64_t n, const Matrix& w,
                      int64_t row_begin, int64_t row_end, float* y) {
  const int64_t cols = w.cols;
  switch (w.type) {
    case WeightType::kF32:
      return DirectRows(F32Loader{{}, static_cast<const float*>(w.data), cols},
                        x, n, cols, row_begin, row_end, y, w.rows);
    case WeightType::kBF16:
      return DirectRows(
          Bf16Loader{{}, static_cast<const uint16_t*>(w.data), cols}, x, n,
          cols, row_begin, row_end, y, w.rows);
    case WeightType::kF16:
      return DirectRows(
          F16Loader{{}, static_cast<const uint16_t*>(w.data), cols}, x, n, cols,
          row_begin, row_end, y, w.rows);
    case WeightType::kInt8: {
      const int64_t groups = (cols + w.group_size - 1) / w.group_size;
      const Int8Rows rows{static_cast<const int8_t*>(w.data),
                          groups * w.group_size, w.scales, groups};
      if (w.group_size == 64) {
        return Int8DirectRows<64>(rows, x, n, cols, row_begin, row_end, y,
                                  w.rows);
      }
      return Int8DirectRows<32>(rows, x, n, cols, row_begin, row_end, y,
                                w.rows);
    }
    case WeightType::kInt4: {
      const int64_t groups = (cols + w.group_size - 1) / w.group_size;
      const Int4Rows rows{static_cast<const uint8_t*>(w.data),
                          groups * w.group_size / 2, w.scales, groups};
      if (w.group_size == 64) {
        return Int4DirectRows<64>(rows, x, n, cols, row_begin, row_end, y,
                                  w.rows);
      }
      return Int4DirectRows<32>(rows, x, n, cols, row_begin, row_end, y,
                                w.rows);
    }
    case WeightType::kFp8E4M3:
      return DirectRows(MakeFp8Loader(w), x, n, cols, row_begin, row_end, y,
                        w.rows);
  }
}

void MatMulRowsBlocked(const float* x, int64_t n, const Matrix& w,
                       int64_t row_begin, int64_t row_end, float* y) {
  // int4's integer products beat the blocked float ones at every count.
  if (w.type == WeightType::kInt4) {
    return MatMulRowsDirect(x, n, w, row_begin, row_end, y);
  }
  VisitLoader(w, [&](const auto& loader) {
    PackedRows(loader, w.type == WeightType::kF32, x, n, w.cols, row_begin,
               row_end, y, w.rows);
  });
}

float Dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 =
        _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8),
                           _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i < n; i += 8) {
    const __m256i mask = TailMask(Min<int64_t>(8, n - i));
    acc0 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, mask),
                           _mm256_maskload_ps(b + i, mask), acc0);
  }
  return HSum(_mm256_add_ps(acc0, acc1));
}

void Axpy(float alpha, const float* x, int64_t n, float* y) {
  const __m256 a = _mm256_set1_ps(alpha);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(a, _mm256_loadu_ps(x + i),
                                            _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += alpha * x[i];
}

float Sum(const float* data, int64_t n, int64_t prefetch_bytes) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (prefetch_bytes > 0) {
      PrefetchStream(data + i, prefetch_bytes);
      PrefetchStream(data + i + 16, prefetch_bytes);
    }
    for (int j = 0; j < 4; ++j)
      acc[j] = _mm256_add_ps(acc[j], _mm256_loadu_ps(data + i + 8 * j));
  }
  float tail = 0.f;
  for (; i < n; ++i) tail += data[i];
  return HSum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]),
                            _mm256_add_ps(acc[2], acc[3]))) +
         tail;
}

float FmaLoop(int64_t iterations) {
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

void AttendPartial(const float* q, int64_t num_heads, int64_t num_kv_heads,
                   int64_t head_dim, const float* const* k_blocks,
                   const float* const* v_blocks, int64_t block_size,
                   int64_t first_position, int64_t end_position, float scale,
                   float* out, float* log_sum_exp) {
  const int64_t group = num_heads / num_kv_heads;
  const int64_t row_width = num_kv_heads * head_dim;
  const int64_t count = end_position - first_position;
  const int64_t ld = (count + 7) / 8 * 8;
  const float** keys =
      Scratch<const float*>(ScratchSlot::kAttentionKeys, count);
  const float** values =
      Scratch<const float*>(ScratchSlot::kAttentionValues, count);
  float* scores = Scratch<float>(ScratchSlot::kAttentionScores, 4 * ld);
  for (int64_t g = 0; g < num_kv_heads; ++g) {
    for (int64_t i = 0; i < count; ++i) {
      const int64_t p = first_position + i;
      const int64_t offset = (p % block_size) * row_width + g * head_dim;
      keys[i] = k_blocks[p / block_size] + offset;
      values[i] = v_blocks[p / block_size] + offset;
    }
    for (int64_t h = g * group; h < (g + 1) * group; h += 4) {
      const float* qh = q + h * head_dim;
      float* oh = out + h * head_dim;
      switch (Min<int64_t>(4, (g + 1) * group - h)) {
        case 1:
          AttendHeads<1>(qh, head_dim, keys, values, count, scale, scores, ld,
                         oh, log_sum_exp + h);
          break;
        case 2:
          AttendHeads<2>(qh, head_dim, keys, values, count, scale, scores, ld,
                         oh, log_sum_exp + h);
          break;
        case 3:
          AttendHeads<3>(qh, head_dim, keys, values, count, scale, scores, ld,
                         oh, log_sum_exp + h);
          break;
        default:
          AttendHeads<4>(qh, head_dim, keys, values, count, scale, scores, ld,
                         oh, log_sum_exp + h);
          break;
      }
    }
  }
}

namespace {

// Keys per step of AttendBlock's online softmax.
constexpr int64_t kKeyBlock = 32;

// The running state of H query heads (of one token, sharing a kv head) in
// AttendBlock: output accumulators [H][ldo], maxima and softmax
// denominators, updated with keys [lo, hi) of a block (flash attention's
// online softmax). Each key and value row is loaded once for all H heads.
template <int H>
void AttendKeyBlock(const float* q, int64_t head_dim, const float* const* keys,
                    const float* const* values, int64_t lo, int64_t hi,
                    float scale, float* scores, float* acc, int64_t ldo,
                    float* row_max, float* row_sum) {
  const int64_t full = head_dim / 8 * 8;
  const __m256i tail = TailMask(head_dim - full);
  HeadScores<H>(q, head_dim, keys, lo, hi, scale, scores, kKeyBlock);
  float correction[H];
  for (int h = 0; h < H; ++h) {
    float* s = scores + h * kKeyBlock;
    float block_max = -INFINITY;
    for (int64_t j = lo; j < hi; ++j) block_max = Max(block_max, s[j]);
    const float new_max = Max(row_max[h], block_max);
    // exp(-inf) = 0 clears the empty initial state.
    correction[h] = expf(row_max[h] - new_max);
    row_max[h] = new_max;
    const __m256 max_v = _mm256_set1_ps(new_max);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = lo; j < hi; j += 8) {
      const __m256i mask = TailMask(Min<int64_t>(8, hi - j));
      const __m256 e = _mm256_and_ps(
          Exp(_mm256_sub_ps(_mm256_maskload_ps(s + j, mask), max_v)),
          _mm256_castsi256_ps(mask));
      _mm256_maskstore_ps(s + j, mask, e);
      sum = _mm256_add_ps(sum, e);
    }
    row_sum[h] = row_sum[h] * correction[h] + HSum(sum);
  }
  for (int64_t d = 0; d < head_dim; d += 8) {
    const bool last = d == full;
    __m256 a[H];
    for (int h = 0; h < H; ++h) {
      a[h] = _mm256_mul_ps(_mm256_loadu_ps(acc + h * ldo + d),
                           _mm256_set1_ps(correction[h]));
    }
    for (int64_t j = lo; j < hi; ++j) {
      const __m256 vv = last ? _mm256_maskload_ps(values[j] + d, tail)
                             : _mm256_loadu_ps(values[j] + d);
      for (int h = 0; h < H; ++h) {
        a[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(scores + h * kKeyBlock + j),
                               vv, a[h]);
      }
    }
    for (int h = 0; h < H; ++h) _mm256_storeu_ps(acc + h * ldo + d, a[h]);
  }
}

}  // namespace

void AttendBlock(const float* q, int64_t count, int64_t num_heads,
                 int64_t num_kv_heads, int64_t head_dim,
                 const float* const* k_blocks, const float* const* v_blocks,
                 int64_t block_size, int64_t first_query, int64_t window,
                 float scale, float* out) {
  const int64_t group = num_heads / num_kv_heads;
  const int64_t row_width = num_kv_heads * head_dim;
  const int64_t q_width = num_heads * head_dim;
  const int64_t ldo = (head_dim + 7) / 8 * 8;
  // One row per (query token, head of the group): running output, maximum
  // and softmax denominator, and the scores of the current block of keys.
  const int64_t rows = count * group;
  float* acc = Scratch<float>(ScratchSlot::kAttentionOutput, rows * ldo);
  float* row_max = Scratch<float>(ScratchSlot::kAttentionMax, rows);
  float* row_sum = Scratch<float>(ScratchSlot::kAttentionSum, rows);
  float* scores =
      Scratch<float>(ScratchSlot::kAttentionScores, rows * kKeyBlock);
  const auto first_key = [&](int64_t i) {
    return window > 0 ? Max<int64_t>(0, first_query + i + 1 - window) : 0;
  };
  const float* keys[kKeyBlock];
  const float* values[kKeyBlock];
  for (int64_t g = 0; g < num_kv_heads; ++g) {
    for (int64_t r = 0; r < rows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
    std::memset(acc, 0, rows * ldo * sizeof(float));
    const int64_t end = first_query + count;
    for (int64_t k0 = first_key(0); k0 < end; k0 += kKeyBlock) {
      const int64_t nk = Min(kKeyBlock, end - k0);
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t p = k0 + j;
        const int64_t offset = (p % block_size) * row_width + g * head_dim;
        keys[j] = k_blocks[p / block_size] + offset;
        values[j] = v_blocks[p / block_size] + offset;
      }
      for (int64_t i = 0; i < count; ++i) {
        // Query i sees keys [first_key(i), first_query + i]: the part of
        // this block inside that range.
        const int64_t lo = Max<int64_t>(0, first_key(i) - k0);
        const int64_t hi = Min<int64_t>(nk, first_query + i + 1 - k0);
        if (lo >= hi) continue;
        for (int64_t h = 0; h < group; h += 4) {
          const int64_t r = i * group + h;
          const float* qr = q + i * q_width + (g * group + h) * head_dim;
          float* sr = scores + r * kKeyBlock;
          float* ar = acc + r * ldo;
          switch (Min<int64_t>(4, group - h)) {
            case 1:
              AttendKeyBlock<1>(qr, head_dim, keys, values, lo, hi, scale, sr,
                                ar, ldo, &row_max[r], &row_sum[r]);
              break;
            case 2:
              AttendKeyBlock<2>(qr, head_dim, keys, values, lo, hi, scale, sr,
                                ar, ldo, &row_max[r], &row_sum[r]);
              break;
            case 3:
              AttendKeyBlock<3>(qr, head_dim, keys, values, lo, hi, scale, sr,
                                ar, ldo, &row_max[r], &row_sum[r]);
              break;
            default:
              AttendKeyBlock<4>(qr, head_dim, keys, values, lo, hi, scale, sr,
                                ar, ldo, &row_max[r], &row_sum[r]);
              break;
          }
        }
      }
    }
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t h = 0; h < group; ++h) {
        const int64_t r = i * group + h;
        const float inv = 1.f / row_sum[r];
        float* o = out + i * q_width + (g * group + h) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) o[d] = acc[r * ldo + d] * inv;
      }
    }
  }
}

void ScaleMul(const float* x, float scale, const float* w, int64_t n,
              float* y) {
  const __m256 s = _mm256_set1_ps(scale);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i mask = TailMask(Min<int64_t>(8, n - i));
    _mm256_maskstore_ps(
        y + i, mask,
        _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, mask), s),
                      _mm256_maskload_ps(w + i, mask)));
  }
}

void Softmax(float* x, int64_t n) {
  __m256 max = _mm256_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 8) {
    const int64_t m = Min<int64_t>(8, n - i);
    // Lanes past the end read as -inf, which changes no maximum.
    const __m256 v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY),
                                      _mm256_maskload_ps(x + i, TailMask(m)),
                                      _mm256_castsi256_ps(TailMask(m)));
    max = _mm256_max_ps(max, v);
  }
  const __m256 mv = _mm256_set1_ps(HMax(max));
  __m256 sum = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i mask = TailMask(Min<int64_t>(8, n - i));
    const __m256 e =
        _mm256_and_ps(Exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), mv)),
                      _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(x + i, mask, e);
    sum = _mm256_add_ps(sum, e);
  }
  const __m256 inv = _mm256_set1_ps(1.f / HSum(sum));
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i mask = TailMask(Min<int64_t>(8, n - i));
    _mm256_maskstore_ps(x + i, mask,
                        _mm256_mul_ps(_mm256_maskload_ps(x + i, mask), inv));
  }
}

void RotaryHalf(float* x, int64_t num_heads, int64_t head_dim, const float* cos,
                const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < num_heads; ++h) {
    float* lo = x + h * head_dim;
    float* hi = lo + half;
    for (int64_t j = 0; j < half; j += 8) {
      const __m256i mask = TailMask(Min<int64_t>(8, half - j));
      const __m256 a = _mm256_maskload_ps(lo + j, mask);
      const __m256 b = _mm256_maskload_ps(hi + j, mask);
      const __m256 c = _mm256_maskload_ps(cos + j, mask);
      const __m256 s = _mm256_maskload_ps(sin + j, mask);
      _mm256_maskstore_ps(lo + j, mask,
                          _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
      _mm256_maskstore_ps(hi + j, mask,
                          _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
    }
  }
}

void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.f);
  const __m256 sign = _mm256_set1_ps(-0.f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i mask = TailMask(Min<int64_t>(8, n - i));
    const __m256 g = _mm256_maskload_ps(gate + i, mask);
    // sigmoid(g) from e = exp(-|g|) <= 1, which cannot overflow: 1 / (1 + e)
    // for g >= 0, e / (1 + e) below.
    const __m256 e = Exp(_mm256_or_ps(g, sign));
    const __m256 sigmoid =
        _mm256_div_ps(_mm256_blendv_ps(one, e, g), _mm256_add_ps(one, e));
    _mm256_maskstore_ps(out + i, mask,
                        _mm256_mul_ps(_mm256_mul_ps(g, sigmoid),
                                      _mm256_maskload_ps(up + i, mask)));
  }
}

}  // namespace ringmoe::kernels::avx2

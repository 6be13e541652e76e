// Products of bf16 weights against activations rounded to bf16, on CPUs
// with AVX512-BF16 (vdpbf16ps: 16 lanes, each adding the products of one
// pair of bf16 to a float32 sum, twice the multiply-adds of a float FMA per
// instruction). This translation unit alone is compiled with -mavx512bf16;
// ops.cc calls into it only when UseAvx512Bf16() holds and the caller asked
// for bf16 activations (ActivationPrecision::kBf16).
//
// One activation row (decode) meets 32 weights per vdpbf16ps as rows
// stream (OneRowTile), and so do up to kStreamActsMax rows, each weight
// vector once for all of them (FewRowTile: batched decode's experts).
// Products of more activation rows, up to kGroupRowsMax, broadcast the
// weights against vectors of 8 activation rows (GroupRows). More rows:
// sums of outer products (prefill), blocked as
// avx2_blocked.cc blocks its float ones: per block of kc columns and mc
// weight rows, the weights are packed into panels of 32 rows, column pairs
// outermost ([kc / 2][32 rows][2]: one column pair of 32 rows is two
// vectors), and a tile of up to 12 activation rows broadcasts each row's
// column pair (one 32-bit word of the rounded activations, read in place)
// against both vectors: 24 vdpbf16ps per 2 loads and 12 broadcasts, the 24
// accumulators added to y as rows of 16 floats. kc keeps a panel in half
// of L1 beside a tile's activations (12 rows of kc); mc keeps the packed
// block in half of L2.
// Everything it defines lives in namespace avx512bf16 (see isa.h).
#include <immintrin.h>

#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx512bf16 {

#include "kernels/cpu/isa_unit-inl.h"

namespace {

constexpr int kPanelRows = 32;
constexpr int kTileActs = 12;

struct PanelBlocking {
  int64_t kc;  // columns per block (even)
  int64_t mc;  // weight rows per packed block (a multiple of kPanelRows)
};

PanelBlocking PanelBlockingFor(int64_t cols) {
  const int64_t kc = Clamp<int64_t>(
      L1DataCacheBytes() / 2 / (kPanelRows * 2) / 32 * 32, 64, 1024);
  const int64_t mc = Max<int64_t>(
      L2CacheBytes() / 2 / (Min(kc, cols + 1) * 2) / kPanelRows * kPanelRows,
      kPanelRows);
  return {kc, mc};
}

// Transposes the 16 × 16 32-bit words of r: word j of r[i] becomes word i
// of r[j].
inline void Transpose16x16(__m512i r[16]) {
  __m512i a[16], b[16];
  for (int i = 0; i < 16; i += 2) {
    a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // Per 128-bit lane L of b[4g + m]: word m + 4L of rows 4g..4g + 3.
  for (int g = 0; g < 16; g += 4) {
    b[g] = _mm512_unpacklo_epi64(a[g], a[g + 2]);
    b[g + 1] = _mm512_unpackhi_epi64(a[g], a[g + 2]);
    b[g + 2] = _mm512_unpacklo_epi64(a[g + 1], a[g + 3]);
    b[g + 3] = _mm512_unpackhi_epi64(a[g + 1], a[g + 3]);
  }
  for (int m = 0; m < 4; ++m) {
    const __m512i even01 =
        _mm512_shuffle_i32x4(b[m], b[4 + m], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i odd01 =
        _mm512_shuffle_i32x4(b[m], b[4 + m], _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i even23 =
        _mm512_shuffle_i32x4(b[8 + m], b[12 + m], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i odd23 =
        _mm512_shuffle_i32x4(b[8 + m], b[12 + m], _MM_SHUFFLE(3, 1, 3, 1));
    r[m] = _mm512_shuffle_i32x4(even01, even23, _MM_SHUFFLE(2, 0, 2, 0));
    r[m + 8] = _mm512_shuffle_i32x4(even01, even23, _MM_SHUFFLE(3, 1, 3, 1));
    r[m + 4] = _mm512_shuffle_i32x4(odd01, odd23, _MM_SHUFFLE(2, 0, 2, 0));
    r[m + 12] = _mm512_shuffle_i32x4(odd01, odd23, _MM_SHUFFLE(3, 1, 3, 1));
  }
}

// Packs columns [k0, k0 + kc) of weight rows [0, rows) (rows <= mc, `cols`
// bf16 apart) into panels of 32 rows at `packed`, each pairs · 32 words:
// word (i, r) of a panel holds columns k0 + 2i and k0 + 2i + 1 of its row
// r, zero past `rows` and past column k0 + kc. 16 rows by 16 column pairs
// at a time: sixteen loads, one transpose, sixteen stores.
void PackPanels(const uint16_t* w, int64_t cols, int64_t rows, int64_t k0,
                int64_t kc, uint32_t* packed) {
  const int64_t pairs = (kc + 1) / 2;
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  for (int64_t p = 0; p < panels; ++p) {
    uint32_t* panel = packed + p * pairs * kPanelRows;
    for (int64_t h = 0; h < kPanelRows; h += 16) {
      const int64_t row0 = p * kPanelRows + h;
      for (int64_t i0 = 0; i0 < pairs; i0 += 16) {
        const int64_t left = kc - 2 * i0;
        const __mmask32 columns =
            left >= 32 ? ~__mmask32{0} : _cvtu32_mask32((1u << left) - 1);
        __m512i r[16];
        for (int i = 0; i < 16; ++i) {
          r[i] = row0 + i < rows
                     ? _mm512_maskz_loadu_epi16(
                           columns, w + (row0 + i) * cols + k0 + 2 * i0)
                     : _mm512_setzero_si512();
        }
        Transpose16x16(r);
        for (int64_t i = 0; i < 16 && i0 + i < pairs; ++i)
          _mm512_storeu_si512(panel + (i0 + i) * kPanelRows + h, r[i]);
      }
    }
  }
}

// y[j * ldy + r] (= or +=) Σ over the panel's column pairs of the products
// of weight row r and activation row j, for r < rows (<= 32) and j < J.
// Activation rows are `ldx` bf16 apart, read from column pair 0 on.
template <int J>
__attribute__((noinline)) void PanelTile(const uint32_t* panel, int64_t pairs,
                                         const uint16_t* x, int64_t ldx,
                                         float* y, int64_t ldy, int64_t rows,
                                         bool accumulate) {
  __m512 acc[J][2];
  for (int j = 0; j < J; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_ps();
  int64_t i = 0;
  do {
    const __m512bh w0 =
        reinterpret_cast<__m512bh>(_mm512_loadu_si512(panel + i * kPanelRows));
    const __m512bh w1 = reinterpret_cast<__m512bh>(
        _mm512_loadu_si512(panel + i * kPanelRows + 16));
    for (int j = 0; j < J; ++j) {
      int32_t word;
      __builtin_memcpy(&word, x + j * ldx + 2 * i, sizeof(word));
      const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(word));
      acc[j][0] = _mm512_dpbf16_ps(acc[j][0], w0, a);
      acc[j][1] = _mm512_dpbf16_ps(acc[j][1], w1, a);
    }
  } while (++i < pairs);
  const __mmask16 lanes[2] = {
      rows >= 16 ? __mmask16{0xffff} : _cvtu32_mask16((1u << rows) - 1),
      rows >= 32  ? __mmask16{0xffff}
      : rows > 16 ? _cvtu32_mask16((1u << (rows - 16)) - 1)
                  : __mmask16{0}};
  for (int j = 0; j < J; ++j) {
    for (int v = 0; v < 2; ++v) {
      float* out = y + j * ldy + 16 * v;
      __m512 sum = acc[j][v];
      if (accumulate)
        sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(lanes[v], out));
      _mm512_mask_storeu_ps(out, lanes[v], sum);
    }
  }
}

using PanelTileFn = void (*)(const uint32_t*, int64_t, const uint16_t*, int64_t,
                             float*, int64_t, int64_t, bool);
// kPanelTiles[J - 1] = PanelTile<J>.
constexpr PanelTileFn kPanelTiles[kTileActs] = {
    PanelTile<1>, PanelTile<2>,  PanelTile<3>,  PanelTile<4>,
    PanelTile<5>, PanelTile<6>,  PanelTile<7>,  PanelTile<8>,
    PanelTile<9>, PanelTile<10>, PanelTile<11>, PanelTile<12>};

// Up to kGroupRowsMax activation rows: lanes along the activation rows
// instead, so the weights need no packing. Each group of 8 activation rows
// is interleaved by column pair ([cols / 2][8 rows], 32-bit words), and
// each weight row's column pair, broadcast from the matrix as stored,
// meets one vector of them: per column pair, R broadcasts, one load and R
// 8-lane vdpbf16ps for R weight rows (tiles of 8), read once from memory.
constexpr int kGroupActs = 8;
// Up to this many activation rows the group kernel was faster than the
// panels (docs/PERFORMANCE.md), the weights' tiles of 8 rows staying in L2
// between groups.
constexpr int64_t kGroupRowsMax = 32;

// Interleaves activation rows [0, n) (n <= 8, rows ldx apart) by column
// pair: word (i, j) = row j's columns 2i and 2i + 1, zero for j >= n.
void InterleaveActs(const uint16_t* x, int64_t ldx, int64_t n, int64_t pairs,
                    uint32_t* out) {
  for (int64_t i = 0; i < pairs; ++i) {
    for (int64_t j = 0; j < kGroupActs; ++j) {
      uint32_t word = 0;
      if (j < n) __builtin_memcpy(&word, x + j * ldx + 2 * i, sizeof(word));
      out[i * kGroupActs + j] = word;
    }
  }
}

// y[j * ldy + r] = Σ_i pair products of weight row r and activation row j,
// for r < 8 (tile rows) and j < acts.
template <int R>
void GroupTile(const uint16_t* w, int64_t cols, const uint32_t* xi,
               int64_t pairs, int64_t acts, float* y, int64_t ldy) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; 2 * i + 1 < cols; ++i) {
    if (i % 32 == 0) {
      for (int r = 0; r < R; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(w + r * cols + 2 * i) +
                         64 * kLongRowPrefetchLines,
                     _MM_HINT_T0);
      }
    }
    const __m256bh xv = reinterpret_cast<__m256bh>(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xi + i * 8)));
    for (int r = 0; r < R; ++r) {
      int32_t word;
      __builtin_memcpy(&word, w + r * cols + 2 * i, sizeof(word));
      acc[r] = _mm256_dpbf16_ps(
          acc[r], reinterpret_cast<__m256bh>(_mm256_set1_epi32(word)), xv);
    }
  }
  if (i < pairs) {  // an odd last column: its pair's second weight is zero
    const __m256bh xv = reinterpret_cast<__m256bh>(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xi + i * 8)));
    for (int r = 0; r < R; ++r) {
      acc[r] = _mm256_dpbf16_ps(
          acc[r],
          reinterpret_cast<__m256bh>(_mm256_set1_epi32(w[r * cols + 2 * i])),
          xv);
    }
  }
  alignas(32) float t[8][8];
  for (int r = 0; r < R; ++r) _mm256_store_ps(t[r], acc[r]);
  for (int64_t j = 0; j < acts; ++j) {
    for (int r = 0; r < R; ++r) y[j * ldy + r] = t[r][j];
  }
}

void GroupRows(const uint16_t* xb, int64_t ldx, int64_t n, const Matrix& w,
               int64_t row_begin, int64_t row_end, float* y) {
  const uint16_t* weights = static_cast<const uint16_t*>(w.data);
  const int64_t cols = w.cols, ldy = w.rows, pairs = (cols + 1) / 2;
  const int64_t groups = (n + kGroupActs - 1) / kGroupActs;
  uint32_t* xi = Scratch<uint32_t>(ScratchSlot::kActivationPanel,
                                   groups * pairs * kGroupActs);
  for (int64_t g = 0; g < groups; ++g) {
    InterleaveActs(xb + g * kGroupActs * ldx, ldx,
                   Min<int64_t>(kGroupActs, n - g * kGroupActs), pairs,
                   xi + g * pairs * kGroupActs);
  }
  // Each tile's weight rows come from memory for the first group and from
  // the caches for the others.
  const auto tile_rows = [&](int64_t r, auto rows) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t j = g * kGroupActs;
      GroupTile<decltype(rows)::value>(
          weights + r * cols, cols, xi + g * pairs * kGroupActs, pairs,
          Min<int64_t>(kGroupActs, n - j), y + j * ldy + r, ldy);
    }
  };
  int64_t r = row_begin;
  for (; r + 8 <= row_end; r += 8)
    tile_rows(r, std::integral_constant<int, 8>());
  for (; r < row_end; ++r) tile_rows(r, std::integral_constant<int, 1>());
}

// The most activation rows FewRowTile takes: its R x N accumulators (and
// an activation vector per row) must fit the 32 vector registers.
constexpr int64_t kStreamActsMax = 7;

// Rows r0 + i * stride (i < R) of bf16 weights against the N activation
// rows at xb (ldx apart, rounded to bf16, zero past cols to a multiple of
// 32): y[a * ldy + r] = the sum of weight row r and activation row a. Each
// 64 weight bytes are loaded once for the N rows, one vdpbf16ps each. One
// accumulator per (weight row, activation row), so each sum is formed
// alike whatever R and N.
template <int R, int N>
void FewRowTile(const uint16_t* w, int64_t cols, const uint16_t* xb,
                int64_t ldx, int64_t r0, int64_t stride, float* y,
                int64_t ldy) {
  const uint16_t* row = w + r0 * cols;
  const int64_t row_step = stride * cols;
  const WeightPrefetcher prefetch(WeightType::kBF16);
  __m512 acc[R][N];
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) {
    RINGMOE_UNROLL
    for (int a = 0; a < N; ++a) acc[i][a] = _mm512_setzero_ps();
  }
  // 32 columns at a time; the last chunk's missing weight words load as
  // zero (the activations are zero there).
  for (int64_t k = 0; k < cols; k += 32) {
    const __mmask32 words =
        _cvtu32_mask32(cols - k >= 32 ? ~0u : (1u << (cols - k)) - 1);
    PrefetchStreams<R>(prefetch, row + k, 2 * row_step, 0);
    __m512bh x[N];
    RINGMOE_UNROLL
    for (int a = 0; a < N; ++a) {
      x[a] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + a * ldx + k));
    }
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      const __m512bh wv = reinterpret_cast<__m512bh>(
          _mm512_maskz_loadu_epi16(words, row + i * row_step + k));
      RINGMOE_UNROLL
      for (int a = 0; a < N; ++a)
        acc[i][a] = _mm512_dpbf16_ps(acc[i][a], wv, x[a]);
    }
  }
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) {
    RINGMOE_UNROLL
    for (int a = 0; a < N; ++a) {
      y[a * ldy + r0 + i * stride] = _mm512_reduce_add_ps(acc[i][a]);
    }
  }
}

// Rows r0 + i * stride (i < R) of bf16 weights against one activation row
// rounded to bf16 (xb, zero past cols to a multiple of 32): y[r] = the
// row's sum. 64 weight bytes meet 32 activations in one vdpbf16ps, where
// the float32 kernels widen them first; the bf16 activations take half the
// L1 of float ones beside the streams (ForEachOneRowTile). Two
// accumulators per row, each row's sum formed alike whatever R.
template <int R>
void OneRowTile(const uint16_t* w, int64_t cols, const uint16_t* xb, int64_t r0,
                int64_t stride, float* y) {
  const uint16_t* row = w + r0 * cols;
  const int64_t row_step = stride * cols;
  const WeightPrefetcher prefetch(WeightType::kBF16);
  __m512 acc[R][2];
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 64 <= cols; k += 64) {
    PrefetchStreams<R>(prefetch, row + k, 2 * row_step, 0);
    PrefetchStreams<R>(prefetch, row + k, 2 * row_step, 64);
    const __m512bh x0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + k));
    const __m512bh x1 =
        reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + k + 32));
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      const uint16_t* wi = row + i * row_step + k;
      acc[i][0] = _mm512_dpbf16_ps(
          acc[i][0], reinterpret_cast<__m512bh>(_mm512_loadu_si512(wi)), x0);
      acc[i][1] = _mm512_dpbf16_ps(
          acc[i][1], reinterpret_cast<__m512bh>(_mm512_loadu_si512(wi + 32)),
          x1);
    }
  }
  // The last columns, 32 at a time: the weights' missing words load as zero
  // (and the activations are zero there).
  for (; k < cols; k += 32) {
    const __mmask32 words =
        _cvtu32_mask32(cols - k >= 32 ? ~0u : (1u << (cols - k)) - 1);
    const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + k));
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      acc[i][0] =
          _mm512_dpbf16_ps(acc[i][0],
                           reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(
                               words, row + i * row_step + k)),
                           xv);
    }
  }
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) {
    y[r0 + i * stride] =
        _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
  }
}

// The first `count` of 16 lanes (none for count <= 0, all from 16).
inline __mmask16 FirstLanes(int64_t count) {
  return count >= 16  ? __mmask16{0xffff}
         : count <= 0 ? __mmask16{0}
                      : _cvtu32_mask16((1u << count) - 1);
}

// numeric.h's F32ToBf16 on 16 lanes: round to nearest even by adding 0x7fff
// plus the kept part's lowest bit; NaN keeps its high half with the quiet
// bit set.
inline __m256i RoundLanesToBf16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(
      _mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
      _mm512_set1_epi32(0x7f800000));
  const __m512i rounded = _mm512_add_epi32(
      bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff),
                             _mm512_and_si512(_mm512_srli_epi32(bits, 16),
                                              _mm512_set1_epi32(1))));
  const __m512i result =
      _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x400000));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(result, 16));
}

// fp8 e4m3 weights against one activation row rounded to bf16 (decode under
// ActivationPrecision::kBf16 where the CPU also has AVX512-VBMI). Every fp8
// value times 2^-64 is a normal bf16, subnormals included (vdpbf16ps would
// read a subnormal input as zero), so 64 weight bytes become 64 exact bf16
// by two 128-entry byte lookups of their magnitude (vpermi2b: the bf16's
// high byte, the sign ORed in, and its low byte) and two byte interleaves,
// and meet the activations in two vdpbf16ps: seven vector µops per 64
// weights where the float32 product (avx512::Fp8Tile) takes thirteen. The
// activations carry the 2^64 with their block scales
// (avx2::ScaleFp8Activations: kFp8ActivationUnit), so the sums need no
// scaling. The interleaves give the first vector columns 16 L + 0..7 of each
// 128-bit lane L and the second 16 L + 8..15, the order
// LayOutFp8Activations puts the activations in.
constexpr int kFp8Chunk = 64;
static_assert(kFp8ActivationUnit == 0x1p64f, "the tables carry 2^-64");

// The bf16 bits of the fp8 e4m3 magnitude `code` (< 128) times 2^-64; code
// 127 (NaN) a quiet NaN.
constexpr uint16_t Fp8MagnitudeBf16(int code) {
  const int e = code >> 3, m = code & 7;
  if (code == 0x7f) return 0x7fc0;
  if (e > 0) return static_cast<uint16_t>(((e - 7 - 64 + 127) << 7) | (m << 4));
  if (m == 0) return 0;
  // m * 2^-9 = 2^p * (1 + f) with p the highest set bit of m.
  const int p = m >= 4 ? 2 : m >= 2 ? 1 : 0;
  return static_cast<uint16_t>(((p - 9 - 64 + 127) << 7) |
                               ((m << (7 - p)) & 0x7f));
}
struct Fp8Bf16Tables {
  alignas(64) uint8_t high[128];
  alignas(64) uint8_t low[128];
  constexpr Fp8Bf16Tables() : high(), low() {
    for (int c = 0; c < 128; ++c) {
      high[c] = static_cast<uint8_t>(Fp8MagnitudeBf16(c) >> 8);
      low[c] = static_cast<uint8_t>(Fp8MagnitudeBf16(c) & 0xff);
    }
  }
};
constexpr Fp8Bf16Tables kFp8Bf16Tables;

// The `cols` scaled activations of one row block as bf16 in the order
// Fp8Bf16Tile reads them, each 64 columns (the last padded with zeros) as two
// vectors.
void LayOutFp8Activations(const float* scaled, int64_t cols, uint16_t* xb) {
  for (int64_t k = 0; k < cols; k += kFp8Chunk) {
    __m256i v[4];
    for (int t = 0; t < 4; ++t) {
      v[t] = RoundLanesToBf16(_mm512_maskz_loadu_ps(
          FirstLanes(cols - k - 16 * t), scaled + k + 16 * t));
    }
    // Columns 0-31 and 32-63; 128-bit lane L of each holds 8 L..8 L + 7.
    const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(v[0]), v[1], 1);
    const __m512i b = _mm512_inserti64x4(_mm512_castsi256_si512(v[2]), v[3], 1);
    _mm512_storeu_si512(xb + k,
                        _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
    _mm512_storeu_si512(xb + k + 32,
                        _mm512_shuffle_i32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
  }
}

// Rows r0 + i * stride (i < R) of fp8 weights against activations laid out
// by LayOutFp8Activations: y[r] = the row's sum. Two accumulators per row,
// each row's sum formed alike whatever R.
template <int R>
__attribute__((target("avx512vbmi"))) void Fp8Bf16Tile(
    const uint8_t* w, int64_t cols, const uint16_t* xb, int64_t r0,
    int64_t stride, float* y) {
  const uint8_t* row = w + r0 * cols;
  const int64_t row_step = stride * cols;
  const __m512i high0 = _mm512_load_si512(kFp8Bf16Tables.high);
  const __m512i high1 = _mm512_load_si512(kFp8Bf16Tables.high + 64);
  const __m512i low0 = _mm512_load_si512(kFp8Bf16Tables.low);
  const __m512i low1 = _mm512_load_si512(kFp8Bf16Tables.low + 64);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const WeightPrefetcher prefetch(WeightType::kFp8E4M3);
  __m512 acc[R][2];
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < cols; k += kFp8Chunk) {
    // The last chunk's missing bytes load as zero: code 0 is +0.
    const __mmask64 bytes =
        k + kFp8Chunk <= cols
            ? ~__mmask64{0}
            : _cvtu64_mask64(~uint64_t{0} >> (kFp8Chunk - (cols - k)));
    PrefetchStreams<R>(prefetch, row + k, row_step, 0);
    const __m512bh x0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + k));
    const __m512bh x1 =
        reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + k + 32));
    RINGMOE_UNROLL
    for (int i = 0; i < R; ++i) {
      const __m512i b = _mm512_maskz_loadu_epi8(bytes, row + i * row_step + k);
      // high | (b & sign): 0xf8 is A | (B & C) for vpternlogd.
      const __m512i high = _mm512_ternarylogic_epi32(
          _mm512_permutex2var_epi8(high0, b, high1), b, sign, 0xf8);
      const __m512i low = _mm512_permutex2var_epi8(low0, b, low1);
      acc[i][0] = _mm512_dpbf16_ps(
          acc[i][0],
          reinterpret_cast<__m512bh>(_mm512_unpacklo_epi8(low, high)), x0);
      acc[i][1] = _mm512_dpbf16_ps(
          acc[i][1],
          reinterpret_cast<__m512bh>(_mm512_unpackhi_epi8(low, high)), x1);
    }
  }
  RINGMOE_UNROLL
  for (int i = 0; i < R; ++i) {
    y[r0 + i * stride] =
        _mm512_reduce_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]));
  }
}

}  // namespace

void RoundToBf16(const float* x, int64_t n, int64_t cols, int64_t ldx,
                 uint16_t* xb) {
  for (int64_t i = 0; i < n; ++i) {
    const float* row = x + i * cols;
    uint16_t* out = xb + i * ldx;
    for (int64_t k = 0; k < ldx; k += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + k),
                          RoundLanesToBf16(_mm512_maskz_loadu_ps(
                              FirstLanes(cols - k), row + k)));
    }
  }
}

void MatMulRows(const uint16_t* xb, int64_t ldx, int64_t n, const Matrix& w,
                int64_t row_begin, int64_t row_end, float* y,
                int64_t batch_rows) {
  const uint16_t* weights = static_cast<const uint16_t*>(w.data);
  if (batch_rows == 1) {
    return ForEachOneRowTile(
        ldx * int64_t{sizeof(uint16_t)}, row_begin, row_end,
        [&](int64_t r, int64_t stride, auto rows) {
          OneRowTile<decltype(rows)::value>(weights, w.cols, xb, r, stride, y);
        });
  }
  if (batch_rows <= kStreamActsMax) {
    return WithCount<kStreamActsMax>(n, [&](auto acts) {
      ForEachStreamGroup(
          row_begin, row_end, [&](int64_t r, int64_t stride, auto rows) {
            FewRowTile<decltype(rows)::value, decltype(acts)::value>(
                weights, w.cols, xb, ldx, r, stride, y, w.rows);
          });
    });
  }
  if (batch_rows <= kGroupRowsMax) {
    return GroupRows(xb, ldx, n, w, row_begin, row_end, y);
  }
  const int64_t cols = w.cols, ldy = w.rows;
  const PanelBlocking b = PanelBlockingFor(cols);
  uint32_t* packed =
      Scratch<uint32_t>(ScratchSlot::kWeightPanel, b.mc * ((b.kc + 1) / 2));
  for (int64_t k0 = 0; k0 < cols; k0 += b.kc) {
    const int64_t kc = Min(b.kc, cols - k0);
    const int64_t pairs = (kc + 1) / 2;
    for (int64_t m0 = row_begin; m0 < row_end; m0 += b.mc) {
      const int64_t rows = Min(b.mc, row_end - m0);
      PackPanels(weights + m0 * cols, cols, rows, k0, kc, packed);
      for (int64_t j = 0; j < n; j += kTileActs) {
        const PanelTileFn tile =
            kPanelTiles[Min<int64_t>(kTileActs, n - j) - 1];
        for (int64_t p = 0; p * kPanelRows < rows; ++p) {
          tile(packed + p * pairs * kPanelRows, pairs, xb + j * ldx + k0, ldx,
               y + j * ldy + m0 + p * kPanelRows, ldy,
               Min<int64_t>(kPanelRows, rows - p * kPanelRows), k0 > 0);
        }
      }
    }
  }
}

void MatMulRowFp8(const float* x, const Matrix& w, int64_t row_begin,
                  int64_t row_end, float* y) {
  const int64_t cols = w.cols;
  const int64_t padded = (cols + kFp8Chunk - 1) / kFp8Chunk * kFp8Chunk;
  float* scaled =
      Scratch<float>(ScratchSlot::kScaledActivations, cols + padded / 2);
  uint16_t* xb = reinterpret_cast<uint16_t*>(scaled + cols);
  const auto* data = static_cast<const uint8_t*>(w.data);
  ForEachFp8RowBlock(
      w, row_begin, row_end, [&](int64_t begin, int64_t end, int64_t block) {
        avx2::ScaleFp8Activations(w, block, x, 1, scaled);
        LayOutFp8Activations(scaled, cols, xb);
        ForEachOneRowTile(padded * int64_t{sizeof(uint16_t)}, begin, end,
                          [&](int64_t r, int64_t stride, auto rows) {
                            Fp8Bf16Tile<decltype(rows)::value>(data, cols, xb,
                                                               r, stride, y);
                          });
      });
}

float Bf16DotLoop(int64_t iterations) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  // Pairs (0.996, 1e-7) against (1, 1): each step adds about 1, so the
  // sums stay finite and normal.
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x33d73f7f));
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3f803f80));
  for (int64_t i = 0; i < iterations; ++i) {
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  }
  __m512 s = acc[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
  return _mm512_reduce_add_ps(s);
}

}  // namespace ringmoe::kernels::avx512bf16

// AVX2 products against many activation rows (prefill): weights widened
// into a block once and multiplied against packed activations as sums of
// outer products (MatMulRowsBlocked).
#include <immintrin.h>

#include <cstdlib>

#include "kernels/cpu/avx2_internal.h"
#include "kernels/cpu/avx2_products.h"
#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx2 {

namespace {

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

// sums[v][i] = Σ_k w[i * ldw + k] · xp[(k * V + v) * 8 ...+ 8] for i <
// rows (1 <= rows <= R), zero for the others: up to R weight rows against
// one packed group of 8V activation rows over kc >= 1 columns. A shorter
// tile reads its last row again in place of the rows it lacks, never the
// memory past it (the end of a mapped checkpoint, or the next widened
// block's rows), and leaves those sums zero. Kept apart from what consumes
// the sums, and written as a do-while, because otherwise GCC 12 keeps a
// memory copy of the accumulators and stores them on every iteration.
template <int R, int V>
__attribute__((noinline)) void OuterSums(const float* w, int64_t ldw,
                                         int64_t rows, const float* xp,
                                         int64_t kc, __m256 (&sums)[V][8]) {
  const float* row[R];
  for (int i = 0; i < R; ++i) row[i] = w + Min<int64_t>(i, rows - 1) * ldw;
  __m256 acc[V][R];
  for (int v = 0; v < V; ++v) {
    for (int i = 0; i < R; ++i) acc[v][i] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  do {
    __m256 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm256_load_ps(xp + (k * V + v) * 8);
    for (int i = 0; i < R; ++i) {
      const __m256 wv = _mm256_broadcast_ss(row[i] + k);
      for (int v = 0; v < V; ++v)
        acc[v][i] = _mm256_fmadd_ps(wv, xv[v], acc[v][i]);
    }
  } while (++k < kc);
  for (int v = 0; v < V; ++v) {
    for (int i = 0; i < 8; ++i)
      sums[v][i] = i < R && i < rows ? acc[v][i] : _mm256_setzero_ps();
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
  OuterSums<R, V>(w, ldw, rows, xp, kc, sums);
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

}  // namespace

void MatMulRowsBlocked(const float* x, int64_t n, const Matrix& w,
                       int64_t row_begin, int64_t row_end, float* y) {
  // int4's integer products beat the blocked float ones at every count, so
  // it has no loader here (isa.h).
  if (w.type == WeightType::kInt4) std::abort();
  VisitLoader(w, [&](const auto& loader) {
    PackedRows(loader, w.type == WeightType::kF32, x, n, w.cols, row_begin,
               row_end, y, w.rows);
  });
}

}  // namespace ringmoe::kernels::avx2

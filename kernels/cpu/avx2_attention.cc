// AVX2 attention: decode attention over a range of positions
// (AttendPartial) and blocked prefill attention with an online softmax
// (AttendBlock).
#include <immintrin.h>
#include <math.h>

#include <cstring>

#include "kernels/cpu/avx2_internal.h"
#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx2 {

namespace {

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

}  // namespace

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
                 float scale, const float* sinks, float* out) {
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
        const float sink =
            sinks == nullptr ? 0.f : expf(sinks[g * group + h] - row_max[r]);
        const float inv = 1.f / (row_sum[r] + sink);
        float* o = out + i * q_width + (g * group + h) * head_dim;
        for (int64_t d = 0; d < head_dim; ++d) o[d] = acc[r * ldo + d] * inv;
      }
    }
  }
}

}  // namespace ringmoe::kernels::avx2

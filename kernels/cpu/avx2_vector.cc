// AVX2 operations on vectors: Dot, Axpy and the elementwise kernels
// (RMSNorm's scaling, softmax, rotary embedding, SiLU·mul, the weight
// quantizers' rounding).
#include <immintrin.h>
#include <math.h>

#include "kernels/cpu/avx2_internal.h"
#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx2 {

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

namespace {

// RoundToLevel of each lane: clamped first (max returns its second operand
// for NaN, so NaN becomes lo), then truncated and moved one step away from
// zero where the part cut off is at least a half (v - trunc(v) is exact).
__m256i RoundToLevel8(__m256 v, __m256 lo, __m256 hi) {
  v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 past_half =
      _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)),
                    _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 step = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.f));
  return _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(past_half, step)));
}

}  // namespace

void RoundToLevels(const float* x, int64_t n, float scale, float lo, float hi,
                   int8_t* out) {
  const __m256 s = _mm256_set1_ps(scale), low = _mm256_set1_ps(lo),
               high = _mm256_set1_ps(hi);
  const auto level = [&](const float* p) {
    return RoundToLevel8(_mm256_mul_ps(_mm256_loadu_ps(p), s), low, high);
  };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i q[4] = {level(x + i), level(x + i + 8), level(x + i + 16),
                          level(x + i + 24)};
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), PackBytes(q));
  }
  for (; i < n; i += 8) {
    const int64_t m = Min<int64_t>(8, n - i);
    const __m256i ints = RoundToLevel8(
        _mm256_mul_ps(_mm256_maskload_ps(x + i, TailMask(m)), s), low, high);
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), ints);
    for (int64_t j = 0; j < m; ++j) out[i + j] = static_cast<int8_t>(lanes[j]);
  }
}

float MaxAbs(const float* x, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 max = _mm256_setzero_ps();
  for (int64_t i = 0; i < n; i += 8) {
    // Lanes past the end load as 0; max returns its second operand for
    // NaN, so a NaN lane leaves the running maximum as it was.
    const __m256 v =
        _mm256_maskload_ps(x + i, TailMask(Min<int64_t>(8, n - i)));
    max = _mm256_max_ps(_mm256_andnot_ps(sign, v), max);
  }
  return HMax(max);
}

}  // namespace ringmoe::kernels::avx2

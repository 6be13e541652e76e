// Internal to the AVX2/FMA/F16C unit (the avx2_*.cc files, all built with
// -mavx2 -mfma -mf16c; ops.cc and probes.cc call into them only when
// UseAvx2() holds): the vector helpers its translation units share.
// Everything here lives in namespace avx2 (see isa.h); include it from those
// files only.
#ifndef RINGMOE_KERNELS_CPU_AVX2_INTERNAL_H_
#define RINGMOE_KERNELS_CPU_AVX2_INTERNAL_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx2 {

// Once for the whole unit: this header's guard keeps a second copy out.
#include "kernels/cpu/isa_unit-inl.h"

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

// Loads one block of 32 activations (`count` <= 32 real ones, the rest
// zero) into v[4] and returns their largest magnitude.
inline float LoadBlock32(const float* x, int64_t count, __m256 v[4]) {
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

// 32 int8-ranged int32 (q[j] holds columns 8j..8j+7) packed to bytes in
// column order.
inline __m256i PackBytes(const __m256i q[4]) {
  // The packs work within 128-bit lanes; the permute restores column order.
  return _mm256_permutevar8x32_epi32(
      _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                         _mm256_packs_epi32(q[2], q[3])),
      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// PackBytes split by column parity: the 16 even columns to even[0..15],
// the 16 odd ones to odd[0..15] (both 16-byte aligned), as the byte
// products against low and high weight nibbles want them.
inline void StoreEvenOddBytes(const __m256i q[4], int8_t* even, int8_t* odd) {
  const __m256i bytes = PackBytes(q);
  // Even columns to the low 8 bytes of each lane, odd to the high 8.
  const __m256i split = _mm256_shuffle_epi8(
      bytes,
      _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0,
                       2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
  const __m256i grouped = _mm256_permute4x64_epi64(split, 0xd8);  // 0, 2, 1, 3
  _mm_store_si128(reinterpret_cast<__m128i*>(even),
                  _mm256_castsi256_si128(grouped));
  _mm_store_si128(reinterpret_cast<__m128i*>(odd),
                  _mm256_extracti128_si256(grouped, 1));
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

}  // namespace ringmoe::kernels::avx2

#endif  // RINGMOE_KERNELS_CPU_AVX2_INTERNAL_H_

// AVX2 loops of the machine probes (probes.cc): memory bandwidth and FMA
// throughput.
#include <immintrin.h>

#include "kernels/cpu/avx2_internal.h"
#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx2 {

float Sum(const float* data, int64_t n, int64_t prefetch_bytes) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps(), _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (prefetch_bytes > 0) {
      // Whatever the kernels' WeightPrefetch: the probe takes the faster
      // of this loop with and without prefetch.
      __builtin_prefetch(data + i + prefetch_bytes / 4, 0, 0);
      __builtin_prefetch(data + i + 16 + prefetch_bytes / 4, 0, 0);
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

}  // namespace ringmoe::kernels::avx2

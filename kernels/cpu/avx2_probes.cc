// AVX2 loops of the machine probes (probes.cc): memory bandwidth and FMA
// throughput.
#include <immintrin.h>

#include "kernels/cpu/avx2_internal.h"
#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx2 {

namespace {

// Sums [0, S * per) of `data` as S streams, 16 floats of each at a time.
template <int S>
__m256 SumStreams(const float* data, int64_t per, int64_t prefetch_bytes) {
  __m256 acc[S][2];
  for (int s = 0; s < S; ++s) acc[s][0] = acc[s][1] = _mm256_setzero_ps();
  for (int64_t i = 0; i + 16 <= per; i += 16) {
    for (int s = 0; s < S; ++s) {
      const float* p = data + s * per + i;
      // Whatever the kernels' WeightPrefetch: the probe takes the fastest
      // of its loops with and without prefetch.
      if (prefetch_bytes > 0) __builtin_prefetch(p + prefetch_bytes / 4, 0, 0);
      acc[s][0] = _mm256_add_ps(acc[s][0], _mm256_loadu_ps(p));
      acc[s][1] = _mm256_add_ps(acc[s][1], _mm256_loadu_ps(p + 8));
    }
  }
  __m256 total = _mm256_setzero_ps();
  for (int s = 0; s < S; ++s)
    total = _mm256_add_ps(total, _mm256_add_ps(acc[s][0], acc[s][1]));
  return total;
}

}  // namespace

float Sum(const float* data, int64_t n, int64_t prefetch_bytes, int streams) {
  const int64_t per = n / streams / 16 * 16;
  const __m256 sum = streams == 3 ? SumStreams<3>(data, per, prefetch_bytes)
                                  : SumStreams<1>(data, per, prefetch_bytes);
  float tail = 0.f;
  for (int64_t i = streams * per; i < n; ++i) tail += data[i];
  return HSum(sum) + tail;
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

#include "kernels/cpu/probes.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/isa.h"

namespace ringmoe::kernels {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

// Keeps results alive so the loops are not optimised away.
std::atomic<float> sink{0.f};

// Median over `repetitions` of the FLOP/s of `loop` (returning a float
// that keeps its work alive) run once on every thread, each run doing
// `flops_per_thread`.
template <typename Loop>
double MedianFlopRate(ThreadPool* pool, int repetitions,
                      double flops_per_thread, const Loop& loop) {
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  std::vector<double> rates;
  for (int rep = 0; rep < repetitions; ++rep) {
    const auto start = std::chrono::steady_clock::now();
    ParallelFor(pool, threads, [&](int64_t) {
      sink.store(loop(), std::memory_order_relaxed);
    });
    rates.push_back(flops_per_thread * threads / Seconds(start));
  }
  return Median(rates);
}

}  // namespace

double MeasureReadBandwidth(ThreadPool* pool, int64_t bytes, int repetitions) {
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  const int64_t n = bytes / sizeof(float);
  std::unique_ptr<float[]> data(new float[n]);
  // Each thread touches (first-use) the slice it will read. Distinct values
  // in every page: pages of one repeated value can be merged by a host
  // (same-page merging) and then read from cache, inflating the ceiling.
  const int64_t slice = (n + threads - 1) / threads;
  auto slice_of = [&](int64_t t, auto fn) {
    const int64_t begin = t * slice, end = std::min(n, begin + slice);
    if (begin < end) fn(data.get() + begin, begin, end - begin);
  };
  ParallelFor(pool, threads, [&](int64_t t) {
    slice_of(t, [](float* p, int64_t first, int64_t m) {
      for (int64_t i = 0; i < m; ++i)
        p[i] = static_cast<float>((first + i) % 1000003);
    });
  });
  // The ceiling is the faster of two read loops, alternated so that both
  // see the same memory: one left to the hardware prefetchers and one that
  // also prefetches 4 KiB ahead (the best distance for a bare read loop on
  // this VM; the kernels' own loops do more per line and go further).
  constexpr int64_t kPrefetchBytes[] = {0, 4 << 10};
  std::vector<double> rates[2];
  for (int rep = 0; rep < repetitions; ++rep) {
    for (int loop = 0; loop < 2; ++loop) {
      const int64_t ahead = kPrefetchBytes[loop];
      const auto start = std::chrono::steady_clock::now();
      ParallelFor(pool, threads, [&](int64_t t) {
        slice_of(t, [ahead](const float* p, int64_t, int64_t m) {
          float s = 0.f;
          if (UseAvx2()) {
            s = avx2::Sum(p, m, ahead);
          } else {
            for (int64_t i = 0; i < m; ++i) s += p[i];
          }
          sink.store(s, std::memory_order_relaxed);
        });
      });
      rates[loop].push_back(static_cast<double>(n * sizeof(float)) /
                            Seconds(start));
    }
  }
  return std::max(Median(rates[0]), Median(rates[1]));
}

double MeasurePeakFlops(ThreadPool* pool, int repetitions) {
  constexpr int64_t kIterations = 20'000'000;
  // 12 chains x 8 lanes x 2 FLOPs per iteration (the scalar loop does the
  // same count as single FLOP pairs).
  return MedianFlopRate(pool, repetitions, 192.0 * kIterations, [] {
    if (UseAvx2()) return avx2::FmaLoop(kIterations);
    float acc[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int64_t i = 0; i < kIterations * 24; ++i) {
      acc[i % 8] = acc[i % 8] * 0.999999f + 1e-7f;
    }
    float s = 0.f;
    for (float a : acc) s += a;
    return s;
  });
}

double MeasurePeakBf16Flops(ThreadPool* pool, int repetitions) {
  if (!UseAvx512Bf16()) return 0;
  constexpr int64_t kIterations = 10'000'000;
  // 12 chains x 16 lanes x 2 pairs x 2 FLOPs per iteration.
  return MedianFlopRate(pool, repetitions, 768.0 * kIterations,
                        [] { return avx512bf16::Bf16DotLoop(kIterations); });
}

}  // namespace ringmoe::kernels

#include "kernels/cpu/probes.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "base/host_memory.h"
#include "base/statistics.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matrix.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::kernels {
namespace {

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

// How MeasureReadBandwidth's loops read: with software prefetch this many
// bytes ahead (0: none) and in this many streams per thread.
struct ReadLoop {
  int64_t prefetch_bytes;
  int streams;
};

// fn(begin, count) on each thread of the pool for its slice of [0, n):
// ceil(n / threads) elements, the last slices shorter or empty (skipped).
template <typename Fn>
void ForEachSlice(ThreadPool* pool, int64_t n, const Fn& fn) {
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  const int64_t slice = (n + threads - 1) / threads;
  ParallelFor(pool, threads, [&](int64_t t) {
    const int64_t begin = t * slice, end = std::min(n, begin + slice);
    if (begin < end) fn(begin, end - begin);
  });
}

// Bytes per second at which the threads read the n floats at data, each its
// ForEachSlice slice, as `read` says.
double TimedRead(ThreadPool* pool, const float* data, int64_t n,
                 ReadLoop read) {
  const auto start = std::chrono::steady_clock::now();
  ForEachSlice(pool, n, [&](int64_t begin, int64_t m) {
    const float* p = data + begin;
    float s = 0.f;
    if (UseAvx2()) {
      s = avx2::Sum(p, m, read.prefetch_bytes, read.streams);
    } else {
      for (int64_t i = 0; i < m; ++i) s += p[i];
    }
    sink.store(s, std::memory_order_relaxed);
  });
  return static_cast<double>(n * sizeof(float)) / Seconds(start);
}

}  // namespace

double ReadRate(ThreadPool* pool, const float* data, int64_t n) {
  return TimedRead(pool, data, n, ReadLoop{0, 1});
}

double MeasureReadBandwidth(ThreadPool* pool, int64_t bytes, int repetitions) {
  const int64_t n = bytes / sizeof(float);
  const HostMemory memory = AllocateHostMemory(n * sizeof(float));
  if (memory == nullptr) return 0;
  float* const data = reinterpret_cast<float*>(memory.get());
  // Each thread touches (first-use) the slice it will read. Distinct values
  // in every page: pages of one repeated value can be merged by a host
  // (same-page merging) and then read from cache, inflating the ceiling.
  ForEachSlice(pool, n, [&](int64_t first, int64_t m) {
    for (int64_t i = 0; i < m; ++i)
      data[first + i] = static_cast<float>((first + i) % 1000003);
  });
  // The ceiling is the fastest of three read loops, alternated so that all
  // see the same memory: one stream per thread left to the hardware
  // prefetchers, one that also prefetches 4 KiB ahead (the best distance
  // for a bare read loop on the Zen 4 VM), and three streams per thread
  // (a core may keep more lines in flight across streams than in one; the
  // decode products read so too: docs/PERFORMANCE.md).
  constexpr ReadLoop kLoops[] = {{0, 1}, {4 << 10, 1}, {0, 3}};
  constexpr int kNumLoops = sizeof(kLoops) / sizeof(kLoops[0]);
  std::vector<double> rates[kNumLoops];
  for (int rep = 0; rep < repetitions; ++rep) {
    for (int loop = 0; loop < kNumLoops; ++loop)
      rates[loop].push_back(TimedRead(pool, data, n, kLoops[loop]));
  }
  double fastest = 0;
  for (std::vector<double>& r : rates)
    fastest = std::max(fastest, Median(std::move(r)));
  return fastest;
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

namespace {

// A matrix of `type` for timing: arbitrary finite weights (what is timed
// does not depend on their values), first touched by the threads that read
// it, distinct in every page (see MeasureReadBandwidth), in host memory as
// the weights get it; data null when there is none.
struct TimedMatrix {
  HostMemory data;
  std::vector<uint16_t> scales;
  std::vector<float> block_scales;
  std::vector<uint8_t> exponents;
  Matrix m;
};

TimedMatrix MakeTimedMatrix(WeightType type, int64_t rows, int64_t cols,
                            ThreadPool* pool) {
  constexpr int32_t kGroup = 32, kFp8Block = 128;
  TimedMatrix t;
  t.m = Matrix{nullptr, type, rows, cols};
  int64_t row_bytes = cols;  // cols is a multiple of 128: no padding
  switch (type) {
    case WeightType::kF32:
      row_bytes = cols * 4;
      break;
    case WeightType::kBF16:
    case WeightType::kF16:
      row_bytes = cols * 2;
      break;
    case WeightType::kInt8:
    case WeightType::kInt4:
      if (type == WeightType::kInt4) row_bytes = cols / 2;
      t.m.group_size = kGroup;
      t.scales.assign(rows * (cols / kGroup), 0x2000);  // f16 2^-7
      t.m.scales = t.scales.data();
      break;
    case WeightType::kFp8E4M3:
      t.m.block_rows = t.m.block_cols = kFp8Block;
      t.block_scales.assign(
          ((rows + kFp8Block - 1) / kFp8Block) * (cols / kFp8Block), 1e-2f);
      t.m.block_scales = t.block_scales.data();
      break;
    case WeightType::kMxfp4:
      row_bytes = cols / 2;
      t.exponents.assign(rows * (cols / kMxfp4Block), 120);
      t.m.exponents = t.exponents.data();
      break;
  }
  const int64_t bytes = rows * row_bytes;
  t.data = AllocateHostMemory(bytes);
  if (t.data == nullptr) return t;
  uint8_t* data = t.data.get();
  // One finite value in every 16-bit word (for f32, the halves of 1.0f; for
  // the byte formats, codes that are finite in each), and the page's number
  // in the first word of each page.
  const uint16_t fill = type == WeightType::kF32    ? 0
                        : type == WeightType::kBF16 ? 0x3f80
                        : type == WeightType::kF16  ? 0x3c00
                                                    : 0x1111;
  const uint16_t page_mask = type == WeightType::kBF16  ? 0x7f
                             : type == WeightType::kF16 ? 0x3ff
                             : type == WeightType::kF32 ? 0xffff
                                                        : 0x0f0f;
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  constexpr int64_t kPage = 4096;
  const int64_t pages = (bytes + kPage - 1) / kPage;
  ParallelFor(pool, threads, [&](int64_t th) {
    for (int64_t page = pages * th / threads; page < pages * (th + 1) / threads;
         ++page) {
      uint16_t* words = reinterpret_cast<uint16_t*>(data + page * kPage);
      const int64_t count = std::min(kPage, bytes - page * kPage) / 2;
      for (int64_t i = 0; i < count; ++i) {
        words[i] = type == WeightType::kF32 && i % 2 ? 0x3f80 : fill;
      }
      words[0] = static_cast<uint16_t>(
          (fill & ~page_mask) | (static_cast<uint16_t>(page) & page_mask));
    }
  });
  t.m.data = data;
  return t;
}

}  // namespace

WeightPrefetchTuning TuneWeightPrefetch(WeightType type, ThreadPool* pool,
                                        int64_t bytes, int repetitions) {
  WeightPrefetchTuning tuning;
  tuning.type = type;
  // The scalar products issue no prefetches: nothing to choose.
  if (!UseAvx2() || repetitions < 1) return tuning;
  if (bytes <= 0) {
    // Virtual machines may report the whole socket's L3 (256 MiB on one
    // whose two cores share 32 MiB): 256 MiB is far beyond what a core
    // caches either way.
    bytes = std::clamp<int64_t>(2 * L3CacheBytes(), int64_t{64} << 20,
                                int64_t{256} << 20);
  }
  // Two matrices of about half the bytes each, both paths of the decode
  // products: 1024 columns, whose activation row stays in L1, so each
  // thread reads its rows as one sequential stream (WeightPrefetcher::Stream);
  // and 16384, longer than any L1 holds, read in tiles of several rows
  // (WeightPrefetcher::TileRow).
  std::vector<TimedMatrix> matrices;
  std::vector<std::vector<float>> xs, ys;
  std::vector<MatMulJob> jobs;
  int64_t total_bytes = 0;
  for (const int64_t cols : {int64_t{1024}, int64_t{16384}}) {
    const int64_t bits_per_weight =
        type == WeightType::kF32                                  ? 32
        : type == WeightType::kBF16 || type == WeightType::kF16   ? 16
        : type == WeightType::kInt4 || type == WeightType::kMxfp4 ? 4
                                                                  : 8;
    const int64_t rows =
        std::max<int64_t>(bytes / 2 * 8 / (cols * bits_per_weight) / 8 * 8, 64);
    matrices.push_back(MakeTimedMatrix(type, rows, cols, pool));
    if (matrices.back().data == nullptr) return tuning;
    xs.emplace_back(cols, 1.f / static_cast<float>(cols));
    ys.emplace_back(rows);
    jobs.push_back({xs.back().data(), 1, matrices.back().m, ys.back().data()});
    total_bytes += MatrixBytes(matrices.back().m);
  }
  std::vector<double> rates[2];
  for (int rep = 0; rep < repetitions; ++rep) {
    for (int choice = 0; choice < 2; ++choice) {
      SetWeightPrefetch(type, static_cast<WeightPrefetch>(choice));
      const auto start = std::chrono::steady_clock::now();
      // One product after the other, as a decode step runs them.
      for (const MatMulJob& job : jobs) MatMulBatch({job}, pool);
      rates[choice].push_back(static_cast<double>(total_bytes) /
                              Seconds(start));
    }
  }
  sink.store(ys[0][0] + ys[1][0], std::memory_order_relaxed);
  tuning.software_bytes_per_s = Median(rates[0]);
  tuning.hardware_only_bytes_per_s = Median(rates[1]);
  tuning.chosen = tuning.hardware_only_bytes_per_s > tuning.software_bytes_per_s
                      ? WeightPrefetch::kHardwareOnly
                      : WeightPrefetch::kSoftware;
  SetWeightPrefetch(type, tuning.chosen);
  return tuning;
}

}  // namespace ringmoe::kernels

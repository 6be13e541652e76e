// Product kernels at real MoE shapes, beside the machine's ceilings measured
// in the same run: BM_ReadBandwidth (streaming reads), BM_PeakFlops (FMA
// throughput) and BM_PeakBf16Flops (bf16 pair products, the ceiling of
// BM_MatMulBf16Activations). Each BM_MatMul reports `weight_bytes_per_second`
// (weight bytes read) and `flops_per_second`; divide by the ceilings for
// ratios.
//
//   bazel run -c opt //kernels/cpu:kernels_benchmark -- --benchmark_format=json
//     --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// The products of each weight type prefetch as measured faster when the
// thread pool starts (TuneWeightPrefetch); BM_WeightPrefetch reports both
// ways.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/host_memory.h"
#include "base/statistics.h"
#include "base/thread_pool.h"
#include "benchmark/benchmark.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/numeric.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/probes.h"

namespace ringmoe::kernels {
namespace {

ThreadPool& Pool() {
  static ThreadPool* pool = [] {
    ThreadPool* threads = new ThreadPool(0);
    for (int t = 0; t <= static_cast<int>(WeightType::kMxfp4); ++t) {
      TuneWeightPrefetch(static_cast<WeightType>(t), threads);
    }
    return threads;
  }();
  return *pool;
}

// Copies of one quantized matrix, `total_bytes` of them at least: cycling
// through enough of them reads from memory rather than from the last-level
// cache. Every copy's bytes differ from the others' (a host merging equal
// pages would otherwise serve them from one cached page). Their bytes are
// host memory as the engine's weights get it (AllocateHostMemory).
struct WeightCopies {
  std::vector<HostMemory> data;
  std::vector<std::unique_ptr<uint16_t[]>> scales;
  std::vector<float> block_scales;  // fp8: shared by every copy
  std::vector<uint8_t> exponents;   // mxfp4: shared by every copy
  std::vector<Matrix> matrices;
};

// Appends `bytes` of weight memory to out->data.
void AddData(int64_t bytes, WeightCopies* out) {
  out->data.push_back(AllocateHostMemory(bytes));
  if (out->data.back() == nullptr) {
    std::fprintf(stderr, "no host memory for %lld weight bytes\n",
                 static_cast<long long>(bytes));
    std::abort();
  }
}

// An mxfp4 matrix as gpt-oss ships its experts: random codes and e8m0
// exponents near 2^-6.
Matrix MakeMxfp4(int64_t rows, int64_t cols, std::mt19937* rng,
                 WeightCopies* out) {
  const int64_t blocks = (cols + kMxfp4Block - 1) / kMxfp4Block;
  AddData(rows * blocks * kMxfp4Block / 2, out);
  out->scales.emplace_back(new uint16_t[1]);
  std::uniform_int_distribution<int> byte(0, 255), exponent(118, 124);
  for (int64_t i = 0; i < rows * blocks * kMxfp4Block / 2; ++i) {
    out->data.back()[i] = static_cast<uint8_t>(byte(*rng));
  }
  out->exponents.resize(rows * blocks);
  for (uint8_t& e : out->exponents) e = static_cast<uint8_t>(exponent(*rng));
  Matrix m{out->data.back().get(), WeightType::kMxfp4, rows, cols};
  m.exponents = out->exponents.data();
  return m;
}

// An fp8 matrix as DeepSeek-V3 ships them: normally distributed weights
// rounded to the nearest e4m3 code after dividing each 128 x 128 block by
// its largest magnitude / 448 (so, as in the real checkpoints, few codes
// are subnormal: the AVX512-BF16 kernel widens chunks holding one another
// way).
constexpr int32_t kFp8Block = 128;
Matrix MakeFp8(int64_t rows, int64_t cols, std::mt19937* rng,
               WeightCopies* out) {
  constexpr int32_t kBlock = kFp8Block;
  const int64_t block_cols = (cols + kBlock - 1) / kBlock;
  out->block_scales.assign(((rows + kBlock - 1) / kBlock) * block_cols, 0.f);
  std::vector<float> weights(rows * cols);
  std::normal_distribution<float> normal(0.f, 0.02f);
  for (int64_t i = 0; i < rows * cols; ++i) {
    weights[i] = normal(*rng);
    float& amax =
        out->block_scales[i / cols / kBlock * block_cols + i % cols / kBlock];
    amax = std::max(amax, std::abs(weights[i]));
  }
  for (float& s : out->block_scales) s /= 448.f;
  // The non-negative codes' values, ascending (0x7f is NaN).
  std::vector<float> magnitudes(0x7f);
  for (int c = 0; c < 0x7f; ++c) {
    magnitudes[c] = Fp8E4M3ToF32(static_cast<uint8_t>(c));
  }
  AddData(rows * cols, out);
  out->scales.emplace_back(new uint16_t[1]);
  for (int64_t i = 0; i < rows * cols; ++i) {
    const float v =
        std::abs(weights[i]) /
        out->block_scales[i / cols / kBlock * block_cols + i % cols / kBlock];
    const auto up =
        std::lower_bound(magnitudes.begin(), magnitudes.end() - 1, v);
    const auto code = up != magnitudes.begin() && v - up[-1] < *up - v
                          ? up - 1 - magnitudes.begin()
                          : up - magnitudes.begin();
    out->data.back()[i] =
        static_cast<uint8_t>(code | (weights[i] < 0 ? 0x80 : 0));
  }
  Matrix m{out->data.back().get(), WeightType::kFp8E4M3, rows, cols};
  m.block_scales = out->block_scales.data();
  m.block_rows = m.block_cols = kBlock;
  return m;
}

WeightCopies MakeCopies(WeightType type, int64_t rows, int64_t cols,
                        int64_t total_bytes) {
  constexpr int32_t kGroup = 32;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 0.05f);
  std::vector<float> f32(rows * cols);
  for (float& v : f32) v = normal(rng);
  const Matrix src{f32.data(), WeightType::kF32, rows, cols};
  const int64_t data_bytes = QuantizedDataBytes(type, rows, cols, kGroup);
  const int64_t num_scales = QuantizedScaleCount(type, rows, cols, kGroup);
  Matrix shape{nullptr, type, rows, cols, nullptr, kGroup};
  shape.block_rows = shape.block_cols = kFp8Block;
  const int64_t copies = std::max<int64_t>(1, total_bytes / MatrixBytes(shape));
  WeightCopies out;
  for (int64_t c = 0; c < copies; ++c) {
    if (c == 0 && type == WeightType::kFp8E4M3) {
      out.matrices.push_back(MakeFp8(rows, cols, &rng, &out));
      continue;
    }
    if (c == 0 && type == WeightType::kMxfp4) {
      out.matrices.push_back(MakeMxfp4(rows, cols, &rng, &out));
      continue;
    }
    AddData(data_bytes, &out);
    out.scales.emplace_back(new uint16_t[std::max<int64_t>(1, num_scales)]);
    if (c == 0) {
      out.matrices.push_back(QuantizeMatrix(
          src, type, kGroup, out.data[0].get(), out.scales[0].get()));
    } else {
      std::memcpy(out.data[c].get(), out.data[0].get(), data_bytes);
      // The low byte of a weight (a mantissa byte for the float types, a
      // whole weight for int8 and int4), one per page.
      for (int64_t b = 0; b < data_bytes; b += 4096)
        out.data[c][b] ^= static_cast<uint8_t>(c);
      std::memcpy(out.scales[c].get(), out.scales[0].get(),
                  num_scales * sizeof(uint16_t));
      Matrix m = out.matrices[0];
      m.data = out.data[c].get();
      m.scales = out.scales[c].get();
      out.matrices.push_back(m);
    }
  }
  return out;
}

// The read bandwidth just before or after a case (the larger of the two):
// this machine's memory speed changes over minutes, so each case is
// compared with its own ceiling as well as with BM_ReadBandwidth's.
double NearbyReadBandwidth() {
  return MeasureReadBandwidth(&Pool(), int64_t{256} << 20, 3);
}

// Args: weight type, rows (out), cols (in), activation rows.
void MatMul(benchmark::State& state, int64_t total_bytes,
            ActivationPrecision precision = ActivationPrecision::kF32) {
  const auto type = static_cast<WeightType>(state.range(0));
  const int64_t rows = state.range(1), cols = state.range(2),
                n = state.range(3);
  const WeightCopies w = MakeCopies(type, rows, cols, total_bytes);
  std::vector<float> x(n * cols, 0.5f), y(n * rows);
  size_t next = 0;
  const double bandwidth_before = NearbyReadBandwidth();
  for (auto _ : state) {
    const MatMulJob job{x.data(), n, w.matrices[next], y.data(), precision};
    MatMulBatch({&job, 1}, &Pool());
    benchmark::DoNotOptimize(y.data());
    next = (next + 1) % w.matrices.size();
  }
  state.counters["read_bytes_per_second"] =
      std::max(bandwidth_before, NearbyReadBandwidth());
  const double iterations = static_cast<double>(state.iterations());
  state.counters["weight_bytes_per_second"] = benchmark::Counter(
      MatrixBytes(w.matrices[0]) * iterations, benchmark::Counter::kIsRate);
  state.counters["flops_per_second"] = benchmark::Counter(
      2.0 * n * rows * cols * iterations, benchmark::Counter::kIsRate);
  state.SetLabel(absl::StrCat(WeightTypeName(type), " ",
                              KernelPathName(ProductPath(type, n, precision))));
}

void BM_MatMul(benchmark::State& state) { MatMul(state, int64_t{768} << 20); }

// One-row products from memory at decode's shapes, in turns for kSeconds,
// each sample (64 MiB of weight rows) between two samples of the read
// bandwidth (ReadRate over 64 MiB of other memory): this VM's memory
// changes speed for seconds at a time, so a product's ratio to the ceiling
// means something only against probes of the same moment, and products
// compared with each other only in the same mix of states. Reports, for
// each case, the median ratio of its samples to their probes' mean
// (`<case>_ratio`), of those whose probes were both in the top quarter of
// the run's probes (`<case>_fast_ratio`, the faster state) and of those
// whose probes were both in the bottom quarter (`<case>_slow_ratio`),
// beside the probes' medians.
void BM_OneRowBesideProbe(benchmark::State& state) {
  constexpr double kSeconds = 120;
  constexpr int64_t kSampleBytes = int64_t{64} << 20;
  constexpr int64_t kProbeBytes = int64_t{1} << 30;
  struct Case {
    WeightType type;
    int64_t rows, cols;  // [out, in]
    ActivationPrecision precision;
    WeightCopies w;
    size_t next = 0;
    std::vector<double> rates;
  };
  // Rows of 2048 to 14336 columns: DeepSeek-V3's down and gate/up, the
  // synthetic Mixtral's down, Mixtral-8x7B's down; gpt-oss's experts.
  std::vector<Case> cases;
  const auto add = [&](WeightType type, int64_t rows, int64_t cols,
                       ActivationPrecision precision) {
    cases.push_back({type, rows, cols, precision,
                     MakeCopies(type, rows, cols, int64_t{512} << 20)});
  };
  // bf16 rows of every length in the same bytes: 7168 x 2048 weights.
  constexpr int64_t kBf16Weights = int64_t{7168} * 2048;
  for (ActivationPrecision p :
       {ActivationPrecision::kF32, ActivationPrecision::kBf16}) {
    for (int64_t cols : {2048, 3584, 7168, 14336})
      add(WeightType::kBF16, kBf16Weights / cols, cols, p);
  }
  for (ActivationPrecision p :
       {ActivationPrecision::kF32, ActivationPrecision::kBf16}) {
    add(WeightType::kFp8E4M3, 7168, 2048, p);
    add(WeightType::kFp8E4M3, 2048, 7168, p);
  }
  for (WeightType type : {WeightType::kInt8, WeightType::kInt4}) {
    add(type, 2048, 7168, ActivationPrecision::kF32);
    add(type, 4096, 14336, ActivationPrecision::kF32);
  }
  // int8 against one int8 activation level (Q8_0 × Q8_0).
  add(WeightType::kInt8, 2048, 7168, ActivationPrecision::kInt8);
  add(WeightType::kInt8, 4096, 14336, ActivationPrecision::kInt8);
  for (ActivationPrecision p :
       {ActivationPrecision::kF32, ActivationPrecision::kBf16}) {
    add(WeightType::kMxfp4, 2880, 2880, p);
  }
  const HostMemory probe_memory = AllocateHostMemory(kProbeBytes);
  auto* const probe = reinterpret_cast<float*>(probe_memory.get());
  for (int64_t i = 0; i < kProbeBytes / 4; ++i)
    probe[i] = static_cast<float>(i % 1000003);
  int64_t probe_offset = 0;
  const auto probe_sample = [&] {
    const double rate =
        ReadRate(&Pool(), probe + probe_offset / 4, kSampleBytes / 4);
    probe_offset = (probe_offset + kSampleBytes) % kProbeBytes;
    return rate;
  };
  std::vector<float> x(14336, 0.5f), y(14336);
  // turn_probes[t][k] precedes case k's sample of turn t and
  // turn_probes[t][k + 1] follows it.
  std::vector<std::vector<double>> turn_probes;
  std::vector<double> probes;
  for (auto _ : state) {
    const auto end = std::chrono::steady_clock::now() +
                     std::chrono::duration<double>(kSeconds);
    while (std::chrono::steady_clock::now() < end) {
      std::vector<double> turn{probe_sample()};
      for (Case& c : cases) {
        int64_t bytes = 0;
        const auto start = std::chrono::steady_clock::now();
        while (bytes < kSampleBytes) {
          const MatMulJob job{x.data(), 1, c.w.matrices[c.next], y.data(),
                              c.precision};
          MatMulBatch({&job, 1}, &Pool());
          bytes += MatrixBytes(c.w.matrices[c.next]);
          c.next = (c.next + 1) % c.w.matrices.size();
        }
        c.rates.push_back(bytes / std::chrono::duration<double>(
                                      std::chrono::steady_clock::now() - start)
                                      .count());
        turn.push_back(probe_sample());
      }
      probes.insert(probes.end(), turn.begin(), turn.end());
      turn_probes.push_back(std::move(turn));
    }
  }
  std::vector<double> sorted = probes;
  std::sort(sorted.begin(), sorted.end());
  const double fast = sorted[sorted.size() * 3 / 4];
  const double slow = sorted[sorted.size() / 4];
  std::vector<double> fast_probes, slow_probes;
  for (double p : probes) {
    if (p >= fast) fast_probes.push_back(p);
    if (p <= slow) slow_probes.push_back(p);
  }
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    std::vector<double> ratios, fast_ratios, slow_ratios;
    for (size_t t = 0; t < c.rates.size(); ++t) {
      const double before = turn_probes[t][k], after = turn_probes[t][k + 1];
      const double ratio = c.rates[t] / ((before + after) / 2);
      ratios.push_back(ratio);
      if (before >= fast && after >= fast) fast_ratios.push_back(ratio);
      if (before <= slow && after <= slow) slow_ratios.push_back(ratio);
    }
    std::string name =
        absl::StrCat(WeightTypeName(c.type), "_", c.rows, "x", c.cols, "_",
                     KernelPathName(ProductPath(c.type, 1, c.precision)));
    if (c.precision != ActivationPrecision::kF32) {
      absl::StrAppend(&name, "_", ActivationPrecisionName(c.precision),
                      "_activations");
    }
    state.counters[name + "_ratio"] = Median(ratios);
    state.counters[name + "_fast_ratio"] = Median(fast_ratios);
    state.counters[name + "_slow_ratio"] = Median(slow_ratios);
  }
  state.counters["read_bytes_per_second"] = Median(probes);
  state.counters["fast_read_bytes_per_second"] = Median(fast_probes);
  state.counters["slow_read_bytes_per_second"] = Median(slow_probes);
  state.counters["turns"] = static_cast<double>(turn_probes.size());
}
BENCHMARK(BM_OneRowBesideProbe)->Iterations(1)->UseRealTime();

// Each of `types` (all) at each shape with `ns` activation rows.
void AddMatMulArgs(benchmark::internal::Benchmark* b,
                   std::initializer_list<int64_t> ns,
                   std::initializer_list<WeightType> types = {}) {
  // [out, in] of Mixtral-8x7B (4096 hidden, 14336 expert), Qwen3-30B-A3B
  // (2048, 768) and DeepSeek-V3 (7168, 2048) expert projections.
  const int64_t shapes[][2] = {{14336, 4096}, {4096, 14336}, {768, 2048},
                               {2048, 768},   {2048, 7168},  {7168, 2048}};
  for (int type = 0; type <= static_cast<int>(WeightType::kMxfp4); ++type) {
    if (types.size() > 0 &&
        std::find(types.begin(), types.end(), static_cast<WeightType>(type)) ==
            types.end()) {
      continue;
    }
    for (const auto& s : shapes) {
      for (int64_t n : ns) b->Args({type, s[0], s[1], n});
    }
  }
}
BENCHMARK(BM_MatMul)
    ->Apply([](auto* b) {
      AddMatMulArgs(b, {1, 2, 3, 4, 8, 16, 32, 64, 128, 512});
    }) -> UseRealTime() -> MinTime(0.3);

// bf16 products, and fp8 ones of one row, whose activations may be rounded
// to bf16 (ActivationPrecision::kBf16: AVX512-BF16 where the CPU has it,
// and AVX512-VBMI for fp8), and mxfp4 ones on two int8 levels of
// activations, at BM_MatMul's shapes and activation counts, to set beside
// their float32 (mxfp4: three-level) cases.
void BM_MatMulBf16Activations(benchmark::State& state) {
  MatMul(state, int64_t{768} << 20, ActivationPrecision::kBf16);
}
BENCHMARK(BM_MatMulBf16Activations)
    ->Apply([](auto* b) {
      AddMatMulArgs(b, {1, 4, 8, 16, 32, 64, 128, 512}, {WeightType::kBF16});
      AddMatMulArgs(b, {1}, {WeightType::kFp8E4M3});
      AddMatMulArgs(b, {1, 2, 4, 8}, {WeightType::kMxfp4});
    }) -> UseRealTime() -> MinTime(0.3);

// BM_MatMulInCache's one-row fp8 case on bf16 activations.
void BM_MatMulInCacheBf16Activations(benchmark::State& state) {
  MatMul(state, 0, ActivationPrecision::kBf16);
}
BENCHMARK(BM_MatMulInCacheBf16Activations)
    ->Args({static_cast<int64_t>(WeightType::kFp8E4M3), 512, 1024, 1})
    ->UseRealTime()
    ->MinTime(0.3);

// mxfp4 products, and int8 ones of one row, on one int8 activation level
// (ActivationPrecision::kInt8), at BM_MatMul's shapes and the activation
// counts that take it, to set beside their mxfp4 three-level and int8
// int16 cases.
void BM_MatMulInt8Activations(benchmark::State& state) {
  MatMul(state, int64_t{768} << 20, ActivationPrecision::kInt8);
}
BENCHMARK(BM_MatMulInt8Activations)
    ->Apply([](auto* b) {
      AddMatMulArgs(b, {1, 2, 3, 4, 8}, {WeightType::kMxfp4});
      AddMatMulArgs(b, {1}, {WeightType::kInt8});
    }) -> UseRealTime() -> MinTime(0.3);

// BM_MatMulInCache's one-row int8 and mxfp4 cases on one int8 activation
// level.
void BM_MatMulInCacheInt8Activations(benchmark::State& state) {
  MatMul(state, 0, ActivationPrecision::kInt8);
}
BENCHMARK(BM_MatMulInCacheInt8Activations)
    ->Args({static_cast<int64_t>(WeightType::kInt8), 512, 1024, 1})
    ->Args({static_cast<int64_t>(WeightType::kMxfp4), 512, 2880, 1})
    ->UseRealTime()
    ->MinTime(0.3);

// BM_MatMul's cases that take the AVX-512 path where the CPU has it (one
// activation row; bf16 and mxfp4 at few rows) on the AVX2 path, to compare
// the two in one run.
void BM_MatMulAvx2(benchmark::State& state) {
  SetForceAvx2(true);
  BM_MatMul(state);
  SetForceAvx2(false);
}
BENCHMARK(BM_MatMulAvx2)
    ->Apply([](auto* b) {
      AddMatMulArgs(b, {1});
      AddMatMulArgs(b, {2, 3, 4, 8}, {WeightType::kBF16, WeightType::kMxfp4});
    }) -> UseRealTime() -> MinTime(0.3);

// One matrix small enough that each thread's rows stay in its L2 cache:
// the kernels' speed without memory's limit, which has to exceed the read
// bandwidth for BM_MatMul to reach it. mxfp4 (at gpt-oss's width, 2880)
// and bf16 also against the few activation rows of batched decode.
void AddInCacheArgs(benchmark::internal::Benchmark* b) {
  for (int type = 0; type <= static_cast<int>(WeightType::kMxfp4); ++type)
    b->Args({type, 512, 1024, 1});
  for (int64_t n : {1, 2, 4, 8})
    b->Args({static_cast<int64_t>(WeightType::kMxfp4), 512, 2880, n});
  for (int64_t n : {2, 4, 8})
    b->Args({static_cast<int64_t>(WeightType::kBF16), 512, 1024, n});
}
void BM_MatMulInCache(benchmark::State& state) { MatMul(state, 0); }
BENCHMARK(BM_MatMulInCache)->Apply(AddInCacheArgs)->UseRealTime()->MinTime(0.3);

void BM_MatMulInCacheAvx2(benchmark::State& state) {
  SetForceAvx2(true);
  BM_MatMulInCache(state);
  SetForceAvx2(false);
}
BENCHMARK(BM_MatMulInCacheAvx2)
    ->Apply(AddInCacheArgs)
    ->UseRealTime()
    ->MinTime(0.3);

// MLA's absorbed key projection at decode (CpuBackend::AbsorbMlaQueries):
// each head's query of 128 nope dims, on two threads by head, times that
// head's 128 rows of kv_b [heads x 256, 512] accumulated into its latent
// query of 512. Args: weight type, heads, activation rows. Weight bytes
// count the rows read (half of kv_b).
void BM_AccumulateRowProducts(benchmark::State& state) {
  constexpr int64_t kNope = 128, kRowsPerHead = 256, kLora = 512;
  const auto type = static_cast<WeightType>(state.range(0));
  const int64_t heads = state.range(1), n = state.range(2);
  const WeightCopies w =
      MakeCopies(type, heads * kRowsPerHead, kLora, int64_t{768} << 20);
  std::vector<float> q(n * heads * kNope, 0.5f), latent(n * heads * kLora);
  size_t next = 0;
  const double bandwidth_before = NearbyReadBandwidth();
  for (auto _ : state) {
    const Matrix& m = w.matrices[next];
    ParallelFor(&Pool(), heads, [&](int64_t h) {
      AccumulateRowProducts(q.data() + h * kNope, heads * kNope, n, m,
                            h * kRowsPerHead, h * kRowsPerHead + kNope,
                            latent.data() + h * kLora, heads * kLora);
    });
    benchmark::DoNotOptimize(latent.data());
    next = (next + 1) % w.matrices.size();
  }
  state.counters["read_bytes_per_second"] =
      std::max(bandwidth_before, NearbyReadBandwidth());
  state.counters["weight_bytes_per_second"] = benchmark::Counter(
      MatrixBytes(w.matrices[0]) / 2 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
  state.SetLabel(WeightTypeName(type));
}
BENCHMARK(BM_AccumulateRowProducts)
    ->Apply([](auto* b) {
      for (WeightType type : {WeightType::kBF16, WeightType::kFp8E4M3}) {
        // DeepSeek-V3's 128 heads; the synthetic DeepSeek-V3's 16.
        for (int64_t heads : {128, 16}) {
          for (int64_t n : {1, 4})
            b->Args({static_cast<int64_t>(type), heads, n});
        }
      }
    }) -> UseRealTime() -> MinTime(0.3);

// Args: weight type.
void BM_WeightPrefetch(benchmark::State& state) {
  const auto type = static_cast<WeightType>(state.range(0));
  WeightPrefetchTuning tuning;
  for (auto _ : state) tuning = TuneWeightPrefetch(type, &Pool());
  state.counters["software_bytes_per_second"] = tuning.software_bytes_per_s;
  state.counters["hardware_only_bytes_per_second"] =
      tuning.hardware_only_bytes_per_s;
  state.SetLabel(absl::StrCat(WeightTypeName(type), " ",
                              WeightPrefetchName(tuning.chosen)));
}
BENCHMARK(BM_WeightPrefetch)
    ->DenseRange(0, static_cast<int>(WeightType::kMxfp4))
    ->Iterations(1)
    ->UseRealTime();

void BM_ReadBandwidth(benchmark::State& state) {
  double rate = 0;
  for (auto _ : state) rate = MeasureReadBandwidth(&Pool());
  state.counters["bytes_per_second"] = rate;
}
BENCHMARK(BM_ReadBandwidth)->Iterations(1)->UseRealTime();

void BM_PeakFlops(benchmark::State& state) {
  double rate = 0;
  for (auto _ : state) rate = MeasurePeakFlops(&Pool());
  state.counters["flops_per_second"] = rate;
}
BENCHMARK(BM_PeakFlops)->Iterations(1)->UseRealTime();

// BM_MatMulBf16Activations' ceiling (0 without AVX512-BF16).
void BM_PeakBf16Flops(benchmark::State& state) {
  double rate = 0;
  for (auto _ : state) rate = MeasurePeakBf16Flops(&Pool());
  state.counters["flops_per_second"] = rate;
}
BENCHMARK(BM_PeakBf16Flops)->Iterations(1)->UseRealTime();

}  // namespace
}  // namespace ringmoe::kernels

BENCHMARK_MAIN();

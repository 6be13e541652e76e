// Per-token sampling cost at a Qwen-sized vocabulary (151,936 entries).
// Run with: bazel run --config=opt //engine/runtime:sampler_benchmark

#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/runtime/sampler.h"

namespace ringmoe::runtime {
namespace {

constexpr int kVocab = 151936;

std::vector<float> ModelLikeLogits() {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> logits(kVocab);
  for (float& l : logits) l = normal(rng);
  return logits;
}

// Arguments: temperature * 100, top_k, top_p * 100, min_p * 100, and whether
// penalties see a 2k-token history.
void BM_Sample(benchmark::State& state) {
  SamplingParams params;
  params.seed = 1;
  params.temperature = state.range(0) / 100.0f;
  params.top_k = static_cast<int32_t>(state.range(1));
  params.top_p = state.range(2) / 100.0f;
  params.min_p = state.range(3) / 100.0f;
  std::vector<int32_t> history;
  if (state.range(4) != 0) {
    params.repetition_penalty = 1.1f;
    params.frequency_penalty = 0.2f;
    for (int i = 0; i < 2048; ++i) history.push_back((i * 7919) % kVocab);
  }
  const std::vector<float> logits = ModelLikeLogits();
  Sampler sampler = std::move(Sampler::Create(params, kVocab)).value();
  for (auto _ : state) {
    benchmark::DoNotOptimize(sampler.Sample(logits, history, history));
  }
}
BENCHMARK(BM_Sample)
    ->ArgNames({"temp", "top_k", "top_p", "min_p", "penalties"})
    ->Args({0, 0, 100, 0, 0})
    ->Args({100, 0, 100, 0, 0})
    ->Args({70, 50, 100, 0, 0})
    ->Args({70, 0, 90, 0, 0})
    ->Args({70, 0, 100, 5, 0})
    ->Args({70, 50, 90, 5, 1})
    ->Args({70, 0, 95, 0, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace ringmoe::runtime

BENCHMARK_MAIN();

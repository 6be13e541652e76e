// Offloading must not change results: for every golden tiny model, logits
// and greedy tokens with every expert streamed through the memory ring —
// rings of 2, 3 and 4 slots, prefetch depth 0 to K-1, layer and expert mode,
// expert cache on and off, sections of a whole layer, of one expert and of
// three (a layer in uneven sections) — are bitwise identical to the
// all-resident run; so are the all-resident runs whose weights are read from
// the checkpoint's mapping and from a copy.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/runtime/engine.h"
#include "gtest/gtest.h"
#include "tests/golden/engine_trace.h"

namespace ringmoe {
namespace {

using golden::Bitwise;
using golden::GoldenInputs;
using golden::RunTrace;
using golden::Trace;

constexpr int kCases = 5;
constexpr int kGreedy = 16;

std::unique_ptr<runtime::Engine> Load(
    const std::string& dir, const runtime::StreamingOptions& streaming,
    runtime::ResidentWeights resident = runtime::ResidentWeights::kMapped) {
  runtime::EngineOptions options;
  options.model_dir = dir;
  options.threads = 1;
  options.streaming = streaming;
  options.resident_weights = resident;
  auto engine = runtime::Engine::Load(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

class StreamingExactnessTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StreamingExactnessTest, EveryRingConfigurationIsBitwiseIdentical) {
  const std::string dir = "tests/testdata/moe-tiny/" + GetParam();
  const std::vector<std::vector<int32_t>> inputs = GoldenInputs(dir, kCases);
  ASSERT_EQ(inputs.size(), kCases);
  auto resident = Load(dir, {});
  ASSERT_NE(resident, nullptr);
  EXPECT_FALSE(resident->resident_weights_copied());
  const Trace want = RunTrace(*resident, inputs, kGreedy);
  const memory_ring::PlacementPlan& sizes = resident->placement();
  ASSERT_GT(sizes.layer_experts, 3);

  auto copied = Load(dir, {}, runtime::ResidentWeights::kCopied);
  ASSERT_NE(copied, nullptr);
  EXPECT_TRUE(copied->resident_weights_copied());
  const Trace from_copy = RunTrace(*copied, inputs, kGreedy);
  for (int i = 0; i < kCases; ++i) {
    EXPECT_TRUE(Bitwise(from_copy.logits[i], want.logits[i])) << "case " << i;
    EXPECT_EQ(from_copy.greedy[i], want.greedy[i]) << "case " << i;
  }
  EXPECT_TRUE(Bitwise(from_copy.batched, want.batched));
  EXPECT_TRUE(Bitwise(from_copy.batched_decode, want.batched_decode));
  copied.reset();

  struct Ring {
    int section_experts, slots, depth;
  };
  std::vector<Ring> rings;
  for (int slots = 2; slots <= 4; ++slots) {
    for (int depth = 0; depth < slots; ++depth) {
      rings.push_back({sizes.layer_experts, slots, depth});
    }
  }
  for (int section_experts : {1, 3}) {
    for (int slots = 2; slots <= 3; ++slots) {
      for (int depth : {0, slots - 1}) {
        rings.push_back({section_experts, slots, depth});
      }
    }
  }
  for (const Ring& ring : rings) {
    for (auto mode : {runtime::RingMode::kLayer, runtime::RingMode::kExpert}) {
      for (bool cache : {false, true}) {
        runtime::StreamingOptions s;
        s.num_slots = ring.slots;
        s.prefetch_depth = ring.depth;
        s.section_experts = ring.section_experts;
        s.mode = mode;
        s.expert_cache = cache;
        s.force_streaming = true;
        s.memory_budget =
            sizes.always_resident_bytes +
            ring.slots * ring.section_experts * sizes.expert_bytes +
            (cache ? 3 * sizes.expert_bytes : 0);
        const std::string config =
            GetParam() + " K=" + std::to_string(ring.slots) +
            " d=" + std::to_string(ring.depth) +
            " G=" + std::to_string(ring.section_experts) +
            (mode == runtime::RingMode::kLayer ? " layer" : " expert") +
            (cache ? " cache" : " nocache");
        auto streamed = Load(dir, s);
        ASSERT_NE(streamed, nullptr) << config;
        const memory_ring::PlacementPlan& plan = streamed->placement();
        ASSERT_TRUE(plan.streams()) << config;
        ASSERT_EQ(plan.num_slots, ring.slots) << config;
        ASSERT_EQ(plan.section_experts, ring.section_experts) << config;
        ASSERT_EQ(plan.resident_experts, 0) << config;
        EXPECT_TRUE(streamed->resident_weights_copied()) << config;
        const Trace got = RunTrace(*streamed, inputs, kGreedy);
        for (int i = 0; i < kCases; ++i) {
          EXPECT_TRUE(Bitwise(got.logits[i], want.logits[i]))
              << config << " case " << i;
          EXPECT_EQ(got.greedy[i], want.greedy[i]) << config << " case " << i;
        }
        EXPECT_TRUE(Bitwise(got.batched, want.batched)) << config << " batched";
        EXPECT_TRUE(Bitwise(got.batched_decode, want.batched_decode))
            << config << " batched decode";
        EXPECT_EQ(got.batched_greedy, want.batched_greedy) << config;
        const memory_ring::RingStats& stats = streamed->ring_stats();
        EXPECT_GT(stats.bytes_moved, 0u) << config;
        EXPECT_EQ(stats.load_errors, 0u) << config;
        if (cache && mode == runtime::RingMode::kExpert) {
          EXPECT_GT(stats.cache_hits, 0u) << config;
        }
        if (mode == runtime::RingMode::kExpert) {
          EXPECT_GT(stats.prefetch_hits + stats.prefetch_misses, 0u) << config;
        }
      }
    }
  }
}

// gpt-oss's BF16 experts are stored [in, out] and transposed on load, so
// the checkpoint's bytes cannot be streamed as they are: refused by name.
TEST(StreamingRefusalTest, TransposedExpertsDoNotStream) {
  const std::string dir = "tests/testdata/moe-tiny/gpt_oss_bf16";
  auto resident = Load(dir, {});
  ASSERT_NE(resident, nullptr);
  const memory_ring::PlacementPlan& sizes = resident->placement();
  runtime::EngineOptions options;
  options.model_dir = dir;
  options.threads = 1;
  options.streaming.force_streaming = true;
  options.streaming.num_slots = 2;
  options.streaming.section_experts = 1;
  options.streaming.expert_cache = false;
  options.streaming.memory_budget =
      sizes.always_resident_bytes + 2 * sizes.expert_bytes;
  auto engine = runtime::Engine::Load(options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(engine.status().message().find("rearranged on load"),
            std::string::npos)
      << engine.status();
}

// A checkpoint whose float32 block scales lie at offsets the file does not
// align (the binder reads aligned copies of them) still streams them from
// the file, bitwise as when resident.
TEST(StreamingMisalignedTest, CopiedFp8ScalesStreamFromTheFile) {
  const std::string src = "tests/testdata/moe-tiny/deepseek_v3_fp8";
  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR")) + "/misaligned_fp8";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(src + "/config.json", dir + "/config.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto source = checkpoint::Checkpoint::Open(src);
  ASSERT_TRUE(source.ok()) << source.status();
  // Two bytes ahead of everything: every F32 tensor lands 2 mod 4.
  const uint16_t pad = 0;
  std::vector<checkpoint::TensorToWrite> tensors = {
      {"misalignment",
       checkpoint::DType::kBF16,
       {1},
       absl::string_view(reinterpret_cast<const char*>(&pad), sizeof(pad))}};
  for (const std::string& name : (*source)->TensorNames()) {
    const checkpoint::TensorView& t = *(*source)->Find(name);
    tensors.push_back({t.name, t.dtype, t.shape,
                       absl::string_view(reinterpret_cast<const char*>(t.data),
                                         t.num_bytes)});
  }
  ASSERT_TRUE(
      checkpoint::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  auto written = checkpoint::Checkpoint::Open(dir);
  ASSERT_TRUE(written.ok());
  const checkpoint::TensorView* scale = (*written)->Find(
      "model.layers.1.mlp.experts.0.down_proj.weight_scale_inv");
  ASSERT_NE(scale, nullptr);
  ASSERT_NE(reinterpret_cast<uintptr_t>(scale->data) % alignof(float), 0u);

  const std::vector<std::vector<int32_t>> inputs = GoldenInputs(src, kCases);
  ASSERT_EQ(inputs.size(), kCases);
  auto resident = Load(dir, {});
  ASSERT_NE(resident, nullptr);
  const Trace want = RunTrace(*resident, inputs, kGreedy);
  const memory_ring::PlacementPlan& sizes = resident->placement();
  runtime::StreamingOptions s;
  s.num_slots = 2;
  s.prefetch_depth = 1;
  s.section_experts = 1;
  s.expert_cache = false;
  s.force_streaming = true;
  s.memory_budget = sizes.always_resident_bytes + 2 * sizes.expert_bytes;
  auto streamed = Load(dir, s);
  ASSERT_NE(streamed, nullptr);
  ASSERT_TRUE(streamed->placement().streams());
  const Trace got = RunTrace(*streamed, inputs, kGreedy);
  for (int i = 0; i < kCases; ++i) {
    EXPECT_TRUE(Bitwise(got.logits[i], want.logits[i])) << "case " << i;
  }
  EXPECT_TRUE(Bitwise(got.batched, want.batched));
  EXPECT_GT(streamed->ring_stats().bytes_moved, 0u);
}

INSTANTIATE_TEST_SUITE_P(MoeTiny, StreamingExactnessTest,
                         ::testing::Values("mixtral", "mixtral_sharded",
                                           "qwen2_moe", "qwen3_moe", "olmoe",
                                           "deepseek_v3", "deepseek_v3_fp8",
                                           "deepseek_v2_lite", "gpt_oss"));

}  // namespace
}  // namespace ringmoe

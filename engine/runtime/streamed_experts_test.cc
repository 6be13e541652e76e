// Faults under the memory ring: a checkpoint truncated underneath fails the
// step with an error naming the file, the engine stays usable, and once the
// file reads again so do the steps — with the same results.
#include "engine/runtime/streamed_experts.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "engine/backend/cpu_backend.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/runtime/engine.h"
#include "gtest/gtest.h"

namespace ringmoe::runtime {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  // In place (same inode), as a restored file would be.
  std::ofstream out(path, std::ios::binary | std::ios::in | std::ios::out);
  out.write(bytes.data(), bytes.size());
}

class StreamedExpertsTest : public ::testing::TestWithParam<RingMode> {};

TEST_P(StreamedExpertsTest, TruncatedCheckpointFailsThenRecovers) {
  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR")) + "/mixtral" +
      (GetParam() == RingMode::kLayer ? "_layer" : "_expert");
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"}) {
    fs::copy_file(std::string("tests/testdata/moe-tiny/mixtral/") + f,
                  dir + "/" + f, fs::copy_options::overwrite_existing);
  }
  const std::string weights_file = dir + "/model.safetensors";
  const std::string original = ReadAll(weights_file);

  EngineOptions options;
  options.model_dir = dir;
  auto sizes = Engine::Load(options);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  options.streaming.force_streaming = true;
  options.streaming.expert_cache = false;
  options.streaming.mode = GetParam();
  // Nothing but the ring: every expert streams.
  options.streaming.num_slots = 2;
  options.streaming.prefetch_depth = 1;
  options.streaming.memory_budget = (*sizes)->placement().minimum_budget;
  auto engine = Engine::Load(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE((*engine)->placement().streams());
  ASSERT_EQ((*engine)->placement().resident_experts, 0);

  const std::vector<int32_t> prompt = {5, 77, 300, 12, 9, 401};
  std::vector<float> before;
  ASSERT_TRUE((*engine)->Step({{1, prompt, true}}, &before).ok());
  (*engine)->kv_cache().Release(1);

  ASSERT_EQ(truncate(weights_file.c_str(), original.size() / 3), 0);
  std::vector<float> logits;
  absl::Status failed = (*engine)->Step({{2, prompt, true}}, &logits);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss) << failed;
  EXPECT_NE(failed.message().find(weights_file), std::string::npos) << failed;
  EXPECT_NE(failed.message().find("short read"), std::string::npos) << failed;
  (*engine)->kv_cache().Release(2);
  EXPECT_EQ((*engine)->kv_cache().num_free_blocks(),
            (*engine)->kv_cache().num_blocks());
  EXPECT_GT((*engine)->ring_stats().load_errors, 0u);

  WriteAll(weights_file, original);
  std::vector<float> after;
  absl::Status recovered = (*engine)->Step({{3, prompt, true}}, &after);
  ASSERT_TRUE(recovered.ok()) << recovered;
  ASSERT_EQ(after.size(), before.size());
  EXPECT_EQ(
      std::memcmp(after.data(), before.data(), after.size() * sizeof(float)),
      0);
}

INSTANTIATE_TEST_SUITE_P(Modes, StreamedExpertsTest,
                         ::testing::Values(RingMode::kLayer,
                                           RingMode::kExpert));

TEST(StreamedExpertsBudgetTest, ConvertedWeightsLoadUnlessTheyMustStream) {
  EngineOptions options;
  options.model_dir = "tests/testdata/moe-tiny/mixtral";
  options.weight_conversion.mlp_type = kernels::WeightType::kInt8;
  auto resident = Engine::Load(options);
  ASSERT_TRUE(resident.ok()) << resident.status();
  EXPECT_FALSE((*resident)->placement().streams());
  options.streaming.memory_budget = 1 << 30;  // holds everything
  EXPECT_TRUE(Engine::Load(options).ok());
  options.streaming.force_streaming = true;
  auto streamed = Engine::Load(options);
  ASSERT_FALSE(streamed.ok());
  EXPECT_EQ(streamed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(streamed.status().message().find("--weight_dtype"),
            std::string::npos);
}

TEST(StreamedExpertsBudgetTest, TooSmallABudgetNamesTheSmallestThatWorks) {
  EngineOptions options;
  options.model_dir = "tests/testdata/moe-tiny/qwen3_moe";
  options.streaming.memory_budget = 100000;
  auto engine = Engine::Load(options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(engine.status().message().find("the smallest budget that works is"),
            std::string::npos)
      << engine.status();
}

// gpt-oss stores all experts of a layer in one tensor [E, ...]: each
// expert's weights are a slice of it, bound by hand here as the model
// binder binds gpt-oss. Blocks and exponents lie in different shards, as in
// gpt-oss's checkpoint, behind a tensor that is not an expert's.
class FusedExperts {
 public:
  static constexpr int kExperts = 4;
  static constexpr int64_t kHidden = 64;
  static constexpr int64_t kInter = 64;

  explicit FusedExperts(backend::WeightType type) : type_(type) {
    std::mt19937 rng(7);
    const bool mxfp4 = type == backend::WeightType::kMxfp4;
    // [E, rows, cols] as stored, and (mxfp4) [E, rows, cols / 32] exponents.
    auto data = [&](int64_t rows, int64_t cols) {
      std::string bytes;
      if (mxfp4) {
        for (int64_t i = 0; i < kExperts * rows * cols / 2; ++i)
          bytes.push_back(static_cast<char>(rng()));
      } else {
        std::uniform_real_distribution<float> value(-0.5f, 0.5f);
        for (int64_t i = 0; i < kExperts * rows * cols; ++i) {
          float f = value(rng);
          uint32_t bits;
          std::memcpy(&bits, &f, sizeof(bits));
          bytes.push_back(static_cast<char>(bits >> 16));
          bytes.push_back(static_cast<char>(bits >> 24));
        }
      }
      return bytes;
    };
    auto exponents = [&](int64_t rows, int64_t cols) {
      std::string bytes;
      for (int64_t i = 0; i < kExperts * rows * cols / 32; ++i)
        bytes.push_back(static_cast<char>(120 + rng() % 7));
      return bytes;
    };
    gate_up_ = data(2 * kInter, kHidden);
    down_ = data(kHidden, kInter);
    gate_up_exponents_ = exponents(2 * kInter, kHidden);
    down_exponents_ = exponents(kHidden, kInter);
    norm_.assign(kHidden * sizeof(float), '\x01');
    for (int64_t i = 0; i < 2 * kInter; ++i) gate_up_bias_.push_back(i % 5);
    for (int64_t i = 0; i < kHidden; ++i) down_bias_.push_back(-(i % 3));
  }

  // Writes the checkpoint into `dir` and binds the experts to it.
  void Write(const std::string& dir) {
    fs::create_directories(dir);
    const checkpoint::DType stored = type_ == backend::WeightType::kMxfp4
                                         ? checkpoint::DType::kU8
                                         : checkpoint::DType::kBF16;
    auto shape = [&](int64_t rows, int64_t cols) -> std::vector<int64_t> {
      if (type_ == backend::WeightType::kMxfp4)
        return {kExperts, rows, cols / 32, 16};
      return {kExperts, rows, cols};
    };
    auto exponent_shape = [](int64_t rows, int64_t cols) {
      return std::vector<int64_t>{kExperts, rows, cols / 32};
    };
    std::vector<checkpoint::TensorToWrite> first = {
        {"norm", checkpoint::DType::kF32, {kHidden}, norm_},
        {"gate_up", stored, shape(2 * kInter, kHidden), gate_up_}};
    std::vector<checkpoint::TensorToWrite> second = {
        {"down", stored, shape(kHidden, kInter), down_}};
    std::string index = R"({"weight_map":{"norm":"a.safetensors",)"
                        R"("gate_up":"a.safetensors","down":"b.safetensors")";
    if (type_ == backend::WeightType::kMxfp4) {
      second.insert(second.begin(),
                    {"gate_up_exponents", checkpoint::DType::kU8,
                     exponent_shape(2 * kInter, kHidden), gate_up_exponents_});
      first.push_back({"down_exponents", checkpoint::DType::kU8,
                       exponent_shape(kHidden, kInter), down_exponents_});
      index += R"(,"gate_up_exponents":"b.safetensors",)"
               R"("down_exponents":"a.safetensors")";
    }
    ASSERT_TRUE(
        checkpoint::WriteSafetensors(dir + "/a.safetensors", first).ok());
    ASSERT_TRUE(
        checkpoint::WriteSafetensors(dir + "/b.safetensors", second).ok());
    std::ofstream(dir + "/model.safetensors.index.json") << index << "}}";
    auto opened = checkpoint::Checkpoint::Open(dir);
    ASSERT_TRUE(opened.ok()) << opened.status();
    checkpoint_ = *std::move(opened);

    spec_.num_layers = 1;
    spec_.hidden_size = kHidden;
    spec_.num_experts = kExperts;
    spec_.experts_per_token = 2;
    spec_.layer_is_moe = {true};
    weights_.layers.resize(1);
    model::LayerWeights& layer = weights_.layers[0];
    layer.experts.resize(kExperts);
    for (int e = 0; e < kExperts; ++e) {
      model::MlpWeights& mlp = layer.experts[e];
      mlp.gate_up = Slice("gate_up", e, 2 * kInter, kHidden);
      mlp.down = Slice("down", e, kHidden, kInter);
      mlp.gate_up_bias = {gate_up_bias_.data(), 2 * kInter};
      mlp.down_bias = {down_bias_.data(), kHidden};
      mlp.activation.kind = backend::GatedActivation::Kind::kClampedSwiglu;
    }
  }

  const model::ModelSpec& spec() const { return spec_; }
  const checkpoint::Checkpoint& checkpoint() const { return *checkpoint_; }
  model::ModelWeights* weights() { return &weights_; }

 private:
  // Expert e's [rows, cols] matrix inside the fused tensor `name`.
  backend::Weight Slice(const std::string& name, int e, int64_t rows,
                        int64_t cols) {
    backend::Weight w;
    w.type = type_;
    w.rows = rows;
    w.cols = cols;
    w.data = checkpoint_->Find(name)->data + e * backend::DataBytes(w);
    if (type_ == backend::WeightType::kMxfp4) {
      w.exponents = checkpoint_->Find(name + "_exponents")->data +
                    e * backend::ExponentBytes(w);
    }
    return w;
  }

  backend::WeightType type_;
  std::string gate_up_, down_, gate_up_exponents_, down_exponents_, norm_;
  std::vector<float> gate_up_bias_, down_bias_;
  std::unique_ptr<checkpoint::Checkpoint> checkpoint_;
  model::ModelSpec spec_;
  model::ModelWeights weights_;
};

// The CPU backend, checking that every MLP it runs reads no part of its
// weights from the checkpoint's mapping: with every expert streamed, each
// part must have been pointed into a ring slot or the expert cache (the
// mapping holds the same bytes, so results alone would not tell).
class StreamedOnlyBackend : public backend::CpuBackend {
 public:
  explicit StreamedOnlyBackend(const checkpoint::Checkpoint& checkpoint)
      : CpuBackend(nullptr), checkpoint_(checkpoint) {}

  void RunMlps(absl::Span<const backend::MlpTask> tasks) override {
    for (const backend::MlpTask& t : tasks) {
      model::MlpWeights mlp = *t.weights;
      for (const backend::Weight* m : model::MlpMatrices(&mlp)) {
        for (const void* part : {m->data, static_cast<const void*>(m->scales),
                                 static_cast<const void*>(m->block_scales),
                                 static_cast<const void*>(m->exponents)}) {
          EXPECT_TRUE(part == nullptr ||
                      !checkpoint_.Locate(part, 1).has_value());
        }
      }
    }
    CpuBackend::RunMlps(tasks);
  }

 private:
  const checkpoint::Checkpoint& checkpoint_;
};

class FusedExpertsTest : public ::testing::TestWithParam<
                             std::tuple<backend::WeightType, RingMode>> {};

TEST_P(FusedExpertsTest, StreamedSlicesAreBitwiseResident) {
  const auto [type, mode] = GetParam();
  FusedExperts fused(type);
  ASSERT_NO_FATAL_FAILURE(fused.Write(absl::StrCat(
      std::getenv("TEST_TMPDIR"), "/fused_", kernels::WeightTypeName(type),
      mode == RingMode::kLayer ? "_layer" : "_expert")));
  const int64_t hidden = FusedExperts::kHidden;
  backend::CpuBackend backend(nullptr);

  // Steps routing different experts: in expert mode later ones find some
  // in the expert cache.
  const std::vector<std::vector<int32_t>> steps = {{0, 2}, {1, 3}, {2, 0, 1}};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-2.f, 2.f);
  std::vector<std::vector<float>> x, expected;
  for (const auto& experts : steps) {
    for (int32_t e : experts) {
      const int64_t n = 1 + e;
      x.emplace_back(n * hidden);
      for (float& v : x.back()) v = value(rng);
      expected.emplace_back(n * hidden);
      backend.RunMlps({{&fused.weights()->layers[0].experts[e],
                        {x.back().data(), n, hidden},
                        {expected.back().data(), n, hidden}}});
    }
  }

  StreamingOptions options;
  options.mode = mode;
  memory_ring::RingStats stats;
  memory_ring::PlacementPlan plan;
  auto sizes = StreamedExperts::Create(fused.spec(), fused.checkpoint(),
                                       fused.weights(), options, &stats, &plan);
  ASSERT_TRUE(sizes.ok()) << sizes.status();
  ASSERT_EQ(*sizes, nullptr);
  // Every expert's slices are its bytes: what the checkpoint holds beyond
  // them is the norm.
  EXPECT_EQ(plan.always_resident_bytes, hidden * sizeof(float));
  // A ring of one-expert sections and room for two experts in the cache.
  options.memory_budget = plan.minimum_budget + 2 * plan.expert_bytes;
  options.force_streaming = true;
  options.num_slots = 2;
  options.section_experts = 1;
  auto streamed =
      StreamedExperts::Create(fused.spec(), fused.checkpoint(), fused.weights(),
                              options, &stats, &plan);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  ASSERT_NE(*streamed, nullptr);
  ASSERT_EQ(plan.resident_experts, 0);
  StreamedOnlyBackend streamed_only(fused.checkpoint());

  size_t next = 0;
  for (const auto& experts : steps) {
    std::vector<moe::ExpertTask> tasks;
    std::vector<std::vector<float>> out;
    for (int32_t e : experts) {
      const int64_t n = 1 + e;
      out.emplace_back(n * hidden, 0.f);
      tasks.push_back({e,
                       {x[next + tasks.size()].data(), n, hidden},
                       {out.back().data(), n, hidden}});
    }
    (*streamed)->BeginStep(static_cast<int64_t>(experts.size()));
    const absl::Status status = (*streamed)->Run(0, tasks, {}, streamed_only);
    (*streamed)->EndStep();
    ASSERT_TRUE(status.ok()) << status;
    for (size_t i = 0; i < experts.size(); ++i, ++next) {
      EXPECT_EQ(std::memcmp(out[i].data(), expected[next].data(),
                            out[i].size() * sizeof(float)),
                0)
          << "expert " << experts[i];
    }
  }
  EXPECT_GT(stats.sections_loaded, 0u);
  if (mode == RingMode::kExpert) {
    EXPECT_GT(stats.cache_hits, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(
    TypesAndModes, FusedExpertsTest,
    ::testing::Combine(::testing::Values(backend::WeightType::kMxfp4,
                                         backend::WeightType::kBF16),
                       ::testing::Values(RingMode::kLayer, RingMode::kExpert)),
    [](const auto& info) {
      return absl::StrCat(
          kernels::WeightTypeName(std::get<0>(info.param)),
          std::get<1>(info.param) == RingMode::kLayer ? "_layer" : "_expert");
    });

TEST(FusedExpertsNotInCheckpointTest, NamedWhenTheyMustStream) {
  FusedExperts fused(backend::WeightType::kMxfp4);
  ASSERT_NO_FATAL_FAILURE(
      fused.Write(absl::StrCat(std::getenv("TEST_TMPDIR"), "/fused_copied")));
  // Expert 2's down exponents rewritten on load into memory of their own.
  backend::Weight& down = fused.weights()->layers[0].experts[2].down;
  const std::vector<uint8_t> copy(
      down.exponents, down.exponents + backend::ExponentBytes(down));
  down.exponents = copy.data();

  StreamingOptions options;
  memory_ring::RingStats stats;
  memory_ring::PlacementPlan plan;
  auto resident =
      StreamedExperts::Create(fused.spec(), fused.checkpoint(), fused.weights(),
                              options, &stats, &plan);
  ASSERT_TRUE(resident.ok()) << resident.status();
  EXPECT_EQ(*resident, nullptr);
  options.memory_budget = plan.minimum_budget;
  options.force_streaming = true;
  auto streamed =
      StreamedExperts::Create(fused.spec(), fused.checkpoint(), fused.weights(),
                              options, &stats, &plan);
  ASSERT_FALSE(streamed.ok());
  EXPECT_EQ(streamed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(streamed.status().message().find("layer 0 expert 2"),
            std::string::npos)
      << streamed.status();
  EXPECT_NE(streamed.status().message().find("converted or rearranged"),
            std::string::npos)
      << streamed.status();
}

}  // namespace
}  // namespace ringmoe::runtime

// Faults under the memory ring: a checkpoint truncated underneath fails the
// step with an error naming the file, the engine stays usable, and once the
// file reads again so do the steps — with the same results.
#include "engine/runtime/streamed_experts.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

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

}  // namespace
}  // namespace ringmoe::runtime

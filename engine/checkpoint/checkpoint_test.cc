#include "engine/checkpoint/checkpoint.h"

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/checkpoint/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmoe::checkpoint {
namespace {

using ::ringmoe::checkpoint::testing::TempPath;
using ::ringmoe::checkpoint::testing::WriteFileOrDie;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kModels[] = "tests/testdata/moe-tiny/";

std::unique_ptr<Checkpoint> OpenOrDie(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Checkpoint>> checkpoint =
      Checkpoint::Open(dir);
  EXPECT_TRUE(checkpoint.ok()) << checkpoint.status();
  return checkpoint.ok() ? *std::move(checkpoint) : nullptr;
}

void ExpectTensor(const Checkpoint& checkpoint, const std::string& name,
                  std::vector<int64_t> shape) {
  absl::StatusOr<const TensorView*> view = checkpoint.Get(name);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ((*view)->dtype, DType::kBF16) << name;
  EXPECT_EQ((*view)->shape, shape) << name;
  EXPECT_EQ((*view)->num_bytes, 2 * (*view)->NumElements()) << name;
}

// Shapes every moe-tiny model shares (README: vocab 512, hidden 64, 4 heads
// of 16, 2 kv heads, 8 experts).
void ExpectCommonTensors(const Checkpoint& c) {
  ExpectTensor(c, "model.embed_tokens.weight", {512, 64});
  ExpectTensor(c, "lm_head.weight", {512, 64});
  ExpectTensor(c, "model.norm.weight", {64});
  for (int layer = 0; layer < 2; ++layer) {
    const std::string p = absl::StrCat("model.layers.", layer, ".");
    ExpectTensor(c, p + "input_layernorm.weight", {64});
    ExpectTensor(c, p + "self_attn.q_proj.weight", {64, 64});
    ExpectTensor(c, p + "self_attn.k_proj.weight", {32, 64});
    ExpectTensor(c, p + "self_attn.v_proj.weight", {32, 64});
    ExpectTensor(c, p + "self_attn.o_proj.weight", {64, 64});
  }
}

void ExpectConsistent(const Checkpoint& c) {
  uint64_t total = 0;
  const std::vector<std::string> names = c.TensorNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(names.size(), c.num_tensors());
  for (const std::string& name : names) {
    const TensorView* view = c.Find(name);
    ASSERT_NE(view, nullptr);
    EXPECT_EQ(view->name, name);
    total += view->num_bytes;
  }
  EXPECT_EQ(total, c.total_bytes());
}

TEST(CheckpointTest, Mixtral) {
  std::unique_ptr<Checkpoint> c = OpenOrDie(absl::StrCat(kModels, "mixtral"));
  ASSERT_NE(c, nullptr);
  ExpectCommonTensors(*c);
  ExpectConsistent(*c);
  EXPECT_EQ(c->files().size(), 1u);
  EXPECT_EQ(c->num_tensors(), 65u);
  EXPECT_EQ(c->total_bytes(), 772736u);
  ExpectTensor(*c, "model.layers.1.block_sparse_moe.gate.weight", {8, 64});
  ExpectTensor(*c, "model.layers.0.block_sparse_moe.experts.7.w1.weight",
               {96, 64});
  ExpectTensor(*c, "model.layers.0.block_sparse_moe.experts.7.w3.weight",
               {96, 64});
  ExpectTensor(*c, "model.layers.0.block_sparse_moe.experts.7.w2.weight",
               {64, 96});
  EXPECT_EQ(c->Find("model.layers.0.block_sparse_moe.experts.8.w1.weight"),
            nullptr);
  EXPECT_EQ(c->files()[0]->metadata().at("format"), "pt");
}

TEST(CheckpointTest, Qwen2Moe) {
  std::unique_ptr<Checkpoint> c = OpenOrDie(absl::StrCat(kModels, "qwen2_moe"));
  ASSERT_NE(c, nullptr);
  ExpectCommonTensors(*c);
  ExpectConsistent(*c);
  ExpectTensor(*c, "model.layers.0.mlp.gate.weight", {8, 64});
  ExpectTensor(*c, "model.layers.0.mlp.experts.3.gate_proj.weight", {96, 64});
  ExpectTensor(*c, "model.layers.0.mlp.experts.3.down_proj.weight", {64, 96});
  ExpectTensor(*c, "model.layers.1.mlp.shared_expert.up_proj.weight",
               {128, 64});
  ExpectTensor(*c, "model.layers.1.mlp.shared_expert_gate.weight", {1, 64});
  ExpectTensor(*c, "model.layers.1.self_attn.q_proj.bias", {64});
  ExpectTensor(*c, "model.layers.1.self_attn.k_proj.bias", {32});
  EXPECT_EQ(c->Find("model.layers.1.self_attn.o_proj.bias"), nullptr);
}

TEST(CheckpointTest, Qwen3Moe) {
  std::unique_ptr<Checkpoint> c = OpenOrDie(absl::StrCat(kModels, "qwen3_moe"));
  ASSERT_NE(c, nullptr);
  ExpectCommonTensors(*c);
  ExpectConsistent(*c);
  ExpectTensor(*c, "model.layers.0.self_attn.q_norm.weight", {16});
  ExpectTensor(*c, "model.layers.0.self_attn.k_norm.weight", {16});
  ExpectTensor(*c, "model.layers.1.mlp.experts.0.up_proj.weight", {96, 64});
}

TEST(CheckpointTest, Olmoe) {
  std::unique_ptr<Checkpoint> c = OpenOrDie(absl::StrCat(kModels, "olmoe"));
  ASSERT_NE(c, nullptr);
  ExpectCommonTensors(*c);
  ExpectConsistent(*c);
  ExpectTensor(*c, "model.layers.0.self_attn.q_norm.weight", {64});
  ExpectTensor(*c, "model.layers.0.self_attn.k_norm.weight", {32});
  ExpectTensor(*c, "model.layers.1.mlp.gate.weight", {8, 64});
}

TEST(CheckpointTest, ShardedMatchesSingleFile) {
  std::unique_ptr<Checkpoint> single =
      OpenOrDie(absl::StrCat(kModels, "mixtral"));
  std::unique_ptr<Checkpoint> sharded =
      OpenOrDie(absl::StrCat(kModels, "mixtral_sharded"));
  ASSERT_NE(single, nullptr);
  ASSERT_NE(sharded, nullptr);
  EXPECT_EQ(sharded->files().size(), 2u);
  EXPECT_EQ(sharded->TensorNames(), single->TensorNames());
  EXPECT_EQ(sharded->total_bytes(), single->total_bytes());
  for (const std::string& name : single->TensorNames()) {
    const TensorView* a = single->Find(name);
    const TensorView* b = sharded->Find(name);
    ASSERT_NE(b, nullptr) << name;
    EXPECT_EQ(a->dtype, b->dtype) << name;
    EXPECT_EQ(a->shape, b->shape) << name;
    ASSERT_EQ(a->num_bytes, b->num_bytes) << name;
    EXPECT_EQ(std::memcmp(a->data, b->data, a->num_bytes), 0) << name;
  }
  // The split falls inside layer 0's experts.
  EXPECT_NE(sharded->Find("model.layers.0.block_sparse_moe.experts.0.w1.weight")
                ->file_path,
            sharded->Find("model.layers.0.block_sparse_moe.experts.7.w1.weight")
                ->file_path);
}

// gpt-oss ships three shards named model-0000{0,1,2}-of-00002: they are
// found through the index, whatever their names say, and a tensor and its
// companion (MXFP4 blocks and scales) may lie in different shards.
TEST(CheckpointTest, ShardsFoundThroughTheIndexWhateverTheirNames) {
  std::unique_ptr<Checkpoint> c = OpenOrDie(absl::StrCat(kModels, "gpt_oss"));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->files().size(), 3u);
  EXPECT_EQ(c->TensorNames().size(), 79u);
  const TensorView* blocks =
      c->Find("model.layers.1.mlp.experts.gate_up_proj_blocks");
  const TensorView* scales =
      c->Find("model.layers.1.mlp.experts.gate_up_proj_scales");
  ASSERT_NE(blocks, nullptr);
  ASSERT_NE(scales, nullptr);
  EXPECT_EQ(blocks->dtype, DType::kU8);
  EXPECT_EQ(blocks->shape, (std::vector<int64_t>{8, 320, 3, 16}));
  EXPECT_EQ(scales->shape, (std::vector<int64_t>{8, 320, 3}));
  EXPECT_NE(blocks->file_path, scales->file_path);
}

TEST(CheckpointTest, GetNamesDirectoryAndTensor) {
  const std::string dir = absl::StrCat(kModels, "olmoe");
  std::unique_ptr<Checkpoint> c = OpenOrDie(dir);
  ASSERT_NE(c, nullptr);
  absl::StatusOr<const TensorView*> view = c->Get("model.layers.9.nope");
  EXPECT_EQ(view.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(view.status().message()),
              AllOf(HasSubstr(dir), HasSubstr("model.layers.9.nope")));
}

// Expects Locate to find `num_bytes` bytes from `skip` into `view`'s data in
// the file that holds the tensor, at the matching offset.
void ExpectLocated(const Checkpoint& c, const TensorView& view, uint64_t skip,
                   uint64_t num_bytes) {
  const std::optional<Checkpoint::FileLocation> at =
      c.Locate(view.data + skip, num_bytes);
  ASSERT_TRUE(at.has_value()) << view.name << " +" << skip;
  ASSERT_GE(at->file, 0);
  ASSERT_LT(at->file, static_cast<int>(c.files().size()));
  EXPECT_EQ(c.files()[at->file]->path(), view.file_path) << view.name;
  EXPECT_EQ(at->offset, view.file_offset + skip) << view.name;
}

TEST(CheckpointTest, LocateFindsRangesInsideOneTensor) {
  std::unique_ptr<Checkpoint> c = OpenOrDie(absl::StrCat(kModels, "mixtral"));
  ASSERT_NE(c, nullptr);
  for (const std::string& name : c->TensorNames()) {
    const TensorView& t = *c->Find(name);
    ExpectLocated(*c, t, 0, t.num_bytes);
    ExpectLocated(*c, t, t.num_bytes / 3, t.num_bytes / 3);
    ExpectLocated(*c, t, t.num_bytes - 1, 1);
    // Past the tensor's end, whatever follows it.
    EXPECT_FALSE(c->Locate(t.data + 1, t.num_bytes).has_value()) << name;
    EXPECT_FALSE(c->Locate(t.data + t.num_bytes - 1, 2).has_value()) << name;
  }
  const TensorView& t = *c->Find("model.layers.0.block_sparse_moe.gate.weight");
  EXPECT_FALSE(c->Locate(t.data, 0).has_value());
  // A copy of a tensor's bytes is not the checkpoint's.
  const std::vector<uint8_t> copy(t.data, t.data + t.num_bytes);
  EXPECT_FALSE(c->Locate(copy.data(), copy.size()).has_value());
  // Nor is the header before the first tensor.
  const TensorView* first = &c->files()[0]->tensors().front();
  EXPECT_FALSE(c->Locate(first->data - 1, 1).has_value());
  EXPECT_FALSE(c->Locate(first->data - 1, 2).has_value());
}

TEST(CheckpointTest, LocateFindsTheShard) {
  std::unique_ptr<Checkpoint> c =
      OpenOrDie(absl::StrCat(kModels, "mixtral_sharded"));
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->files().size(), 2u);
  for (const char* name :
       {"model.layers.0.block_sparse_moe.experts.0.w1.weight",
        "model.layers.0.block_sparse_moe.experts.7.w1.weight",
        "model.layers.1.block_sparse_moe.experts.3.w2.weight"}) {
    const TensorView& t = *c->Find(name);
    ExpectLocated(*c, t, 0, t.num_bytes);
    ExpectLocated(*c, t, 64, t.num_bytes - 128);
  }
  // Both shards are used.
  const auto file_of = [&](const char* name) {
    return c->Locate(c->Find(name)->data, 1)->file;
  };
  EXPECT_NE(file_of("model.layers.0.block_sparse_moe.experts.0.w1.weight"),
            file_of("model.layers.0.block_sparse_moe.experts.7.w1.weight"));
}

// One expert's part of a tensor fusing every expert of a layer (gpt-oss).
TEST(CheckpointTest, LocateFindsAnExpertInsideAFusedTensor) {
  std::unique_ptr<Checkpoint> c = OpenOrDie(absl::StrCat(kModels, "gpt_oss"));
  ASSERT_NE(c, nullptr);
  for (const char* name : {"model.layers.1.mlp.experts.gate_up_proj_blocks",
                           "model.layers.1.mlp.experts.gate_up_proj_scales"}) {
    const TensorView& t = *c->Find(name);
    const uint64_t expert_bytes = t.num_bytes / t.shape[0];
    for (int e = 0; e < t.shape[0]; ++e) {
      ExpectLocated(*c, t, e * expert_bytes, expert_bytes);
    }
  }
}

// Builds checkpoint directories under $TEST_TMPDIR from small tensors.
class BadCheckpointTest : public ::testing::Test {
 protected:
  std::string Dir(absl::string_view name) {
    return TempPath(absl::StrCat("checkpoints/", name));
  }

  void WriteShard(const std::string& dir, const std::string& file,
                  const std::vector<std::string>& tensors) {
    std::vector<TensorToWrite> to_write;
    for (const std::string& name : tensors) {
      to_write.push_back({name, DType::kF32, {2}, bytes_});
    }
    WriteFileOrDie(dir + "/.keep", "");
    absl::Status status = WriteSafetensors(dir + "/" + file, to_write);
    ASSERT_TRUE(status.ok()) << status;
  }

  void WriteIndex(const std::string& dir,
                  const std::map<std::string, std::string>& weight_map) {
    std::string json = R"({"metadata":{"total_size":0},"weight_map":{)";
    bool first = true;
    for (const auto& [tensor, shard] : weight_map) {
      absl::StrAppend(&json, first ? "" : ",", "\"", tensor, "\":\"", shard,
                      "\"");
      first = false;
    }
    json += "}}";
    WriteFileOrDie(dir + "/model.safetensors.index.json", json);
  }

  std::string OpenError(const std::string& dir) {
    absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir);
    return c.ok() ? "" : std::string(c.status().message());
  }

  // x and y in s1.safetensors, z in s2.safetensors, and their index.
  void WriteTwoShards(const std::string& dir) {
    WriteShard(dir, "s1.safetensors", {"x", "y"});
    WriteShard(dir, "s2.safetensors", {"z"});
    WriteIndex(dir, {{"x", "s1.safetensors"},
                     {"y", "s1.safetensors"},
                     {"z", "s2.safetensors"}});
  }

  const std::string bytes_ = std::string(8, '\x01');
};

TEST_F(BadCheckpointTest, SyntheticShardsOpen) {
  const std::string dir = Dir("good");
  WriteTwoShards(dir);
  std::unique_ptr<Checkpoint> c = OpenOrDie(dir);
  ASSERT_NE(c, nullptr);
  EXPECT_THAT(c->TensorNames(), ElementsAre("x", "y", "z"));
  EXPECT_EQ(c->total_bytes(), 24u);
}

TEST_F(BadCheckpointTest, LocateDoesNotSpanAdjacentTensors) {
  const std::string dir = Dir("adjacent");
  WriteTwoShards(dir);
  std::unique_ptr<Checkpoint> c = OpenOrDie(dir);
  ASSERT_NE(c, nullptr);
  const TensorView& x = *c->Find("x");
  const TensorView& y = *c->Find("y");
  ASSERT_EQ(x.data + x.num_bytes, y.data);  // packed back to back
  ExpectLocated(*c, x, 0, 8);
  ExpectLocated(*c, y, 4, 4);
  ExpectLocated(*c, *c->Find("z"), 2, 6);
  EXPECT_FALSE(c->Locate(x.data + 4, 8).has_value());
  EXPECT_FALSE(c->Locate(x.data, 16).has_value());
}

TEST_F(BadCheckpointTest, IndexPointsAtMissingShard) {
  const std::string dir = Dir("missing_shard");
  WriteShard(dir, "s1.safetensors", {"x"});
  WriteIndex(dir, {{"x", "s1.safetensors"}, {"y", "s2.safetensors"}});
  EXPECT_THAT(
      OpenError(dir),
      AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("\"y\""),
            HasSubstr("s2.safetensors"), HasSubstr("No such file")));
}

TEST_F(BadCheckpointTest, IndexEntryMissingInShard) {
  const std::string dir = Dir("missing_entry");
  WriteShard(dir, "s1.safetensors", {"x"});
  WriteIndex(dir, {{"x", "s1.safetensors"}, {"w", "s1.safetensors"}});
  EXPECT_THAT(OpenError(dir),
              AllOf(HasSubstr("\"w\""), HasSubstr("s1.safetensors"),
                    HasSubstr("does not hold it")));
}

TEST_F(BadCheckpointTest, ShardHoldsTensorTheIndexDoesNotAssignToIt) {
  const std::string dir = Dir("extra_tensor");
  WriteShard(dir, "s1.safetensors", {"x", "stray"});
  WriteShard(dir, "s2.safetensors", {"y"});
  WriteIndex(dir, {{"x", "s1.safetensors"}, {"y", "s2.safetensors"}});
  EXPECT_THAT(OpenError(dir),
              AllOf(HasSubstr("s1.safetensors"), HasSubstr("\"stray\""),
                    HasSubstr("does not list")));

  const std::string dir2 = Dir("tensor_in_two_shards");
  WriteShard(dir2, "s1.safetensors", {"x"});
  WriteShard(dir2, "s2.safetensors", {"x", "y"});
  WriteIndex(dir2, {{"x", "s1.safetensors"}, {"y", "s2.safetensors"}});
  EXPECT_THAT(OpenError(dir2),
              AllOf(HasSubstr("s2.safetensors"), HasSubstr("\"x\""),
                    HasSubstr("assigns to shard \"s1.safetensors\"")));
}

TEST_F(BadCheckpointTest, CorruptShardIsNamed) {
  const std::string dir = Dir("corrupt_shard");
  WriteShard(dir, "s1.safetensors", {"x"});
  WriteFileOrDie(dir + "/s2.safetensors", "garbage!garbage");
  WriteIndex(dir, {{"x", "s1.safetensors"}, {"y", "s2.safetensors"}});
  EXPECT_THAT(
      OpenError(dir),
      AllOf(HasSubstr("s2.safetensors"), HasSubstr("\"y\""),
            HasSubstr("cannot be read"), HasSubstr("exceeds the limit")));
}

TEST_F(BadCheckpointTest, BadIndexFiles) {
  const std::string dir = Dir("bad_index");
  WriteShard(dir, "s1.safetensors", {"x"});
  WriteFileOrDie(
      dir + "/model.safetensors.index.json",
      R"({"weight_map":{"x":"s1.safetensors","x":"s1.safetensors"}})");
  EXPECT_THAT(OpenError(dir), AllOf(HasSubstr("model.safetensors.index.json"),
                                    HasSubstr("duplicate key \"x\"")));
  WriteFileOrDie(dir + "/model.safetensors.index.json", R"({"weight_map":)");
  EXPECT_THAT(OpenError(dir), HasSubstr("parse error"));
  WriteFileOrDie(dir + "/model.safetensors.index.json", R"({"metadata":{}})");
  EXPECT_THAT(OpenError(dir), HasSubstr("no \"weight_map\""));
  WriteFileOrDie(dir + "/model.safetensors.index.json",
                 R"({"weight_map":{"x":"../s1.safetensors"}})");
  EXPECT_THAT(OpenError(dir),
              AllOf(HasSubstr("\"x\""), HasSubstr("shard file name")));
  WriteFileOrDie(dir + "/model.safetensors.index.json",
                 R"({"weight_map":{"x":7}})");
  EXPECT_THAT(OpenError(dir), HasSubstr("\"x\""));
}

TEST_F(BadCheckpointTest, LoneSafetensorsFile) {
  const std::string dir = Dir("lone");
  WriteShard(dir, "weights.safetensors", {"x"});
  std::unique_ptr<Checkpoint> c = OpenOrDie(dir);
  ASSERT_NE(c, nullptr);
  EXPECT_THAT(c->TensorNames(), ElementsAre("x"));

  WriteShard(dir, "other.safetensors", {"y"});
  EXPECT_THAT(OpenError(dir),
              AllOf(HasSubstr(dir), HasSubstr("other.safetensors"),
                    HasSubstr("weights.safetensors")));
  // model.safetensors wins over the others.
  WriteShard(dir, "model.safetensors", {"m"});
  c = OpenOrDie(dir);
  ASSERT_NE(c, nullptr);
  EXPECT_THAT(c->TensorNames(), ElementsAre("m"));
}

TEST_F(BadCheckpointTest, NoWeights) {
  const std::string dir = Dir("empty");
  WriteFileOrDie(dir + "/config.json", "{}");
  EXPECT_THAT(OpenError(dir),
              AllOf(HasSubstr(dir), HasSubstr("model.safetensors")));
  EXPECT_THAT(OpenError(dir + "/config.json"), HasSubstr("not a directory"));
  EXPECT_THAT(OpenError(Dir("nope")), HasSubstr("nope"));
}

}  // namespace
}  // namespace ringmoe::checkpoint

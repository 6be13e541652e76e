// Binding checks: a checkpoint missing a tensor, or holding one of the wrong
// shape or dtype, is refused with an error naming it.
#include "engine/model/model_weights.h"

#include <cstdlib>
#include <filesystem>
#include <functional>

#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/model/config.h"
#include "gtest/gtest.h"

namespace ringmoe::model {
namespace {

namespace fs = std::filesystem;
using checkpoint::TensorToWrite;

// Copies moe-tiny/qwen2_moe into a temporary directory with its tensors
// passed through `edit` first.
std::string EditedModel(
    const std::string& name,
    const std::function<void(std::vector<TensorToWrite>&)>& edit) {
  const std::string src = "tests/testdata/moe-tiny/qwen2_moe";
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  fs::create_directories(dir);
  fs::copy_file(src + "/config.json", dir + "/config.json",
                fs::copy_options::overwrite_existing);
  auto file = checkpoint::SafetensorsFile::Open(src + "/model.safetensors");
  EXPECT_TRUE(file.ok()) << file.status();
  std::vector<TensorToWrite> tensors;
  for (const auto& t : (*file)->tensors()) {
    tensors.push_back({t.name, t.dtype, t.shape,
                       absl::string_view(reinterpret_cast<const char*>(t.data),
                                         t.num_bytes)});
  }
  edit(tensors);
  EXPECT_TRUE(
      checkpoint::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  return dir;
}

absl::Status Bind(const std::string& dir) {
  auto spec = LoadModelConfig(dir);
  if (!spec.ok()) return spec.status();
  auto ckpt = checkpoint::Checkpoint::Open(dir);
  if (!ckpt.ok()) return ckpt.status();
  auto arch = FindArchitecture(spec->architecture);
  if (!arch.ok()) return arch.status();
  return BindModelWeights(*spec, **arch, **ckpt).status();
}

TEST(ModelWeightsTest, BindsEveryTinyModel) {
  for (const char* m :
       {"mixtral", "mixtral_sharded", "qwen2_moe", "qwen3_moe", "olmoe"}) {
    EXPECT_TRUE(Bind(std::string("tests/testdata/moe-tiny/") + m).ok()) << m;
  }
}

TEST(ModelWeightsTest, MissingTensorIsNamed) {
  const std::string missing = "model.layers.1.mlp.experts.5.up_proj.weight";
  auto dir = EditedModel("missing", [&](auto& tensors) {
    tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                 [&](auto& t) { return t.name == missing; }),
                  tensors.end());
  });
  absl::Status status = Bind(dir);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("missing tensor '" + missing + "'"),
            std::string::npos)
      << status;
  EXPECT_NE(status.message().find(dir), std::string::npos) << status;
}

TEST(ModelWeightsTest, WrongShapeIsNamed) {
  const std::string bias = "model.layers.0.self_attn.k_proj.bias";
  auto dir = EditedModel("shape", [&](auto& tensors) {
    for (auto& t : tensors) {
      if (t.name == bias) {
        t.shape = {2, 16};  // same bytes, [32] expected
      }
    }
  });
  absl::Status status = Bind(dir);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("tensor '" + bias +
                                  "' has shape [2, 16], expected [32]"),
            std::string::npos)
      << status;
}

TEST(ModelWeightsTest, WrongDtypeIsNamed) {
  const std::string router = "model.layers.0.mlp.gate.weight";
  auto dir = EditedModel("dtype", [&](auto& tensors) {
    for (auto& t : tensors) {
      if (t.name == router) t.dtype = checkpoint::DType::kI16;
    }
  });
  absl::Status status = Bind(dir);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(router), std::string::npos) << status;
  EXPECT_NE(status.message().find("I16"), std::string::npos) << status;
}

}  // namespace
}  // namespace ringmoe::model

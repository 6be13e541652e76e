// Binding checks: a checkpoint missing a tensor, or holding one of the wrong
// shape or dtype, is refused with an error naming it.
#include "engine/model/model_weights.h"

#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <utility>

#include "base/file.h"
#include "base/status_macros.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/host_weight.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/model/config.h"
#include "gtest/gtest.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::model {
namespace {

namespace fs = std::filesystem;
using checkpoint::TensorToWrite;

// Copies moe-tiny/`model` into a temporary directory with its tensors
// passed through `edit` first and its config.json through `edit_config`.
std::string EditedModel(
    const std::string& name,
    const std::function<void(std::vector<TensorToWrite>&)>& edit,
    const std::string& model = "qwen2_moe",
    const std::function<void(std::string&)>& edit_config = nullptr) {
  const std::string src = "tests/testdata/moe-tiny/" + model;
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  fs::create_directories(dir);
  std::string config = ReadFileToString(src + "/config.json").value_or("");
  if (edit_config) edit_config(config);
  std::ofstream(dir + "/config.json") << config;
  // Every shard's tensors, written back as one file.
  auto source = checkpoint::Checkpoint::Open(src);
  EXPECT_TRUE(source.ok()) << source.status();
  std::vector<TensorToWrite> tensors;
  for (const std::string& name : (*source)->TensorNames()) {
    const checkpoint::TensorView& t = *(*source)->Find(name);
    tensors.push_back({t.name, t.dtype, t.shape,
                       absl::string_view(reinterpret_cast<const char*>(t.data),
                                         t.num_bytes)});
  }
  edit(tensors);
  EXPECT_TRUE(
      checkpoint::WriteSafetensors(dir + "/model.safetensors", tensors).ok());
  return dir;
}

// The weights of the checkpoint in `dir` (which must outlive them).
absl::StatusOr<ModelWeights> BindDir(
    const std::string& dir,
    std::unique_ptr<checkpoint::Checkpoint>* checkpoint) {
  ASSIGN_OR_RETURN(ModelSpec spec, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(*checkpoint, checkpoint::Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(const Architecture* arch,
                   FindArchitecture(spec.architecture));
  return BindModelWeights(spec, *arch, **checkpoint);
}

absl::Status Bind(const std::string& dir) {
  std::unique_ptr<checkpoint::Checkpoint> checkpoint;
  return BindDir(dir, &checkpoint).status();
}

TEST(ModelWeightsTest, BindsEveryTinyModel) {
  for (const char* m : {"mixtral", "mixtral_sharded", "qwen2_moe", "qwen3_moe",
                        "olmoe", "deepseek_v3", "deepseek_v3_fp8",
                        "deepseek_v2_lite", "gpt_oss", "gpt_oss_bf16"}) {
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

// DeepSeek-V3's FP8 layout: weights stay F8_E4M3 with their block scales.
TEST(ModelWeightsTest, Fp8WeightsKeepTheirStoredFormat) {
  std::unique_ptr<checkpoint::Checkpoint> checkpoint;
  auto weights =
      BindDir("tests/testdata/moe-tiny/deepseek_v3_fp8", &checkpoint);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const Weight& kv_a = weights->layers[1].mla.kv_a;  // [40, 64]
  EXPECT_EQ(kv_a.type, kernels::WeightType::kFp8E4M3);
  EXPECT_EQ(kv_a.block_rows, 32);
  EXPECT_EQ(backend::BlockScaleBytes(kv_a), 4 * 4);  // partial edge blocks
  const Weight& expert = weights->layers[2].experts[7].down;
  EXPECT_EQ(expert.type, kernels::WeightType::kFp8E4M3);
  EXPECT_EQ(backend::StoredBytes(expert), 64 * 40 + 4 * 4);
  // The router and norms stay as stored too (BF16 / F32).
  EXPECT_EQ(weights->layers[1].router.type, kernels::WeightType::kBF16);
  EXPECT_EQ(weights->layers[1].expert_score_bias.size, 16);
  // Same values as the BF16 directory: fp8 * scale is exact there.
  std::unique_ptr<checkpoint::Checkpoint> bf16_checkpoint;
  auto bf16 = BindDir("tests/testdata/moe-tiny/deepseek_v3", &bf16_checkpoint);
  ASSERT_TRUE(bf16.ok());
  std::vector<float> a(40), b(40);
  for (int64_t r = 0; r < 64; ++r) {
    kernels::ReadRow(backend::AsMatrix(expert), r, a.data());
    kernels::ReadRow(backend::AsMatrix(bf16->layers[2].experts[7].down), r,
                     b.data());
    EXPECT_EQ(a, b) << "row " << r;
  }
}

TEST(ModelWeightsTest, Fp8ScaleProblemsAreNamed) {
  const std::string weight = "model.layers.1.mlp.experts.3.up_proj.weight";
  const std::string scale = weight + "_scale_inv";
  auto missing = EditedModel(
      "fp8_missing",
      [&](auto& tensors) {
        tensors.erase(std::remove_if(tensors.begin(), tensors.end(),
                                     [&](auto& t) { return t.name == scale; }),
                      tensors.end());
      },
      "deepseek_v3_fp8");
  absl::Status status = Bind(missing);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("F8_E4M3 tensor '" + weight +
                                  "' has no block scales: missing tensor '" +
                                  scale + "'"),
            std::string::npos)
      << status;

  auto shape = EditedModel(
      "fp8_shape",
      [&](auto& tensors) {
        for (auto& t : tensors) {
          if (t.name == scale) t.shape = {4, 1};  // same floats, [2, 2] due
        }
      },
      "deepseek_v3_fp8");
  status = Bind(shape);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("tensor '" + scale +
                                  "' has shape [4, 1], expected [2, 2]"),
            std::string::npos)
      << status;

  auto dtype = EditedModel(
      "fp8_dtype",
      [&](auto& tensors) {
        for (auto& t : tensors) {
          if (t.name == scale) {
            t.dtype = checkpoint::DType::kBF16;
            t.shape = {2, 4};  // the same bytes as 2 x 4 halves
          }
        }
      },
      "deepseek_v3_fp8");
  status = Bind(dtype);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find(scale), std::string::npos) << status;

  auto no_config = EditedModel(
      "fp8_no_config", [](auto&) {}, "deepseek_v3_fp8",
      [](std::string& c) {
        const size_t at = c.find("\"quantization_config\"");
        ASSERT_NE(at, std::string::npos);
        c.replace(at, std::string("\"quantization_config\"").size(),
                  "\"unused_quantization\"");
      });
  status = Bind(no_config);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("is F8_E4M3 but config.json has no "
                                  "quantization_config"),
            std::string::npos)
      << status;
}

// gpt-oss: each expert is a view into the layer's fused MXFP4 tensors,
// and the same weights as the BF16 directory's [in, out] tensors (an exact
// dequantization), transposed.
TEST(ModelWeightsTest, GptOssExpertsAreSlicedFromFusedTensors) {
  std::unique_ptr<checkpoint::Checkpoint> checkpoint, bf16_checkpoint;
  auto weights = BindDir("tests/testdata/moe-tiny/gpt_oss", &checkpoint);
  ASSERT_TRUE(weights.ok()) << weights.status();
  auto bf16 = BindDir("tests/testdata/moe-tiny/gpt_oss_bf16", &bf16_checkpoint);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  for (int l = 0; l < 4; ++l) {
    const checkpoint::TensorView* blocks = checkpoint->Find(
        "model.layers." + std::to_string(l) + ".mlp.experts.down_proj_blocks");
    const checkpoint::TensorView* scales = checkpoint->Find(
        "model.layers." + std::to_string(l) + ".mlp.experts.down_proj_scales");
    ASSERT_NE(blocks, nullptr);
    ASSERT_NE(scales, nullptr);
    for (int e = 0; e < 8; ++e) {
      const MlpWeights& mx = weights->layers[l].experts[e];
      const MlpWeights& bf = bf16->layers[l].experts[e];
      ASSERT_TRUE(mx.fused());
      EXPECT_EQ(mx.gate_up.type, kernels::WeightType::kMxfp4);
      EXPECT_EQ(bf.gate_up.type, kernels::WeightType::kBF16);
      EXPECT_EQ(mx.down.data, blocks->data + e * 96 * 5 * 16);
      EXPECT_EQ(mx.down.exponents, scales->data + e * 96 * 5);
      EXPECT_EQ(mx.activation.kind,
                backend::GatedActivation::Kind::kClampedSwiglu);
      EXPECT_EQ(mx.gate_up_bias.size, 320);
      EXPECT_EQ(mx.down_bias.size, 96);
      for (const auto& [a, b] :
           {std::pair{&mx.gate_up, &bf.gate_up}, {&mx.down, &bf.down}}) {
        ASSERT_EQ(a->rows, b->rows);
        ASSERT_EQ(a->cols, b->cols);
        std::vector<float> x(a->cols), y(b->cols);
        for (int64_t r = 0; r < a->rows; ++r) {
          kernels::ReadRow(backend::AsMatrix(*a), r, x.data());
          kernels::ReadRow(backend::AsMatrix(*b), r, y.data());
          ASSERT_EQ(x, y) << "layer " << l << " expert " << e << " row " << r;
        }
      }
      for (int64_t i = 0; i < 320; ++i) {
        ASSERT_EQ(mx.gate_up_bias.data[i], bf.gate_up_bias.data[i]);
      }
    }
  }
}

TEST(ModelWeightsTest, GptOssFusedTensorProblemsAreNamed) {
  const std::string stem = "model.layers.1.mlp.experts.gate_up_proj";
  const std::string blocks = stem + "_blocks", scales = stem + "_scales";
  struct Case {
    std::string name, model;
    std::function<void(std::vector<TensorToWrite>&)> edit;
    std::function<void(std::string&)> edit_config;
    std::string expected;
  };
  const auto erase = [](const std::string& name) {
    return [name](std::vector<TensorToWrite>& tensors) {
      tensors.erase(std::remove_if(
                        tensors.begin(), tensors.end(),
                        [&](const TensorToWrite& t) { return t.name == name; }),
                    tensors.end());
    };
  };
  const auto retype = [](const std::string& name, checkpoint::DType dtype,
                         std::vector<int64_t> shape) {
    return [=](std::vector<TensorToWrite>& tensors) {
      for (TensorToWrite& t : tensors) {
        if (t.name == name) t.dtype = dtype, t.shape = shape;
      }
    };
  };
  const std::vector<Case> cases = {
      {"mx_no_scales", "gpt_oss", erase(scales), nullptr,
       "MXFP4 tensor '" + blocks + "' has no scales: missing tensor '" +
           scales + "'"},
      {"mx_scales_shape", "gpt_oss",
       retype(scales, checkpoint::DType::kU8, {8, 3, 320}), nullptr,
       "tensor '" + scales + "' has shape [8, 3, 320], expected [8, 320, 3]"},
      {"mx_blocks_shape", "gpt_oss",
       retype(blocks, checkpoint::DType::kU8, {8, 320, 48}), nullptr,
       "tensor '" + blocks +
           "' has shape [8, 320, 48], expected [8, 320, 3, 16]"},
      {"mx_blocks_dtype", "gpt_oss",
       retype(blocks, checkpoint::DType::kI8, {8, 320, 3, 16}), nullptr,
       "tensor '" + blocks + "' has dtype I8, expected U8"},
      {"mx_no_blocks", "gpt_oss", erase(blocks), nullptr,
       "missing tensor '" + blocks + "'"},
      {"mx_no_bias", "gpt_oss",
       erase("model.layers.2.mlp.experts.down_proj_bias"), nullptr,
       "missing tensor 'model.layers.2.mlp.experts.down_proj_bias'"},
      {"mx_no_config", "gpt_oss", [](auto&) {},
       [](std::string& c) {
         const size_t at = c.find("\"quantization_config\"");
         ASSERT_NE(at, std::string::npos);
         c.replace(at, std::string("\"quantization_config\"").size(),
                   "\"unused_quantization\"");
       },
       "tensor 'model.layers.0.mlp.experts.gate_up_proj_blocks' is MXFP4 but "
       "config.json has no quantization_config with quant_method mxfp4"},
      {"bf16_out_in", "gpt_oss_bf16",
       retype(stem, checkpoint::DType::kBF16, {8, 320, 96}), nullptr,
       "tensor '" + stem + "' has shape [8, 320, 96], expected [8, 96, 320]"},
      {"bf16_missing", "gpt_oss_bf16", erase(stem), nullptr,
       "missing tensor '" + stem + "'"},
  };
  for (const Case& c : cases) {
    const absl::Status status =
        Bind(EditedModel(c.name, c.edit, c.model, c.edit_config));
    ASSERT_FALSE(status.ok()) << c.name;
    EXPECT_NE(status.message().find(c.expected), std::string::npos)
        << c.name << ": " << status;
  }
}

TEST(ModelWeightsTest, ConvertsLmHeadOnlyWhenAsked) {
  std::unique_ptr<checkpoint::Checkpoint> checkpoint;
  for (bool lm_head : {false, true}) {
    auto weights = BindDir("tests/testdata/moe-tiny/qwen2_moe", &checkpoint);
    ASSERT_TRUE(weights.ok()) << weights.status();
    const kernels::WeightType stored = weights->lm_head.type;
    ASSERT_TRUE(ConvertWeights({kernels::WeightType::kInt8, false, lm_head, 32},
                               nullptr, &*weights)
                    .ok());
    EXPECT_EQ(weights->lm_head.type,
              lm_head ? kernels::WeightType::kInt8 : stored);
    EXPECT_EQ(weights->lm_head.group_size, lm_head ? 32 : 0);
    // Untied: the embedding keeps its checkpoint format.
    EXPECT_EQ(weights->embed_tokens.type, stored);
    EXPECT_EQ(weights->layers[0].q.type, stored);
  }
}

TEST(ModelWeightsTest, UploadedSelectionBiasesOutliveTheHostWeights) {
  std::unique_ptr<checkpoint::Checkpoint> checkpoint;
  auto host = BindDir("tests/testdata/moe-tiny/deepseek_v3", &checkpoint);
  ASSERT_TRUE(host.ok()) << host.status();
  std::vector<std::vector<float>> want;
  for (const LayerWeights& layer : host->layers) {
    const Vector& bias = layer.expert_score_bias;
    want.emplace_back(bias.data, bias.data + bias.size);
  }
  backend::CpuBackend cpu(/*pool=*/nullptr);
  auto uploaded = UploadWeights(*host, cpu);
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  // The host's owned buffers (where bound vectors live) are freed; the
  // checkpoint, which the CPU backend's matrices alias, stays.
  *host = ModelWeights();
  int biased_layers = 0;
  for (size_t l = 0; l < uploaded->layers.size(); ++l) {
    const Vector& bias = uploaded->layers[l].expert_score_bias;
    ASSERT_EQ(bias.size, static_cast<int64_t>(want[l].size())) << l;
    EXPECT_EQ(std::vector<float>(bias.data, bias.data + bias.size), want[l])
        << "layer " << l;
    biased_layers += bias.size > 0;
  }
  EXPECT_EQ(biased_layers, 2);
}

TEST(ModelWeightsTest, TiedEmbeddingFollowsLmHead) {
  auto dir = EditedModel("tied", [](auto& tensors) {
    tensors.erase(
        std::remove_if(tensors.begin(), tensors.end(),
                       [](auto& t) { return t.name == "lm_head.weight"; }),
        tensors.end());
  });
  std::string config = ReadFileToString(dir + "/config.json").value_or("");
  const std::string untied = "\"tie_word_embeddings\": false";
  ASSERT_NE(config.find(untied), std::string::npos);
  config.replace(config.find(untied), untied.size(),
                 "\"tie_word_embeddings\": true");
  std::ofstream(dir + "/config.json", std::ios::trunc) << config;
  std::unique_ptr<checkpoint::Checkpoint> checkpoint;
  auto weights = BindDir(dir, &checkpoint);
  ASSERT_TRUE(weights.ok()) << weights.status();
  ASSERT_EQ(weights->lm_head.data, weights->embed_tokens.data);
  ASSERT_TRUE(ConvertWeights({kernels::WeightType::kInt4, false, true, 64},
                             nullptr, &*weights)
                  .ok());
  EXPECT_EQ(weights->lm_head.type, kernels::WeightType::kInt4);
  EXPECT_EQ(weights->embed_tokens.data, weights->lm_head.data);
  EXPECT_EQ(weights->embed_tokens.scales, weights->lm_head.scales);
  EXPECT_EQ(weights->embed_tokens.group_size, 64);
}

int64_t MinorFaults() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Reads every byte of `m`'s data.
uint64_t SumBytes(const Weight& m) {
  const auto* p = static_cast<const volatile uint8_t*>(m.data);
  uint64_t sum = 0;
  const int64_t bytes =
      kernels::RowBytes(m.type, m.cols, m.group_size) * m.rows;
  for (int64_t i = 0; i < bytes; ++i) sum += p[i];
  return sum;
}

// After PrefaultWeights, reading the weights straight from a fresh mapping
// of the checkpoint takes no page faults; without it, it does.
TEST(ModelWeightsTest, PrefaultMapsInEveryMatrix) {
  for (const bool prefault : {false, true}) {
    std::unique_ptr<checkpoint::Checkpoint> checkpoint;
    auto weights = BindDir("tests/testdata/moe-tiny/mixtral", &checkpoint);
    ASSERT_TRUE(weights.ok()) << weights.status();
    if (prefault) PrefaultWeights(*weights);
    const int64_t before = MinorFaults();
    uint64_t sum = SumBytes(weights->lm_head);
    for (const LayerWeights& layer : weights->layers) {
      sum += SumBytes(layer.q) + SumBytes(layer.o) + SumBytes(layer.router);
      for (const MlpWeights& e : layer.experts) {
        sum += SumBytes(e.gate) + SumBytes(e.up) + SumBytes(e.down);
      }
    }
    const int64_t faults = MinorFaults() - before;
    EXPECT_NE(sum, 0u);
    if (prefault) {
      EXPECT_EQ(faults, 0) << "prefaulted";
    } else {
      EXPECT_GT(faults, 0) << "not prefaulted";
    }
  }
}

// The bytes of `m` (data and scales) as a string, and whether each part
// lies in `checkpoint`'s mapping.
struct MatrixBytes {
  std::string bytes;
  bool mapped = false;
};
MatrixBytes BytesOf(const checkpoint::Checkpoint& checkpoint, const Weight& m) {
  MatrixBytes out;
  const auto add = [&](const void* p, int64_t n) {
    if (p == nullptr || n == 0) return;
    out.bytes.append(static_cast<const char*>(p), n);
    out.mapped |= checkpoint.Locate(p, n).has_value();
  };
  add(m.data, backend::DataBytes(m));
  add(m.scales, backend::GroupScaleBytes(m));
  add(m.block_scales, backend::BlockScaleBytes(m));
  add(m.exponents, backend::ExponentBytes(m));
  return out;
}

// Every matrix of `weights` with its name, the embedding first.
std::vector<std::pair<std::string, const Weight*>> NamedMatrices(
    const ModelWeights& weights) {
  std::vector<std::pair<std::string, const Weight*>> out = {
      {"embed", &weights.embed_tokens}, {"lm_head", &weights.lm_head}};
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const LayerWeights& layer = weights.layers[l];
    const std::string at = "layer " + std::to_string(l);
    for (const Weight* m : AttentionMatrices(layer)) {
      out.push_back({at + " attention", m});
    }
    out.push_back({at + " router", &layer.router});
    const auto mlp = [&](const MlpWeights& w, const std::string& name) {
      for (const Weight* m : MlpMatrices(const_cast<MlpWeights*>(&w))) {
        out.push_back({at + " " + name, m});
      }
    };
    for (size_t e = 0; e < layer.experts.size(); ++e) {
      mlp(layer.experts[e], "expert " + std::to_string(e));
    }
    if (layer.has_shared_expert) mlp(layer.shared_expert, "shared expert");
    if (!layer.is_moe) mlp(layer.dense_mlp, "dense MLP");
  }
  return out;
}

// CopyOutOfCheckpoint moves every matrix it is given out of the mapping,
// bytes unchanged (fp8 block scales, mxfp4 exponents and fused experts'
// slices included), and leaves the routed experts it is not given where
// they were; a tied lm_head stays the embedding.
TEST(ModelWeightsTest, CopyOutOfCheckpointMovesWhatItIsGiven) {
  for (const std::string model :
       {"mixtral", "deepseek_v3_fp8", "gpt_oss", "qwen2_moe"}) {
    std::unique_ptr<checkpoint::Checkpoint> checkpoint;
    auto weights = BindDir("tests/testdata/moe-tiny/" + model, &checkpoint);
    ASSERT_TRUE(weights.ok()) << weights.status();
    const auto before = NamedMatrices(*weights);
    std::vector<MatrixBytes> bytes;
    for (const auto& [name, m] : before) {
      bytes.push_back(BytesOf(*checkpoint, *m));
    }
    const auto kept = [](int layer, int expert) {
      return expert == 1 || (layer == 0 && expert == 0);
    };
    ThreadPool pool(3);
    ASSERT_TRUE(CopyOutOfCheckpoint(
                    *checkpoint, [&](int l, int e) { return !kept(l, e); },
                    &pool, &*weights)
                    .ok());
    const auto after = NamedMatrices(*weights);
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < after.size(); ++i) {
      const auto& [name, m] = after[i];
      const MatrixBytes now = BytesOf(*checkpoint, *m);
      EXPECT_EQ(now.bytes, bytes[i].bytes) << model << " " << name;
      bool expert_kept = false;
      for (int l = 0; l < static_cast<int>(weights->layers.size()); ++l) {
        for (int e = 0; e < static_cast<int>(weights->layers[l].experts.size());
             ++e) {
          expert_kept |= kept(l, e) && name == "layer " + std::to_string(l) +
                                                   " expert " +
                                                   std::to_string(e);
        }
      }
      EXPECT_EQ(now.mapped, expert_kept && bytes[i].mapped)
          << model << " " << name;
    }
  }
  // Tied: one copy, both fields on it.
  std::unique_ptr<checkpoint::Checkpoint> checkpoint;
  auto weights = BindDir("tests/testdata/moe-tiny/mixtral", &checkpoint);
  ASSERT_TRUE(weights.ok()) << weights.status();
  weights->lm_head = weights->embed_tokens;
  ASSERT_TRUE(
      CopyOutOfCheckpoint(
          *checkpoint, [](int, int) { return true; }, nullptr, &*weights)
          .ok());
  EXPECT_EQ(weights->lm_head.data, weights->embed_tokens.data);
  EXPECT_FALSE(checkpoint->Locate(weights->lm_head.data, 1).has_value());
}

TEST(ModelWeightsTest, ProductWeightBytesByType) {
  using kernels::WeightType;
  std::unique_ptr<checkpoint::Checkpoint> checkpoint;
  auto weights = BindDir("tests/testdata/moe-tiny/mixtral", &checkpoint);
  ASSERT_TRUE(weights.ok()) << weights.status();
  // Every matrix but the embedding, counted by hand.
  int64_t expected = backend::DataBytes(weights->lm_head);
  int64_t expert_bytes = 0;
  for (const LayerWeights& layer : weights->layers) {
    for (const Weight* m : AttentionMatrices(layer)) {
      expected += backend::DataBytes(*m);
    }
    expected += backend::DataBytes(layer.router);
    for (const MlpWeights& e : layer.experts) {
      expert_bytes += backend::DataBytes(e.gate) + backend::DataBytes(e.up) +
                      backend::DataBytes(e.down);
    }
  }
  EXPECT_EQ(ProductWeightBytes(*weights),
            (std::vector<std::pair<WeightType, int64_t>>{
                {WeightType::kBF16, expected + expert_bytes}}));
  WeightConversion int4;
  int4.mlp_type = WeightType::kInt4;
  ASSERT_TRUE(ConvertWeights(int4, nullptr, &*weights).ok());
  EXPECT_EQ(ProductWeightBytes(*weights),
            (std::vector<std::pair<WeightType, int64_t>>{
                {WeightType::kBF16, expected},
                {WeightType::kInt4, expert_bytes / 4}}));
  std::unique_ptr<checkpoint::Checkpoint> fp8_checkpoint;
  auto fp8 =
      BindDir("tests/testdata/moe-tiny/deepseek_v3_fp8", &fp8_checkpoint);
  ASSERT_TRUE(fp8.ok()) << fp8.status();
  bool has_fp8 = false;
  for (const auto& [type, bytes] : ProductWeightBytes(*fp8)) {
    has_fp8 |= type == WeightType::kFp8E4M3 && bytes > 0;
  }
  EXPECT_TRUE(has_fp8);
}

}  // namespace
}  // namespace ringmoe::model

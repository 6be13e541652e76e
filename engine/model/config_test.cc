#include "engine/model/config.h"

#include <functional>

#include "base/file.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ringmoe::model {
namespace {

constexpr char kTiny[] = "tests/testdata/moe-tiny/";

std::string ReadConfig(const std::string& model) {
  absl::StatusOr<std::string> text =
      ReadFileToString(std::string(kTiny) + model + "/config.json");
  EXPECT_TRUE(text.ok()) << text.status();
  return text.value_or("");
}

TEST(ConfigTest, MixtralRenormalisesEveryLayerSparse) {
  auto spec = LoadModelConfig(std::string(kTiny) + "mixtral");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->architecture, "MixtralForCausalLM");
  EXPECT_EQ(spec->vocab_size, 512);
  EXPECT_EQ(spec->hidden_size, 64);
  EXPECT_EQ(spec->head_dim, 16);
  EXPECT_EQ(spec->num_kv_heads, 2);
  EXPECT_EQ(spec->num_experts, 8);
  EXPECT_EQ(spec->experts_per_token, 2);
  EXPECT_EQ(spec->expert_intermediate_size, 96);
  EXPECT_TRUE(spec->routing.renormalize);
  EXPECT_EQ(spec->qk_norm, QkNorm::kNone);
  EXPECT_EQ(spec->layer_is_moe, std::vector<bool>({true, true}));
  EXPECT_DOUBLE_EQ(spec->rms_norm_eps, 1e-6);
}

TEST(ConfigTest, Qwen2MoeUsesMoeIntermediateAndSharedExpert) {
  auto spec = LoadModelConfig(std::string(kTiny) + "qwen2_moe");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->expert_intermediate_size, 96);  // not intermediate_size 192
  EXPECT_EQ(spec->shared_expert_intermediate_size, 128);
  EXPECT_FALSE(spec->routing.renormalize);
  EXPECT_TRUE(spec->qkv_bias);
  EXPECT_FALSE(spec->o_proj_bias);
}

TEST(ConfigTest, Qwen3AndOlmoeQkNorms) {
  auto qwen3 = LoadModelConfig(std::string(kTiny) + "qwen3_moe");
  ASSERT_TRUE(qwen3.ok()) << qwen3.status();
  EXPECT_EQ(qwen3->qk_norm, QkNorm::kPerHead);
  EXPECT_TRUE(qwen3->routing.renormalize);
  auto olmoe = LoadModelConfig(std::string(kTiny) + "olmoe");
  ASSERT_TRUE(olmoe.ok()) << olmoe.status();
  EXPECT_EQ(olmoe->qk_norm, QkNorm::kWholeProjection);
  EXPECT_FALSE(olmoe->routing.renormalize);
}

TEST(ConfigTest, SparseStepAndMlpOnlyLayers) {
  auto json = nlohmann::json::parse(ReadConfig("qwen2_moe"));
  json["num_hidden_layers"] = 6;
  json["decoder_sparse_step"] = 2;
  json["mlp_only_layers"] = {3};
  auto spec = ParseModelConfig(json.dump(), "cfg");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->layer_is_moe,
            std::vector<bool>({false, true, false, false, false, true}));
  EXPECT_EQ(spec->dense_intermediate_size, 192);
}

TEST(ConfigTest, RopeScalingKinds) {
  auto json = nlohmann::json::parse(ReadConfig("qwen3_moe"));
  json["rope_scaling"] = {{"rope_type", "yarn"},
                          {"factor", 4.0},
                          {"original_max_position_embeddings", 32768}};
  auto spec = ParseModelConfig(json.dump(), "cfg");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->rope_scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(spec->rope_scaling.original_max_position_embeddings, 32768);
  json["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  auto bad = ParseModelConfig(json.dump(), "cfg");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("dynamic"), std::string::npos);
}

struct BadConfig {
  std::string name;
  std::function<void(nlohmann::json&)> edit;
  std::string expected;
};

// Parses `model`'s tiny config after `edit`.
absl::StatusOr<ModelSpec> ParseEdited(
    const std::string& model,
    const std::function<void(nlohmann::json&)>& edit) {
  auto json = nlohmann::json::parse(ReadConfig(model));
  edit(json);
  return ParseModelConfig(json.dump(), model + "/config.json");
}

TEST(ConfigTest, MixtralWindowAppliesToEveryLayer) {
  auto full = LoadModelConfig(std::string(kTiny) + "mixtral");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->layer_sliding_window, std::vector<int64_t>({0, 0}));
  auto absent = ParseEdited(
      "mixtral", [](nlohmann::json& j) { j.erase("sliding_window"); });
  ASSERT_TRUE(absent.ok()) << absent.status();
  EXPECT_EQ(absent->layer_sliding_window, std::vector<int64_t>({0, 0}));
  auto windowed = ParseEdited(
      "mixtral", [](nlohmann::json& j) { j["sliding_window"] = 256; });
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_EQ(windowed->layer_sliding_window, std::vector<int64_t>({256, 256}));
  EXPECT_EQ(windowed->SlidingWindow(1), 256);
}

TEST(ConfigTest, QwenWindowsFromMaxWindowLayersOn) {
  for (const char* model : {"qwen2_moe", "qwen3_moe"}) {
    auto spec = ParseEdited(model, [](nlohmann::json& j) {
      j["num_hidden_layers"] = 6;
      j["use_sliding_window"] = true;
      j["sliding_window"] = 64;
      j["max_window_layers"] = 4;
    });
    ASSERT_TRUE(spec.ok()) << model << ": " << spec.status();
    EXPECT_EQ(spec->layer_sliding_window,
              std::vector<int64_t>({0, 0, 0, 0, 64, 64}))
        << model;
    // transformers' default max_window_layers is 28.
    auto by_default = ParseEdited(model, [](nlohmann::json& j) {
      j["num_hidden_layers"] = 30;
      j["use_sliding_window"] = true;
      j["sliding_window"] = 64;
      j.erase("max_window_layers");
    });
    ASSERT_TRUE(by_default.ok()) << model << ": " << by_default.status();
    std::vector<int64_t> want(30, 0);
    want[28] = want[29] = 64;
    EXPECT_EQ(by_default->layer_sliding_window, want) << model;
    // sliding_window alone does nothing.
    auto unused = ParseEdited(model, [](nlohmann::json& j) {
      j["use_sliding_window"] = false;
      j["sliding_window"] = 64;
      j["max_window_layers"] = 0;
    });
    ASSERT_TRUE(unused.ok()) << model << ": " << unused.status();
    EXPECT_EQ(unused->layer_sliding_window, std::vector<int64_t>({0, 0}))
        << model;
  }
}

TEST(ConfigTest, LayerTypesDecideWhereTheyArePresent) {
  auto mixtral = ParseEdited("mixtral", [](nlohmann::json& j) {
    j["sliding_window"] = 8;
    j["layer_types"] = {"sliding_attention", "full_attention"};
  });
  ASSERT_TRUE(mixtral.ok()) << mixtral.status();
  EXPECT_EQ(mixtral->layer_sliding_window, std::vector<int64_t>({8, 0}));
  // Over Qwen's max_window_layers rule, which would slide neither layer.
  auto qwen = ParseEdited("qwen2_moe", [](nlohmann::json& j) {
    j["use_sliding_window"] = true;
    j["sliding_window"] = 16;
    j["max_window_layers"] = 28;
    j["layer_types"] = {"full_attention", "sliding_attention"};
  });
  ASSERT_TRUE(qwen.ok()) << qwen.status();
  EXPECT_EQ(qwen->layer_sliding_window, std::vector<int64_t>({0, 16}));
  for (const char* model : {"olmoe", "deepseek_v3"}) {
    auto full = ParseEdited(model, [](nlohmann::json& j) {
      j["layer_types"] = std::vector<std::string>(
          j["num_hidden_layers"].get<int>(), "full_attention");
    });
    ASSERT_TRUE(full.ok()) << model << ": " << full.status();
    EXPECT_EQ(full->layer_sliding_window,
              std::vector<int64_t>(full->num_layers, 0))
        << model;
  }
}

TEST(ConfigTest, BadWindowConfigsNameTheKey) {
  const std::vector<std::pair<std::string, BadConfig>> cases = {
      {"mixtral",
       {"negative window", [](nlohmann::json& j) { j["sliding_window"] = -4; },
        "'sliding_window' must be positive or null, got -4"}},
      {"mixtral",
       {"short layer_types",
        [](nlohmann::json& j) { j["layer_types"] = {"full_attention"}; },
        "'layer_types' must be a list of num_hidden_layers (2)"}},
      {"mixtral",
       {"layer_types not a list",
        [](nlohmann::json& j) { j["layer_types"] = "full_attention"; },
        "'layer_types' must be a list"}},
      {"mixtral",
       {"unknown layer type",
        [](nlohmann::json& j) {
          j["sliding_window"] = 8;
          j["layer_types"] = {"full_attention", "chunked_attention"};
        },
        "layer_types[1] is 'chunked_attention' (supported: full_attention, "
        "sliding_attention)"}},
      {"mixtral",
       {"layer type not a string",
        [](nlohmann::json& j) {
          j["layer_types"] = {"full_attention", 3};
        },
        "'layer_types[1]' must be a string, got 3"}},
      {"mixtral",
       {"sliding without a window",
        [](nlohmann::json& j) {
          j["layer_types"] = {"sliding_attention", "full_attention"};
        },
        "layer_types[0] is 'sliding_attention' but the model has no sliding "
        "window"}},
      {"qwen2_moe",
       {"qwen window null",
        [](nlohmann::json& j) {
          j["use_sliding_window"] = true;
          j["sliding_window"] = nullptr;
        },
        "use_sliding_window is true but sliding_window is null or 0"}},
      {"qwen3_moe",
       {"qwen max_window_layers",
        [](nlohmann::json& j) {
          j["use_sliding_window"] = true;
          j["sliding_window"] = 64;
          j["max_window_layers"] = -1;
        },
        "'max_window_layers' must be at least 0, got -1"}},
      {"qwen3_moe",
       {"qwen layer_types without use_sliding_window",
        [](nlohmann::json& j) {
          j["sliding_window"] = 64;
          j["layer_types"] = {"sliding_attention", "full_attention"};
        },
        "layer_types[0] is 'sliding_attention' but the model has no sliding "
        "window"}},
      {"mixtral",
       {"window beyond the context",
        [](nlohmann::json& j) {
          j["max_position_embeddings"] = 512;
          j["sliding_window"] = 513;
        },
        "sliding_window (513) of layer 0 exceeds the context, "
        "max_position_embeddings (512)"}},
      {"gpt_oss",
       {"gpt-oss window beyond the context",
        [](nlohmann::json& j) { j["sliding_window"] = 200000; },
        "sliding_window (200000) of layer 0 exceeds the context"}},
      {"gpt_oss",
       {"gpt-oss unknown layer type",
        [](nlohmann::json& j) { j["layer_types"][3] = "local_attention"; },
        "layer_types[3] is 'local_attention' (supported: full_attention, "
        "sliding_attention)"}},
      {"gpt_oss",
       {"gpt-oss default layer types without a window",
        [](nlohmann::json& j) {
          j.erase("layer_types");
          j["sliding_window"] = nullptr;
        },
        "sliding_window is null but gpt-oss's default layer_types slide on "
        "the even layers"}},
      {"gpt_oss",
       {"gpt-oss swiglu_limit",
        [](nlohmann::json& j) { j["swiglu_limit"] = 0; },
        "'swiglu_limit' must be positive, got 0"}},
      {"gpt_oss",
       {"unknown quantization",
        [](nlohmann::json& j) {
          j["quantization_config"]["quant_method"] = "awq";
        },
        "quant_method 'awq' is not supported (supported: fp8, mxfp4)"}},
      {"olmoe",
       {"olmoe sliding",
        [](nlohmann::json& j) {
          j["sliding_window"] = 8;
          j["layer_types"] = std::vector<std::string>(
              j["num_hidden_layers"].get<int>(), "sliding_attention");
        },
        "layer_types[0] is 'sliding_attention' but the model has no sliding "
        "window"}},
  };
  for (const auto& [model, c] : cases) {
    auto spec = ParseEdited(model, c.edit);
    ASSERT_FALSE(spec.ok()) << c.name;
    EXPECT_NE(spec.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << spec.status();
    EXPECT_NE(spec.status().message().find(model + "/config.json"),
              std::string::npos)
        << c.name;
  }
}

TEST(ConfigTest, DeepseekV3LatentAttentionAndGroupedSigmoidRouting) {
  for (const char* dir : {"deepseek_v3", "deepseek_v3_fp8"}) {
    auto spec = LoadModelConfig(std::string(kTiny) + dir);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_TRUE(spec->mla.has_value());
    EXPECT_EQ(spec->mla->q_lora_rank, 48);
    EXPECT_EQ(spec->mla->kv_lora_rank, 32);
    EXPECT_EQ(spec->mla->qk_head_dim(), 24);
    EXPECT_EQ(spec->mla->v_head_dim, 16);
    EXPECT_EQ(spec->cache_key_width(), 40);
    EXPECT_EQ(spec->cache_value_width(), 0);
    EXPECT_EQ(spec->rotary_dim(), 8);
    EXPECT_TRUE(spec->rope_interleaved);
    EXPECT_EQ(spec->num_experts, 16);
    EXPECT_EQ(spec->experts_per_token, 4);
    EXPECT_EQ(spec->expert_intermediate_size, 40);
    EXPECT_EQ(spec->shared_expert_intermediate_size, 40);
    EXPECT_FALSE(spec->shared_expert_gated);
    EXPECT_EQ(spec->layer_is_moe, std::vector<bool>({false, true, true}));
    EXPECT_EQ(spec->dense_intermediate_size, 96);
    const RoutingSpec& r = spec->routing;
    EXPECT_EQ(r.scoring, RouterScoring::kSigmoid);
    EXPECT_EQ(r.num_groups, 4);
    EXPECT_EQ(r.topk_groups, 2);
    EXPECT_EQ(r.group_scoring, GroupScoring::kTopTwoSum);
    EXPECT_TRUE(r.selection_bias);
    EXPECT_TRUE(r.renormalize);
    EXPECT_EQ(r.scaling_factor, 2.5);
  }
  auto fp8 = LoadModelConfig(std::string(kTiny) + "deepseek_v3_fp8");
  ASSERT_TRUE(fp8.ok());
  EXPECT_EQ(fp8->fp8.block_rows, 32);
  EXPECT_EQ(fp8->fp8.block_cols, 32);
}

// MLA's heads are qk_nope_head_dim + qk_rope_head_dim wide whatever
// hidden_size / num_attention_heads is (transformers' DeepSeek configs carry
// no head_dim): a hidden size that 3 heads do not divide, or an odd
// nope + rope, is a valid config.
TEST(ConfigTest, DeepseekHeadWidthIsNopePlusRope) {
  auto spec = ParseEdited("deepseek_v3", [](nlohmann::json& j) {
    j["hidden_size"] = 160;
    j["num_attention_heads"] = 3;
    j["num_key_value_heads"] = 3;
    j["qk_nope_head_dim"] = 15;
  });
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->head_dim, 23);
  EXPECT_EQ(spec->mla->qk_head_dim(), 23);
  // Without MLA the rotary head must still be even.
  auto mixtral = ParseEdited("mixtral", [](nlohmann::json& j) {
    j["hidden_size"] = 160;
    j["num_attention_heads"] = 3;
    j["num_key_value_heads"] = 3;
  });
  ASSERT_FALSE(mixtral.ok());
  EXPECT_NE(mixtral.status().message().find(
                "head_dim must be positive and even, got 53"),
            std::string::npos)
      << mixtral.status();
}

TEST(ConfigTest, GptOssSinksWindowsBiasedRouterAndClampedSwiglu) {
  for (const char* dir : {"gpt_oss", "gpt_oss_bf16"}) {
    auto spec = LoadModelConfig(std::string(kTiny) + dir);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->mxfp4, std::string(dir) == "gpt_oss") << dir;
    EXPECT_EQ(spec->head_dim, 64);
    EXPECT_EQ(spec->q_width(), 256);
    EXPECT_EQ(spec->kv_width(), 128);
    EXPECT_TRUE(spec->qkv_bias);
    EXPECT_TRUE(spec->o_proj_bias);
    EXPECT_TRUE(spec->attention_sinks);
    EXPECT_EQ(spec->layer_sliding_window, std::vector<int64_t>({8, 0, 8, 0}));
    EXPECT_EQ(spec->num_experts, 8);
    EXPECT_EQ(spec->experts_per_token, 2);
    EXPECT_EQ(spec->expert_intermediate_size, 160);
    EXPECT_EQ(spec->routing.order, RouterOrder::kTopKThenSoftmax);
    EXPECT_TRUE(spec->routing.router_bias);
    ASSERT_TRUE(spec->expert_swiglu.has_value());
    EXPECT_EQ(spec->expert_swiglu->limit, 7.0);
    EXPECT_EQ(spec->expert_swiglu->alpha, 1.702);
    EXPECT_EQ(spec->rope_scaling.type, RopeScalingType::kYarn);
    EXPECT_FALSE(spec->rope_scaling.truncate);
    EXPECT_EQ(spec->rope_scaling.factor, 32.0);
    EXPECT_EQ(spec->rms_norm_eps, 1e-5);
  }
  // transformers' defaults: windows of 128 on the even layers.
  auto defaults = ParseEdited("gpt_oss", [](nlohmann::json& j) {
    j.erase("layer_types");
    j.erase("sliding_window");
    j.erase("swiglu_limit");
  });
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->layer_sliding_window,
            std::vector<int64_t>({128, 0, 128, 0}));
  EXPECT_EQ(defaults->expert_swiglu->limit, 7.0);
}

TEST(ConfigTest, DeepseekV2LiteSoftmaxGreedyWithoutQueryCompression) {
  auto spec = LoadModelConfig(std::string(kTiny) + "deepseek_v2_lite");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->mla->q_lora_rank, 0);
  EXPECT_EQ(spec->shared_expert_intermediate_size, 64);
  EXPECT_EQ(spec->routing.scoring, RouterScoring::kSoftmax);
  EXPECT_EQ(spec->routing.num_groups, 1);
  EXPECT_FALSE(spec->routing.selection_bias);
  EXPECT_FALSE(spec->routing.renormalize);
  EXPECT_EQ(spec->fp8.block_rows, 0);
}

TEST(ConfigTest, BadDeepseekConfigsNameTheKey) {
  const std::vector<BadConfig> cases = {
      {"topk_method", [](nlohmann::json& j) { j["topk_method"] = "random"; },
       "topk_method 'random'"},
      {"scoring_func", [](nlohmann::json& j) { j["scoring_func"] = "relu"; },
       "scoring_func 'relu'"},
      {"groups", [](nlohmann::json& j) { j["n_group"] = 3; },
       "n_group (3) must divide"},
      {"kept groups", [](nlohmann::json& j) { j["topk_group"] = 5; },
       "topk_group (5)"},
      {"too few kept experts",
       [](nlohmann::json& j) {
         j["topk_group"] = 1;
         j["num_experts_per_tok"] = 5;
       },
       "topk_group (1)"},
      {"odd rope", [](nlohmann::json& j) { j["qk_rope_head_dim"] = 7; },
       "'qk_rope_head_dim' must be even"},
      {"no latent", [](nlohmann::json& j) { j.erase("kv_lora_rank"); },
       "'kv_lora_rank'"},
      {"zero v", [](nlohmann::json& j) { j["v_head_dim"] = 0; },
       "'v_head_dim' is 0"},
      {"q lora", [](nlohmann::json& j) { j["q_lora_rank"] = -1; },
       "'q_lora_rank' must be positive or null"},
      {"quant method",
       [](nlohmann::json& j) {
         j["quantization_config"] = {{"quant_method", "gptq"}};
       },
       "quant_method 'gptq'"},
      {"fp8 format",
       [](nlohmann::json& j) {
         j["quantization_config"] = {{"quant_method", "fp8"},
                                     {"fmt", "e5m2"},
                                     {"weight_block_size", {128, 128}}};
       },
       "fmt 'e5m2'"},
      {"fp8 blocks",
       [](nlohmann::json& j) {
         j["quantization_config"] = {{"quant_method", "fp8"},
                                     {"weight_block_size", {128, 100}}};
       },
       "weight_block_size"},
  };
  for (const auto& c : cases) {
    auto json = nlohmann::json::parse(ReadConfig("deepseek_v3"));
    c.edit(json);
    auto spec = ParseModelConfig(json.dump(), "ds/config.json");
    ASSERT_FALSE(spec.ok()) << c.name;
    EXPECT_NE(spec.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << spec.status();
  }
}

TEST(ConfigTest, BadConfigsNameTheProblem) {
  const std::vector<BadConfig> cases = {
      {"unknown arch",
       [](nlohmann::json& j) { j["architectures"] = {"FooForCausalLM"}; },
       "unknown architecture 'FooForCausalLM'"},
      {"no arch", [](nlohmann::json& j) { j.erase("architectures"); },
       "architectures"},
      {"missing hidden", [](nlohmann::json& j) { j.erase("hidden_size"); },
       "'hidden_size'"},
      {"wrong type", [](nlohmann::json& j) { j["num_hidden_layers"] = "two"; },
       "'num_hidden_layers' must be an integer"},
      {"zero heads", [](nlohmann::json& j) { j["num_attention_heads"] = 0; },
       "'num_attention_heads' is 0"},
      {"gqa mismatch", [](nlohmann::json& j) { j["num_key_value_heads"] = 3; },
       "not a multiple of num_key_value_heads"},
      {"top-k too big", [](nlohmann::json& j) { j["num_experts_per_tok"] = 9; },
       "num_experts_per_tok (9) exceeds"},
      {"activation", [](nlohmann::json& j) { j["hidden_act"] = "gelu"; },
       "hidden_act 'gelu'"},
      {"missing experts",
       [](nlohmann::json& j) { j.erase("num_local_experts"); },
       "'num_local_experts'"},
      // Found by fuzzing (tests/fuzz/corpus/config): products of these
      // overflowed int64.
      {"huge hidden", [](nlohmann::json& j) { j["hidden_size"] = 1LL << 62; },
       "hidden_size is 4611686018427387904, more than the supported 1048576"},
      {"huge head_dim", [](nlohmann::json& j) { j["head_dim"] = 1LL << 40; },
       "head_dim is 1099511627776, more than the supported"},
      {"huge vocab", [](nlohmann::json& j) { j["vocab_size"] = 1LL << 21; },
       "vocab_size is 2097152"},
      {"huge experts",
       [](nlohmann::json& j) { j["num_local_experts"] = 1LL << 30; },
       "the number of experts is 1073741824"},
      {"huge expert width",
       [](nlohmann::json& j) { j["intermediate_size"] = 1LL << 50; },
       "the experts' intermediate size is 1125899906842624"},
  };
  for (const auto& c : cases) {
    auto json = nlohmann::json::parse(ReadConfig("mixtral"));
    c.edit(json);
    auto spec = ParseModelConfig(json.dump(), "some/dir/config.json");
    ASSERT_FALSE(spec.ok()) << c.name;
    EXPECT_NE(spec.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << spec.status();
    EXPECT_NE(spec.status().message().find("some/dir/config.json"),
              std::string::npos)
        << c.name;
  }
  auto malformed = ParseModelConfig("{\"architectures\": [", "x/config.json");
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(
      malformed.status().message().find("x/config.json: not a valid JSON"),
      std::string::npos);
  auto missing = LoadModelConfig("/nonexistent-model-dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(
      missing.status().message().find("/nonexistent-model-dir/config.json"),
      std::string::npos);
}

}  // namespace
}  // namespace ringmoe::model

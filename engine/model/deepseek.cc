// DeepseekV3ForCausalLM and DeepseekV2ForCausalLM: multi-head latent
// attention (with or without query compression) with interleaved rotary
// dimensions and YaRN, the first first_k_dense_replace layers dense, then
// MoE layers of routed experts plus always-on shared experts (one MLP of
// n_shared_experts × moe_intermediate_size, no gate). Routing: V3 scores
// with a sigmoid and selects by score + e_score_correction_bias among the
// best groups (noaux_tc); V2 takes a softmax and the top k (greedy) or the
// top k among the groups with the best maximum (group_limited_greedy);
// weights optionally renormalised, then times routed_scaling_factor. The
// multi-token-prediction layers (index num_hidden_layers on) are not part
// of the forward pass and are not bound.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/model/architecture_internal.h"

namespace ringmoe::model::internal {
namespace {

absl::Status ParseMla(const nlohmann::json& config, ModelSpec* spec) {
  MlaSpec mla;
  ASSIGN_OR_RETURN(std::optional<int64_t> q_lora,
                   json::GetOptionalInt(config, "q_lora_rank"));
  if (q_lora && *q_lora <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field 'q_lora_rank' must be positive or null, got ", *q_lora));
  }
  mla.q_lora_rank = q_lora.value_or(0);
  ASSIGN_OR_RETURN(mla.kv_lora_rank,
                   json::GetPositiveInt(config, "kv_lora_rank"));
  ASSIGN_OR_RETURN(mla.qk_nope_head_dim,
                   json::GetPositiveInt(config, "qk_nope_head_dim"));
  ASSIGN_OR_RETURN(mla.qk_rope_head_dim,
                   json::GetPositiveInt(config, "qk_rope_head_dim"));
  ASSIGN_OR_RETURN(mla.v_head_dim, json::GetPositiveInt(config, "v_head_dim"));
  if (mla.qk_rope_head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("field 'qk_rope_head_dim' must be even (rotary pairs), "
                     "got ",
                     mla.qk_rope_head_dim));
  }
  // Some configs carry head_dim = qk_rope_head_dim (the rotary width); the
  // per-head query/key width is nope + rope whatever head_dim says.
  spec->head_dim = mla.qk_head_dim();
  spec->num_kv_heads = spec->num_heads;
  spec->rope_interleaved = true;
  spec->mla = mla;
  return absl::OkStatus();
}

absl::Status ParseRouting(const nlohmann::json& config, bool v3,
                          ModelSpec* spec) {
  RoutingSpec& r = spec->routing;
  ASSIGN_OR_RETURN(std::optional<std::string> scoring,
                   json::GetOptionalString(config, "scoring_func"));
  const std::string scoring_func = scoring.value_or(v3 ? "sigmoid" : "softmax");
  if (scoring_func == "softmax") {
    r.scoring = RouterScoring::kSoftmax;
  } else if (scoring_func == "sigmoid") {
    r.scoring = RouterScoring::kSigmoid;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("scoring_func '", scoring_func,
                     "' is not supported (supported: softmax, sigmoid)"));
  }
  ASSIGN_OR_RETURN(std::optional<std::string> method,
                   json::GetOptionalString(config, "topk_method"));
  const std::string topk_method = method.value_or(v3 ? "noaux_tc" : "greedy");
  ASSIGN_OR_RETURN(std::optional<int64_t> groups,
                   json::GetOptionalInt(config, "n_group"));
  ASSIGN_OR_RETURN(std::optional<int64_t> topk_groups,
                   json::GetOptionalInt(config, "topk_group"));
  if (topk_method == "greedy") {
    r.num_groups = r.topk_groups = 1;
  } else if (topk_method == "group_limited_greedy" ||
             topk_method == "noaux_tc") {
    r.num_groups = groups.value_or(1);
    r.topk_groups = topk_groups.value_or(r.num_groups);
    r.group_scoring = topk_method == "noaux_tc" ? GroupScoring::kTopTwoSum
                                                : GroupScoring::kMax;
    r.selection_bias = topk_method == "noaux_tc";
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "topk_method '", topk_method,
        "' is not supported (supported: greedy, group_limited_greedy, "
        "noaux_tc)"));
  }
  if (r.num_groups < 1 || spec->num_experts % r.num_groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "n_group (", r.num_groups, ") must divide the number of experts (",
        spec->num_experts, ")"));
  }
  const int64_t per_group = spec->num_experts / r.num_groups;
  if (r.topk_groups < 1 || r.topk_groups > r.num_groups ||
      r.topk_groups * per_group < spec->experts_per_token) {
    return absl::InvalidArgumentError(absl::StrCat(
        "topk_group (", r.topk_groups, ") must be in [1, n_group = ",
        r.num_groups, "] and its groups must hold num_experts_per_tok (",
        spec->experts_per_token, ") experts"));
  }
  if (r.group_scoring == GroupScoring::kTopTwoSum && r.num_groups > 1 &&
      per_group < 2) {
    return absl::InvalidArgumentError(
        "noaux_tc scores a group by its two best experts: every group needs "
        "at least two (n_routed_experts / n_group >= 2)");
  }
  ASSIGN_OR_RETURN(std::optional<bool> norm,
                   json::GetOptionalBool(config, "norm_topk_prob"));
  r.renormalize = norm.value_or(false);
  ASSIGN_OR_RETURN(std::optional<double> scaling,
                   json::GetOptionalDouble(config, "routed_scaling_factor"));
  r.scaling_factor = scaling.value_or(1.0);
  if (!(r.scaling_factor > 0)) {
    return absl::InvalidArgumentError(
        "field 'routed_scaling_factor' must be positive");
  }
  return absl::OkStatus();
}

absl::Status ParseLayers(const nlohmann::json& config, ModelSpec* spec) {
  ASSIGN_OR_RETURN(std::optional<int64_t> first_dense,
                   json::GetOptionalInt(config, "first_k_dense_replace"));
  ASSIGN_OR_RETURN(std::optional<int64_t> freq,
                   json::GetOptionalInt(config, "moe_layer_freq"));
  const int64_t dense = first_dense.value_or(0);
  const int64_t every = freq.value_or(1);
  if (dense < 0 || every < 1) {
    return absl::InvalidArgumentError(
        "first_k_dense_replace must be >= 0 and moe_layer_freq >= 1");
  }
  spec->layer_is_moe.assign(spec->num_layers, false);
  bool any_dense = false;
  for (int64_t l = 0; l < spec->num_layers; ++l) {
    spec->layer_is_moe[l] = l >= dense && l % every == 0;
    any_dense |= !spec->layer_is_moe[l];
  }
  if (any_dense) {
    ASSIGN_OR_RETURN(spec->dense_intermediate_size,
                     json::GetPositiveInt(config, "intermediate_size"));
  }
  return absl::OkStatus();
}

class DeepseekArchitecture : public Architecture {
 public:
  explicit DeepseekArchitecture(bool v3) : v3_(v3) {}

  absl::string_view name() const override {
    return v3_ ? "DeepseekV3ForCausalLM" : "DeepseekV2ForCausalLM";
  }

  absl::Status ParseConfig(const nlohmann::json& config,
                           ModelSpec* spec) const override {
    RETURN_IF_ERROR(ParseExperts(config, "n_routed_experts",
                                 "moe_intermediate_size", spec));
    ASSIGN_OR_RETURN(std::optional<int64_t> shared,
                     json::GetOptionalInt(config, "n_shared_experts"));
    spec->shared_expert_intermediate_size =
        shared.value_or(0) * spec->expert_intermediate_size;
    RETURN_IF_ERROR(ParseRouting(config, v3_, spec));
    RETURN_IF_ERROR(ParseLayers(config, spec));
    RETURN_IF_ERROR(ParseMla(config, spec));
    // DeepSeek attends fully; a layer_types list may only agree.
    RETURN_IF_ERROR(SetLayerWindows(config, /*window=*/0, 0, spec));
    ASSIGN_OR_RETURN(std::optional<bool> bias,
                     json::GetOptionalBool(config, "attention_bias"));
    if (bias.value_or(false)) {
      return absl::UnimplementedError(
          "attention_bias: true is not supported for DeepSeek models");
    }
    ASSIGN_OR_RETURN(std::optional<int64_t> mtp,
                     json::GetOptionalInt(config, "num_nextn_predict_layers"));
    if (mtp.value_or(0) > 0) {
      std::fprintf(stderr,
                   "ringmoe: %s: skipping %lld multi-token-prediction "
                   "layer(s) (model.layers.%lld.* on): not part of the "
                   "forward pass\n",
                   std::string(name()).c_str(), static_cast<long long>(*mtp),
                   static_cast<long long>(spec->num_layers));
    }
    return absl::OkStatus();
  }

  MlpTensorNames SharedExpertTensors(int layer) const override {
    return GateUpDownTensors(layer, "mlp.shared_experts.");
  }

  std::string ExpertScoreBiasTensor(int layer) const override {
    return LayerTensor(layer, "mlp.gate.e_score_correction_bias");
  }

  MlaTensorNames MlaTensors(int layer) const override {
    auto attn = [layer](absl::string_view suffix) {
      return LayerTensor(layer, absl::StrCat("self_attn.", suffix));
    };
    return {attn("q_proj.weight"),
            attn("q_a_proj.weight"),
            attn("q_a_layernorm.weight"),
            attn("q_b_proj.weight"),
            attn("kv_a_proj_with_mqa.weight"),
            attn("kv_a_layernorm.weight"),
            attn("kv_b_proj.weight"),
            attn("o_proj.weight")};
  }

 private:
  bool v3_;
};

}  // namespace

const Architecture& DeepseekV3() {
  static const DeepseekArchitecture arch(/*v3=*/true);
  return arch;
}

const Architecture& DeepseekV2() {
  static const DeepseekArchitecture arch(/*v3=*/false);
  return arch;
}

}  // namespace ringmoe::model::internal

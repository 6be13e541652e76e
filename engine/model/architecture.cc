#include "engine/model/architecture.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/model/architecture_internal.h"

namespace ringmoe::model {
namespace {

const std::vector<const Architecture*>& Registry() {
  static const auto* registry = new std::vector<const Architecture*>{
      &internal::Mixtral(), &internal::Qwen2Moe(),   &internal::Qwen3Moe(),
      &internal::Olmoe(),   &internal::DeepseekV2(), &internal::DeepseekV3(),
      &internal::GptOss()};
  return *registry;
}

}  // namespace

ModelTensorNames Architecture::ModelTensors() const {
  return {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
}

LayerNormTensorNames Architecture::LayerNormTensors(int layer) const {
  return {LayerTensor(layer, "input_layernorm.weight"),
          LayerTensor(layer, "post_attention_layernorm.weight")};
}

GqaTensorNames Architecture::GqaTensors(int layer) const {
  auto attn = [layer](absl::string_view suffix) {
    return LayerTensor(layer, absl::StrCat("self_attn.", suffix));
  };
  return {attn("q_proj.weight"), attn("k_proj.weight"), attn("v_proj.weight"),
          attn("o_proj.weight"), attn("q_proj.bias"),   attn("k_proj.bias"),
          attn("v_proj.bias"),   attn("o_proj.bias"),   attn("q_norm.weight"),
          attn("k_norm.weight"), attn("sinks")};
}

std::string Architecture::RouterTensor(int layer) const {
  return LayerTensor(layer, "mlp.gate.weight");
}

std::string Architecture::RouterBiasTensor(int layer) const {
  std::string name = RouterTensor(layer);
  constexpr absl::string_view kWeight = "weight";
  if (absl::EndsWith(name, kWeight)) {
    name.replace(name.size() - kWeight.size(), kWeight.size(), "bias");
  }
  return name;
}

MlpTensorNames Architecture::ExpertTensors(int layer, int expert) const {
  return GateUpDownTensors(layer, absl::StrCat("mlp.experts.", expert, "."));
}

std::optional<FusedExpertTensorNames> Architecture::FusedExpertTensors(
    int layer) const {
  return std::nullopt;
}

MlpTensorNames Architecture::SharedExpertTensors(int layer) const { return {}; }

std::string Architecture::SharedExpertGateTensor(int layer) const { return ""; }

std::string Architecture::ExpertScoreBiasTensor(int layer) const { return ""; }

MlaTensorNames Architecture::MlaTensors(int layer) const { return {}; }

MlpTensorNames Architecture::DenseMlpTensors(int layer) const {
  return GateUpDownTensors(layer, "mlp.");
}

std::string LayerTensor(int layer, absl::string_view suffix) {
  return absl::StrCat("model.layers.", layer, ".", suffix);
}

MlpTensorNames GateUpDownTensors(int layer, absl::string_view prefix) {
  return {LayerTensor(layer, absl::StrCat(prefix, "gate_proj.weight")),
          LayerTensor(layer, absl::StrCat(prefix, "up_proj.weight")),
          LayerTensor(layer, absl::StrCat(prefix, "down_proj.weight"))};
}

absl::StatusOr<const Architecture*> FindArchitecture(absl::string_view name) {
  for (const Architecture* arch : Registry()) {
    if (arch->name() == name) return arch;
  }
  return absl::UnimplementedError(absl::StrCat(
      "unknown architecture '", name,
      "' (supported: ", absl::StrJoin(SupportedArchitectures(), ", "), ")"));
}

std::vector<std::string> SupportedArchitectures() {
  std::vector<std::string> names;
  for (const Architecture* arch : Registry()) names.emplace_back(arch->name());
  return names;
}

namespace internal {

absl::Status ParseExperts(const nlohmann::json& config,
                          absl::string_view num_experts_key,
                          absl::string_view intermediate_key, ModelSpec* spec) {
  ASSIGN_OR_RETURN(spec->num_experts,
                   json::GetPositiveInt(config, num_experts_key));
  ASSIGN_OR_RETURN(spec->experts_per_token,
                   json::GetPositiveInt(config, "num_experts_per_tok"));
  ASSIGN_OR_RETURN(spec->expert_intermediate_size,
                   json::GetPositiveInt(config, intermediate_key));
  return absl::OkStatus();
}

void AllLayersMoe(ModelSpec* spec) {
  spec->layer_is_moe.assign(spec->num_layers, true);
}

absl::Status ParseSparseLayerPattern(const nlohmann::json& config,
                                     ModelSpec* spec) {
  ASSIGN_OR_RETURN(std::optional<int64_t> step,
                   json::GetOptionalInt(config, "decoder_sparse_step"));
  const int64_t sparse_step = step.value_or(1);
  if (sparse_step < 1) {
    return absl::InvalidArgumentError("decoder_sparse_step must be at least 1");
  }
  std::vector<bool> mlp_only(spec->num_layers, false);
  auto it = config.find("mlp_only_layers");
  if (it != config.end() && !it->is_null()) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError(
          "mlp_only_layers must be a list of layer indices");
    }
    for (const auto& v : *it) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() >= spec->num_layers) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mlp_only_layers has an invalid layer index ", v.dump()));
      }
      mlp_only[v.get<int64_t>()] = true;
    }
  }
  spec->layer_is_moe.assign(spec->num_layers, false);
  bool any_dense = false;
  for (int64_t l = 0; l < spec->num_layers; ++l) {
    spec->layer_is_moe[l] =
        !mlp_only[l] && spec->num_experts > 0 && (l + 1) % sparse_step == 0;
    any_dense |= !spec->layer_is_moe[l];
  }
  if (any_dense) {
    ASSIGN_OR_RETURN(spec->dense_intermediate_size,
                     json::GetPositiveInt(config, "intermediate_size"));
  }
  return absl::OkStatus();
}

absl::Status ParseNormTopkProb(const nlohmann::json& config, bool default_value,
                               ModelSpec* spec) {
  ASSIGN_OR_RETURN(std::optional<bool> norm,
                   json::GetOptionalBool(config, "norm_topk_prob"));
  spec->routing.renormalize = norm.value_or(default_value);
  return absl::OkStatus();
}

absl::Status ParseQwenMoeBlock(const nlohmann::json& config, ModelSpec* spec) {
  RETURN_IF_ERROR(
      ParseExperts(config, "num_experts", "moe_intermediate_size", spec));
  RETURN_IF_ERROR(ParseNormTopkProb(config, false, spec));
  RETURN_IF_ERROR(ParseSparseLayerPattern(config, spec));
  ASSIGN_OR_RETURN(std::optional<bool> sliding,
                   json::GetOptionalBool(config, "use_sliding_window"));
  // Qwen configs carry a sliding_window whether or not it is used; only
  // use_sliding_window turns it on.
  int64_t window = 0;
  int64_t first_sliding_layer = 0;
  if (sliding.value_or(false)) {
    ASSIGN_OR_RETURN(window, ParseSlidingWindow(config));
    if (window == 0) {
      return absl::InvalidArgumentError(
          "use_sliding_window is true but sliding_window is null or 0");
    }
    ASSIGN_OR_RETURN(std::optional<int64_t> max_window_layers,
                     json::GetOptionalInt(config, "max_window_layers"));
    // transformers' default for Qwen2MoeConfig and Qwen3MoeConfig.
    first_sliding_layer = max_window_layers.value_or(28);
    if (first_sliding_layer < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("field 'max_window_layers' must be at least 0, got ",
                       first_sliding_layer));
    }
  }
  return SetLayerWindows(config, window, first_sliding_layer, spec);
}

absl::StatusOr<int64_t> ParseSlidingWindow(const nlohmann::json& config) {
  ASSIGN_OR_RETURN(std::optional<int64_t> window,
                   json::GetOptionalInt(config, "sliding_window"));
  if (window.value_or(0) < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field 'sliding_window' must be positive or null, got ", *window));
  }
  return window.value_or(0);
}

absl::Status SetLayerWindows(const nlohmann::json& config, int64_t window,
                             int64_t first_sliding_layer, ModelSpec* spec) {
  constexpr absl::string_view kKey = "layer_types";
  spec->layer_sliding_window.assign(spec->num_layers, 0);
  auto it = config.find(kKey);
  if (it == config.end() || it->is_null()) {
    for (int64_t l = first_sliding_layer; l < spec->num_layers; ++l) {
      spec->layer_sliding_window[l] = window;
    }
    return absl::OkStatus();
  }
  if (!it->is_array() || static_cast<int64_t>(it->size()) != spec->num_layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "field 'layer_types' must be a list of num_hidden_layers (",
        spec->num_layers, ") layer types, got ", it->dump().substr(0, 80)));
  }
  for (int64_t l = 0; l < spec->num_layers; ++l) {
    const nlohmann::json& type = (*it)[l];
    const std::string path = json::IndexPath(kKey, l);
    if (!type.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "field '", path, "' must be a string, got ", type.dump()));
    }
    const std::string& name = type.get_ref<const std::string&>();
    if (name == "full_attention") continue;
    if (name != "sliding_attention") {
      return absl::UnimplementedError(
          absl::StrCat(path, " is '", name,
                       "' (supported: full_attention, sliding_attention)"));
    }
    if (window <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path,
                       " is 'sliding_attention' but the model has no sliding "
                       "window (sliding_window null or absent, or not used by "
                       "this architecture or its settings)"));
    }
    spec->layer_sliding_window[l] = window;
  }
  return absl::OkStatus();
}

}  // namespace internal
}  // namespace ringmoe::model

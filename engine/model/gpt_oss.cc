// GptOssForCausalLM (gpt-oss-20b, gpt-oss-120b): grouped-query attention
// with q/k/v/o biases and a learned sink logit per head, sliding windows on
// the layers `layer_types` marks (by default the even ones) and YaRN RoPE;
// every layer MoE, routed by a biased linear router whose top-k logits are
// softmaxed among themselves; experts fused per layer (`mlp.experts.*`, gate
// and up interleaved, both projections biased) with the clamped SwiGLU, in
// MXFP4 as OpenAI ships them or dense as transformers saves them.
#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/model/architecture_internal.h"

namespace ringmoe::model::internal {
namespace {

// transformers' GptOssConfig defaults for keys a config may leave out.
constexpr int64_t kDefaultSlidingWindow = 128;
constexpr double kDefaultSwigluLimit = 7.0;
// Fixed in the model code (GptOssExperts.alpha), not a config key.
constexpr double kSwigluAlpha = 1.702;

class GptOssArchitecture : public Architecture {
 public:
  absl::string_view name() const override { return "GptOssForCausalLM"; }

  absl::Status ParseConfig(const nlohmann::json& config,
                           ModelSpec* spec) const override {
    RETURN_IF_ERROR(
        ParseExperts(config, "num_local_experts", "intermediate_size", spec));
    spec->routing.order = RouterOrder::kTopKThenSoftmax;
    spec->routing.router_bias = true;
    ASSIGN_OR_RETURN(std::optional<double> limit,
                     json::GetOptionalDouble(config, "swiglu_limit"));
    if (limit && !(*limit > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("field 'swiglu_limit' must be positive, got ", *limit));
    }
    spec->expert_swiglu =
        ClampedSwiglu{kSwigluAlpha, limit.value_or(kDefaultSwigluLimit)};
    ASSIGN_OR_RETURN(std::optional<bool> bias,
                     json::GetOptionalBool(config, "attention_bias"));
    spec->qkv_bias = spec->o_proj_bias = bias.value_or(true);
    spec->attention_sinks = true;
    AllLayersMoe(spec);
    return ParseWindows(config, spec);
  }

  std::string RouterTensor(int layer) const override {
    return LayerTensor(layer, "mlp.router.weight");
  }

  std::optional<FusedExpertTensorNames> FusedExpertTensors(
      int layer) const override {
    return FusedExpertTensorNames{
        LayerTensor(layer, "mlp.experts.gate_up_proj"),
        LayerTensor(layer, "mlp.experts.gate_up_proj_bias"),
        LayerTensor(layer, "mlp.experts.down_proj"),
        LayerTensor(layer, "mlp.experts.down_proj_bias")};
  }

 private:
  // sliding_window (default 128) on the layers layer_types marks, or on
  // the even layers when the config has no layer_types.
  static absl::Status ParseWindows(const nlohmann::json& config,
                                   ModelSpec* spec) {
    int64_t window = kDefaultSlidingWindow;
    if (config.contains("sliding_window")) {
      ASSIGN_OR_RETURN(window, ParseSlidingWindow(config));
    }
    auto types = config.find("layer_types");
    if (types != config.end() && !types->is_null()) {
      return SetLayerWindows(config, window, 0, spec);
    }
    if (window == 0) {
      return absl::InvalidArgumentError(
          "sliding_window is null but gpt-oss's default layer_types slide "
          "on the even layers");
    }
    spec->layer_sliding_window.assign(spec->num_layers, 0);
    for (int64_t l = 0; l < spec->num_layers; l += 2) {
      spec->layer_sliding_window[l] = window;
    }
    return absl::OkStatus();
  }
};

}  // namespace

const Architecture& GptOss() {
  static const GptOssArchitecture arch;
  return arch;
}

}  // namespace ringmoe::model::internal

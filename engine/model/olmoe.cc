// OlmoeForCausalLM: q/k RMSNorm over the whole projected vector (before the
// split into heads and before RoPE), norm_topk_prob (default false),
// optional clip_qkv and attention_bias. Every layer sparse.
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/model/architecture_internal.h"

namespace ringmoe::model::internal {
namespace {

class OlmoeArchitecture : public Architecture {
 public:
  absl::string_view name() const override { return "OlmoeForCausalLM"; }

  absl::Status ParseConfig(const nlohmann::json& config,
                           ModelSpec* spec) const override {
    RETURN_IF_ERROR(
        ParseExperts(config, "num_experts", "intermediate_size", spec));
    RETURN_IF_ERROR(ParseNormTopkProb(config, false, spec));
    ASSIGN_OR_RETURN(std::optional<bool> bias,
                     json::GetOptionalBool(config, "attention_bias"));
    spec->qkv_bias = spec->o_proj_bias = bias.value_or(false);
    ASSIGN_OR_RETURN(std::optional<double> clip,
                     json::GetOptionalDouble(config, "clip_qkv"));
    spec->clip_qkv = clip.value_or(0.0);
    spec->qk_norm = QkNorm::kWholeProjection;
    // transformers' OLMoE attends fully; a layer_types list may only agree.
    RETURN_IF_ERROR(SetLayerWindows(config, /*window=*/0, 0, spec));
    AllLayersMoe(spec);
    return absl::OkStatus();
  }
};

}  // namespace

const Architecture& Olmoe() {
  static const OlmoeArchitecture arch;
  return arch;
}

}  // namespace ringmoe::model::internal

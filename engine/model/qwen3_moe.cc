// Qwen3MoeForCausalLM: per-head q/k RMSNorm before RoPE, explicit head_dim,
// norm_topk_prob, optional attention_bias (q, k, v and o), dense layers via
// decoder_sparse_step and mlp_only_layers. No shared expert.
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/model/architecture_internal.h"

namespace ringmoe::model::internal {
namespace {

class Qwen3MoeArchitecture : public Architecture {
 public:
  absl::string_view name() const override { return "Qwen3MoeForCausalLM"; }

  absl::Status ParseConfig(const nlohmann::json& config,
                           ModelSpec* spec) const override {
    RETURN_IF_ERROR(ParseQwenMoeBlock(config, spec));
    ASSIGN_OR_RETURN(std::optional<bool> bias,
                     json::GetOptionalBool(config, "attention_bias"));
    spec->qkv_bias = spec->o_proj_bias = bias.value_or(false);
    spec->qk_norm = QkNorm::kPerHead;
    return absl::OkStatus();
  }
};

}  // namespace

const Architecture& Qwen3Moe() {
  static const Qwen3MoeArchitecture arch;
  return arch;
}

}  // namespace ringmoe::model::internal

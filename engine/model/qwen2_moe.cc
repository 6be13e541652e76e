// Qwen2MoeForCausalLM: q/k/v biases, a shared expert scaled by a sigmoid
// gate, norm_topk_prob (default false), dense layers via
// decoder_sparse_step and mlp_only_layers.
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/model/architecture_internal.h"

namespace ringmoe::model::internal {
namespace {

class Qwen2MoeArchitecture : public Architecture {
 public:
  absl::string_view name() const override { return "Qwen2MoeForCausalLM"; }

  absl::Status ParseConfig(const nlohmann::json& config,
                           ModelSpec* spec) const override {
    RETURN_IF_ERROR(ParseQwenMoeBlock(config, spec));
    ASSIGN_OR_RETURN(
        std::optional<int64_t> shared,
        json::GetOptionalInt(config, "shared_expert_intermediate_size"));
    spec->shared_expert_intermediate_size = shared.value_or(0);
    spec->shared_expert_gated = true;
    spec->qkv_bias = true;
    return absl::OkStatus();
  }

  MlpTensorNames SharedExpertTensors(int layer) const override {
    return GateUpDownTensors(layer, "mlp.shared_expert.");
  }

  std::string SharedExpertGateTensor(int layer) const override {
    return LayerTensor(layer, "mlp.shared_expert_gate.weight");
  }
};

}  // namespace

const Architecture& Qwen2Moe() {
  static const Qwen2MoeArchitecture arch;
  return arch;
}

}  // namespace ringmoe::model::internal

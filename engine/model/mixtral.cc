// MixtralForCausalLM: every layer sparse, top-k weights always
// renormalised, experts named w1 (gate), w3 (up), w2 (down); sliding_window,
// when set, applies to every layer.
#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/model/architecture_internal.h"

namespace ringmoe::model::internal {
namespace {

class MixtralArchitecture : public Architecture {
 public:
  absl::string_view name() const override { return "MixtralForCausalLM"; }

  absl::Status ParseConfig(const nlohmann::json& config,
                           ModelSpec* spec) const override {
    RETURN_IF_ERROR(
        ParseExperts(config, "num_local_experts", "intermediate_size", spec));
    spec->routing.renormalize = true;
    ASSIGN_OR_RETURN(const int64_t window, ParseSlidingWindow(config));
    RETURN_IF_ERROR(SetLayerWindows(config, window, 0, spec));
    AllLayersMoe(spec);
    return absl::OkStatus();
  }

  std::string RouterTensor(int layer) const override {
    return LayerTensor(layer, "block_sparse_moe.gate.weight");
  }

  MlpTensorNames ExpertTensors(int layer, int expert) const override {
    const std::string prefix =
        absl::StrCat("block_sparse_moe.experts.", expert, ".");
    return {LayerTensor(layer, prefix + "w1.weight"),
            LayerTensor(layer, prefix + "w3.weight"),
            LayerTensor(layer, prefix + "w2.weight")};
  }
};

}  // namespace

const Architecture& Mixtral() {
  static const MixtralArchitecture arch;
  return arch;
}

}  // namespace ringmoe::model::internal

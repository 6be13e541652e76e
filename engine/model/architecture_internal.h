// Pieces the per-architecture files share; not part of the public API.
#ifndef RINGMOE_ENGINE_MODEL_ARCHITECTURE_INTERNAL_H_
#define RINGMOE_ENGINE_MODEL_ARCHITECTURE_INTERNAL_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "engine/model/architecture.h"

namespace ringmoe::model::internal {

const Architecture& Mixtral();
const Architecture& Qwen2Moe();
const Architecture& Qwen3Moe();
const Architecture& Olmoe();
const Architecture& DeepseekV2();
const Architecture& DeepseekV3();

// Reads the expert count, top-k and the expert intermediate size from the
// keys this architecture uses for them.
absl::Status ParseExperts(const nlohmann::json& config,
                          absl::string_view num_experts_key,
                          absl::string_view intermediate_key, ModelSpec* spec);

// Marks every layer as MoE.
void AllLayersMoe(ModelSpec* spec);

// The Qwen rule: layer l is sparse unless listed in mlp_only_layers, and
// only when (l + 1) % decoder_sparse_step == 0; dense layers use
// intermediate_size.
absl::Status ParseSparseLayerPattern(const nlohmann::json& config,
                                     ModelSpec* spec);

// Reads norm_topk_prob, defaulting to `default_value` when absent.
absl::Status ParseNormTopkProb(const nlohmann::json& config, bool default_value,
                               ModelSpec* spec);

// What Qwen2-MoE and Qwen3-MoE share: num_experts, moe_intermediate_size,
// norm_topk_prob (default false), the sparse layer pattern, and a refusal of
// use_sliding_window (not implemented for them; refuse rather than compute
// something else).
absl::Status ParseQwenMoeBlock(const nlohmann::json& config, ModelSpec* spec);

}  // namespace ringmoe::model::internal

#endif  // RINGMOE_ENGINE_MODEL_ARCHITECTURE_INTERNAL_H_

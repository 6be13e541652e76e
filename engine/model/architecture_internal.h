// Pieces the per-architecture files share; not part of the public API.
#ifndef RINGMOE_ENGINE_MODEL_ARCHITECTURE_INTERNAL_H_
#define RINGMOE_ENGINE_MODEL_ARCHITECTURE_INTERNAL_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/architecture.h"

namespace ringmoe::model::internal {

const Architecture& Mixtral();
const Architecture& Qwen2Moe();
const Architecture& Qwen3Moe();
const Architecture& Olmoe();
const Architecture& DeepseekV2();
const Architecture& DeepseekV3();
const Architecture& GptOss();

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
// norm_topk_prob (default false), the sparse layer pattern, and the layer
// windows: with use_sliding_window true, layers from max_window_layers
// (default 28) on get sliding_window and the ones below attend fully, the
// rule of transformers 4.x (layer_idx >= max_window_layers). Later
// transformers derives other defaults, so a config that spells out
// layer_types is followed instead.
absl::Status ParseQwenMoeBlock(const nlohmann::json& config, ModelSpec* spec);

// The `sliding_window` key: its value, or 0 when it is null or absent
// (configs write null for full attention); negative is an error.
absl::StatusOr<int64_t> ParseSlidingWindow(const nlohmann::json& config);

// Sets spec->layer_sliding_window (num_layers is parsed). A `layer_types`
// list in the config decides when present (the key newer transformers
// configs and gpt-oss use): "sliding_attention" layers get `window`,
// "full_attention" layers none; a sliding layer without a positive `window`
// is an error, as are a list of the wrong length and any other value.
// Without one, layers from `first_sliding_layer` on get `window` (0: every
// layer attends fully).
absl::Status SetLayerWindows(const nlohmann::json& config, int64_t window,
                             int64_t first_sliding_layer, ModelSpec* spec);

}  // namespace ringmoe::model::internal

#endif  // RINGMOE_ENGINE_MODEL_ARCHITECTURE_INTERNAL_H_

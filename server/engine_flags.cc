#include "server/engine_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

ABSL_FLAG(std::string, model, "",
          "Hugging Face checkpoint directory (config.json, safetensors, "
          "tokenizer.json).");
ABSL_FLAG(std::string, device, "cpu", "Where the model runs: cpu or cuda:N.");
ABSL_FLAG(int, threads, 0, "CPU threads for the engine; 0 = all cores.");
ABSL_FLAG(std::string, weight_dtype, "auto",
          "Format of the MLP (expert) weights after loading: auto (as "
          "stored), bf16, f16, f32, int8 (per-row scales) or int4 (group-wise "
          "scales).");
ABSL_FLAG(bool, quantize_attention, false,
          "Also convert the attention projections to --weight_dtype.");
ABSL_FLAG(int, weight_group_size, 32,
          "Columns per int4 scale group: 32 or 64.");
ABSL_FLAG(int64_t, kv_cache_tokens, 0,
          "KV-cache capacity in tokens over all sequences; 0 = "
          "max(4096, max_position_embeddings).");
ABSL_FLAG(int64_t, kv_block_size, 16, "Positions per KV-cache block.");

namespace ringmoe::server {

absl::StatusOr<runtime::EngineOptions> EngineOptionsFromFlags() {
  runtime::EngineOptions options;
  options.model_dir = absl::GetFlag(FLAGS_model);
  if (options.model_dir.empty()) {
    return absl::InvalidArgumentError("--model DIR is required");
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu") {
    if (absl::StartsWith(device, "cuda")) {
      return absl::UnimplementedError(absl::StrCat(
          "--device=", device, ": the CUDA backend is not available yet; use --device=cpu"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, ": expected cpu or cuda:N"));
  }
  if (absl::GetFlag(FLAGS_threads) < 0) {
    return absl::InvalidArgumentError("--threads must be 0 (all cores) or positive");
  }
  options.threads = absl::GetFlag(FLAGS_threads);
  const std::string dtype = absl::GetFlag(FLAGS_weight_dtype);
  model::WeightConversion& conversion = options.weight_conversion;
  if (dtype == "f32") {
    conversion.mlp_type = kernels::WeightType::kF32;
  } else if (dtype == "bf16") {
    conversion.mlp_type = kernels::WeightType::kBF16;
  } else if (dtype == "f16") {
    conversion.mlp_type = kernels::WeightType::kF16;
  } else if (dtype == "int8") {
    conversion.mlp_type = kernels::WeightType::kInt8;
  } else if (dtype == "int4") {
    conversion.mlp_type = kernels::WeightType::kInt4;
  } else if (dtype != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--weight_dtype=", dtype,
                     ": expected auto, bf16, f16, f32, int8 or int4"));
  }
  conversion.attention = absl::GetFlag(FLAGS_quantize_attention);
  conversion.group_size = absl::GetFlag(FLAGS_weight_group_size);
  if (conversion.group_size != 32 && conversion.group_size != 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--weight_group_size=", conversion.group_size, ": expected 32 or 64"));
  }
  options.kv_cache_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  options.kv_block_size = absl::GetFlag(FLAGS_kv_block_size);
  if (options.kv_cache_tokens < 0 || options.kv_block_size <= 0) {
    return absl::InvalidArgumentError(
        "--kv_cache_tokens must be >= 0 and --kv_block_size > 0");
  }
  return options;
}

}  // namespace ringmoe::server

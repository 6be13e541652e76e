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
          "Weight format after loading: auto (as stored), bf16, f16, f32, "
          "int8, int4.");
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
  const std::string dtype = absl::GetFlag(FLAGS_weight_dtype);
  if (dtype != "auto") {
    return absl::UnimplementedError(absl::StrCat(
        "--weight_dtype=", dtype,
        ": converting weights on load is not available yet; use auto"));
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

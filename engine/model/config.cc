#include "engine/model/config.h"

#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "engine/model/architecture.h"
#include "nlohmann/json.hpp"

namespace ringmoe::model {
namespace {

absl::StatusOr<RopeScaling> ParseRopeScaling(const nlohmann::json& config,
                                             int64_t max_positions) {
  constexpr absl::string_view kPath = "rope_scaling";
  RopeScaling rope;
  auto it = config.find(kPath);
  if (it == config.end() || it->is_null()) return rope;
  const nlohmann::json& s = *it;
  if (!s.is_object()) {
    return absl::InvalidArgumentError(
        "field 'rope_scaling' must be an object or null");
  }
  ASSIGN_OR_RETURN(std::optional<std::string> type,
                   json::GetOptionalString(s, "rope_type", kPath));
  if (!type) {
    ASSIGN_OR_RETURN(type, json::GetOptionalString(s, "type", kPath));
  }
  const std::string kind = type.value_or("default");
  if (kind == "default") return rope;
  if (kind == "linear") {
    rope.type = RopeScalingType::kLinear;
  } else if (kind == "yarn") {
    rope.type = RopeScalingType::kYarn;
  } else if (kind == "llama3") {
    rope.type = RopeScalingType::kLlama3;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        "rope_scaling type '", kind,
        "' is not supported (supported: default, linear, yarn, llama3)"));
  }
  ASSIGN_OR_RETURN(std::optional<double> factor,
                   json::GetOptionalDouble(s, "factor", kPath));
  if (!factor || *factor <= 0) {
    return absl::InvalidArgumentError("rope_scaling needs a positive 'factor'");
  }
  rope.factor = *factor;
  ASSIGN_OR_RETURN(
      std::optional<int64_t> original,
      json::GetOptionalInt(s, "original_max_position_embeddings", kPath));
  rope.original_max_position_embeddings = original.value_or(max_positions);
  ASSIGN_OR_RETURN(std::optional<double> beta_fast,
                   json::GetOptionalDouble(s, "beta_fast", kPath));
  ASSIGN_OR_RETURN(std::optional<double> beta_slow,
                   json::GetOptionalDouble(s, "beta_slow", kPath));
  ASSIGN_OR_RETURN(rope.attention_factor,
                   json::GetOptionalDouble(s, "attention_factor", kPath));
  ASSIGN_OR_RETURN(std::optional<double> mscale,
                   json::GetOptionalDouble(s, "mscale", kPath));
  ASSIGN_OR_RETURN(std::optional<double> mscale_all_dim,
                   json::GetOptionalDouble(s, "mscale_all_dim", kPath));
  ASSIGN_OR_RETURN(std::optional<bool> truncate,
                   json::GetOptionalBool(s, "truncate", kPath));
  ASSIGN_OR_RETURN(std::optional<double> low,
                   json::GetOptionalDouble(s, "low_freq_factor", kPath));
  ASSIGN_OR_RETURN(std::optional<double> high,
                   json::GetOptionalDouble(s, "high_freq_factor", kPath));
  rope.beta_fast = beta_fast.value_or(32.0);
  rope.beta_slow = beta_slow.value_or(1.0);
  rope.mscale = mscale.value_or(0.0);
  rope.mscale_all_dim = mscale_all_dim.value_or(0.0);
  rope.truncate = truncate.value_or(true);
  rope.low_freq_factor = low.value_or(1.0);
  rope.high_freq_factor = high.value_or(4.0);
  if (rope.type == RopeScalingType::kLlama3 &&
      rope.high_freq_factor <= rope.low_freq_factor) {
    return absl::InvalidArgumentError(
        "rope_scaling llama3 needs high_freq_factor > low_freq_factor");
  }
  return rope;
}

bool IsPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// quantization_config: the block-scaled fp8 layout DeepSeek-V3 ships
// (quant_method fp8, fmt e4m3, weight_block_size [rows, cols]) or gpt-oss's
// MXFP4 experts (quant_method mxfp4, whose block of 32 is fixed).
absl::Status ParseQuantization(const nlohmann::json& config, ModelSpec* spec) {
  constexpr absl::string_view kPath = "quantization_config";
  auto it = config.find(kPath);
  if (it == config.end() || it->is_null()) return absl::OkStatus();
  const nlohmann::json& q = *it;
  if (!q.is_object()) {
    return absl::InvalidArgumentError(
        "field 'quantization_config' must be an object");
  }
  ASSIGN_OR_RETURN(std::optional<std::string> method,
                   json::GetOptionalString(q, "quant_method", kPath));
  if (method == "mxfp4") {
    spec->mxfp4 = true;
    return absl::OkStatus();
  }
  if (method != "fp8") {
    return absl::UnimplementedError(
        absl::StrCat("quantization_config.quant_method '", method.value_or(""),
                     "' is not supported (supported: fp8, mxfp4)"));
  }
  ASSIGN_OR_RETURN(std::optional<std::string> fmt,
                   json::GetOptionalString(q, "fmt", kPath));
  if (fmt.value_or("e4m3") != "e4m3") {
    return absl::UnimplementedError(
        absl::StrCat("quantization_config.fmt '", *fmt,
                     "' is not supported (supported: e4m3)"));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> block,
                   json::GetIntOrIntList(q, "weight_block_size", kPath));
  if (block.size() != 2 || !IsPowerOfTwo(block[0]) || !IsPowerOfTwo(block[1]) ||
      block[1] < 8) {
    return absl::InvalidArgumentError(
        "quantization_config.weight_block_size must be [rows, cols], powers "
        "of two with cols >= 8 (DeepSeek-V3: [128, 128])");
  }
  spec->fp8 = {block[0], block[1]};
  return absl::OkStatus();
}

// Dimensions up to 2^20 (four times any real model's) keep every product of
// three of them within int64.
absl::Status CheckDimension(absl::string_view name, int64_t value) {
  constexpr int64_t kMaxDimension = int64_t{1} << 20;
  if (value > kMaxDimension) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " is ", value, ", more than the supported ", kMaxDimension));
  }
  return absl::OkStatus();
}

absl::Status ParseCommon(const nlohmann::json& config, ModelSpec* spec) {
  ASSIGN_OR_RETURN(spec->vocab_size,
                   json::GetPositiveInt(config, "vocab_size"));
  ASSIGN_OR_RETURN(spec->hidden_size,
                   json::GetPositiveInt(config, "hidden_size"));
  ASSIGN_OR_RETURN(spec->num_layers,
                   json::GetPositiveInt(config, "num_hidden_layers"));
  ASSIGN_OR_RETURN(spec->num_heads,
                   json::GetPositiveInt(config, "num_attention_heads"));
  ASSIGN_OR_RETURN(std::optional<int64_t> kv_heads,
                   json::GetOptionalInt(config, "num_key_value_heads"));
  spec->num_kv_heads = kv_heads.value_or(spec->num_heads);
  ASSIGN_OR_RETURN(std::optional<int64_t> head_dim,
                   json::GetOptionalInt(config, "head_dim"));
  spec->head_dim = head_dim.value_or(spec->hidden_size / spec->num_heads);
  ASSIGN_OR_RETURN(std::optional<int64_t> max_positions,
                   json::GetOptionalInt(config, "max_position_embeddings"));
  spec->max_position_embeddings = max_positions.value_or(4096);
  ASSIGN_OR_RETURN(std::optional<double> eps,
                   json::GetOptionalDouble(config, "rms_norm_eps"));
  spec->rms_norm_eps = eps.value_or(1e-6);
  ASSIGN_OR_RETURN(std::optional<double> theta,
                   json::GetOptionalDouble(config, "rope_theta"));
  spec->rope_theta = theta.value_or(10000.0);
  ASSIGN_OR_RETURN(spec->rope_scaling,
                   ParseRopeScaling(config, spec->max_position_embeddings));
  ASSIGN_OR_RETURN(std::optional<bool> tie,
                   json::GetOptionalBool(config, "tie_word_embeddings"));
  spec->tie_word_embeddings = tie.value_or(false);
  ASSIGN_OR_RETURN(std::optional<std::string> act,
                   json::GetOptionalString(config, "hidden_act"));
  if (act && *act != "silu") {
    return absl::UnimplementedError(
        absl::StrCat("hidden_act '", *act, "' is not supported (only silu)"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> bos,
                   json::GetOptionalInt(config, "bos_token_id"));
  if (bos) spec->bos_token_id = static_cast<int32_t>(*bos);
  ASSIGN_OR_RETURN(std::vector<int64_t> eos,
                   json::GetIntOrIntList(config, "eos_token_id"));
  spec->eos_token_ids.assign(eos.begin(), eos.end());

  // Values no real model has, which would only turn into huge allocations
  // or meaningless numbers later.
  constexpr int64_t kMaxLayers = 4096;
  constexpr int64_t kMaxPositions = int64_t{1} << 26;
  if (spec->num_layers > kMaxLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_hidden_layers is ", spec->num_layers,
                     ", more than the supported ", kMaxLayers));
  }
  if (spec->max_position_embeddings < 1 ||
      spec->max_position_embeddings > kMaxPositions) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_position_embeddings must lie in [1, ", kMaxPositions,
                     "], got ", spec->max_position_embeddings));
  }
  if (!(spec->rms_norm_eps > 0 && spec->rms_norm_eps < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rms_norm_eps must lie in (0, 1), got ", spec->rms_norm_eps));
  }
  if (!(spec->rope_theta > 0 && std::isfinite(spec->rope_theta))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope_theta must be positive and finite, got ", spec->rope_theta));
  }
  if (spec->num_kv_heads < 1 || spec->num_kv_heads > spec->num_heads) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_key_value_heads must lie in [1, num_attention_heads "
                     "(",
                     spec->num_heads, ")], got ", spec->num_kv_heads));
  }
  if (spec->num_heads % spec->num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads (", spec->num_heads,
                     ") is not a multiple of num_key_value_heads (",
                     spec->num_kv_heads, ")"));
  }
  // Found by fuzzing: unbounded sizes made ModelSpec's widths and the
  // loader's tensor sizes (products of two or three of them) overflow int64.
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"vocab_size", spec->vocab_size},
        {"hidden_size", spec->hidden_size},
        {"num_attention_heads", spec->num_heads},
        {"head_dim", spec->head_dim}}) {
    RETURN_IF_ERROR(CheckDimension(name, value));
  }
  return absl::OkStatus();
}

absl::Status CheckArchitectureFields(const ModelSpec& spec) {
  // Checked once the architecture has set it: MLA's per-head width is
  // qk_nope_head_dim + qk_rope_head_dim (only the rope part rotates, and
  // ParseMla checks that it is even), whatever hidden_size /
  // num_attention_heads would give.
  if (spec.head_dim <= 0 || (!spec.mla.has_value() && spec.head_dim % 2 != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim must be positive and even, got ", spec.head_dim));
  }
  if (spec.experts_per_token > spec.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_experts_per_tok (", spec.experts_per_token,
        ") exceeds the number of experts (", spec.num_experts, ")"));
  }
  // Named by meaning: each architecture has its own keys for these.
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"the number of experts",
                                        spec.num_experts},
        {"the dense MLP's intermediate size", spec.dense_intermediate_size},
        {"the experts' intermediate size", spec.expert_intermediate_size},
        {"the shared expert's intermediate size",
         spec.shared_expert_intermediate_size}}) {
    RETURN_IF_ERROR(CheckDimension(name, value));
  }
  if (spec.mla.has_value()) {
    for (const auto& [name, value] :
         {std::pair<const char*, int64_t>{"q_lora_rank", spec.mla->q_lora_rank},
          {"kv_lora_rank", spec.mla->kv_lora_rank},
          {"qk_nope_head_dim", spec.mla->qk_nope_head_dim},
          {"qk_rope_head_dim", spec.mla->qk_rope_head_dim},
          {"v_head_dim", spec.mla->v_head_dim}}) {
      RETURN_IF_ERROR(CheckDimension(name, value));
    }
  }
  if (static_cast<int64_t>(spec.layer_is_moe.size()) != spec.num_layers) {
    return absl::InternalError("layer kinds not set by the architecture");
  }
  if (static_cast<int64_t>(spec.layer_sliding_window.size()) !=
      spec.num_layers) {
    return absl::InternalError("layer windows not set by the architecture");
  }
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    // A window no sequence can fill is a mistake in the config, not a
    // request for full attention.
    if (spec.SlidingWindow(l) > spec.max_position_embeddings) {
      return absl::InvalidArgumentError(
          absl::StrCat("sliding_window (", spec.SlidingWindow(l), ") of layer ",
                       l, " exceeds the context, max_position_embeddings (",
                       spec.max_position_embeddings, ")"));
    }
  }
  return absl::OkStatus();
}

// `text` as a JSON object; errors name `source`.
absl::StatusOr<nlohmann::json> ParseObject(absl::string_view text,
                                           absl::string_view source) {
  absl::StatusOr<nlohmann::json> parsed = json::Parse(text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": not a valid JSON object: ", parsed.status().message()));
  }
  if (!parsed->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a valid JSON object (a JSON ",
                     parsed->type_name(), ")"));
  }
  return parsed;
}

absl::Status WithSource(const absl::Status& status, absl::string_view source) {
  return absl::Status(status.code(),
                      absl::StrCat(source, ": ", status.message()));
}

}  // namespace

absl::StatusOr<ModelSpec> ParseModelConfig(absl::string_view json_text,
                                           absl::string_view source) {
  ASSIGN_OR_RETURN(const nlohmann::json config, ParseObject(json_text, source));
  ModelSpec spec;
  auto archs = config.find("architectures");
  if (archs == config.end() || !archs->is_array() || archs->empty() ||
      !(*archs)[0].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": missing 'architectures' (a list naming the model class)"));
  }
  spec.architecture = (*archs)[0].get<std::string>();
  absl::StatusOr<const Architecture*> arch =
      FindArchitecture(spec.architecture);
  if (!arch.ok()) return WithSource(arch.status(), source);
  absl::Status status = ParseCommon(config, &spec);
  if (status.ok()) status = ParseQuantization(config, &spec);
  if (status.ok()) status = (*arch)->ParseConfig(config, &spec);
  if (status.ok()) status = CheckArchitectureFields(spec);
  if (!status.ok()) return WithSource(status, source);
  return spec;
}

absl::StatusOr<ModelSpec> LoadModelConfig(const std::string& model_dir) {
  const std::string path = absl::StrCat(model_dir, "/config.json");
  ASSIGN_OR_RETURN(const std::string text, ReadFileToString(path));
  ASSIGN_OR_RETURN(ModelSpec spec, ParseModelConfig(text, path));
  const std::string gen_path =
      absl::StrCat(model_dir, "/generation_config.json");
  absl::StatusOr<std::string> gen_text = ReadFileToString(gen_path);
  if (!gen_text.ok()) return spec;
  ASSIGN_OR_RETURN(const nlohmann::json gen, ParseObject(*gen_text, gen_path));
  absl::StatusOr<std::vector<int64_t>> eos =
      json::GetIntOrIntList(gen, "eos_token_id");
  if (!eos.ok()) return WithSource(eos.status(), gen_path);
  if (!eos->empty()) spec.eos_token_ids.assign(eos->begin(), eos->end());
  absl::StatusOr<std::optional<int64_t>> bos =
      json::GetOptionalInt(gen, "bos_token_id");
  if (!bos.ok()) return WithSource(bos.status(), gen_path);
  if (bos->has_value()) spec.bos_token_id = static_cast<int32_t>(**bos);
  return spec;
}

}  // namespace ringmoe::model

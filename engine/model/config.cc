#include "engine/model/config.h"

#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/model/architecture.h"
#include "engine/model/json_fields.h"
#include "nlohmann/json.hpp"

namespace ringmoe::model {
namespace {

absl::StatusOr<RopeScaling> ParseRopeScaling(const nlohmann::json& config,
                                             int64_t max_positions) {
  RopeScaling rope;
  auto it = config.find("rope_scaling");
  if (it == config.end() || it->is_null()) return rope;
  const nlohmann::json& s = *it;
  if (!s.is_object()) {
    return absl::InvalidArgumentError(
        "field 'rope_scaling' must be an object or null");
  }
  ASSIGN_OR_RETURN(std::optional<std::string> type,
                   OptionalString(s, "rope_type"));
  if (!type) {
    ASSIGN_OR_RETURN(type, OptionalString(s, "type"));
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
  ASSIGN_OR_RETURN(std::optional<double> factor, OptionalDouble(s, "factor"));
  if (!factor || *factor <= 0) {
    return absl::InvalidArgumentError("rope_scaling needs a positive 'factor'");
  }
  rope.factor = *factor;
  ASSIGN_OR_RETURN(std::optional<int64_t> original,
                   OptionalInt(s, "original_max_position_embeddings"));
  rope.original_max_position_embeddings = original.value_or(max_positions);
  ASSIGN_OR_RETURN(std::optional<double> beta_fast,
                   OptionalDouble(s, "beta_fast"));
  ASSIGN_OR_RETURN(std::optional<double> beta_slow,
                   OptionalDouble(s, "beta_slow"));
  ASSIGN_OR_RETURN(rope.attention_factor,
                   OptionalDouble(s, "attention_factor"));
  ASSIGN_OR_RETURN(std::optional<double> mscale, OptionalDouble(s, "mscale"));
  ASSIGN_OR_RETURN(std::optional<double> mscale_all_dim,
                   OptionalDouble(s, "mscale_all_dim"));
  ASSIGN_OR_RETURN(std::optional<bool> truncate, OptionalBool(s, "truncate"));
  ASSIGN_OR_RETURN(std::optional<double> low,
                   OptionalDouble(s, "low_freq_factor"));
  ASSIGN_OR_RETURN(std::optional<double> high,
                   OptionalDouble(s, "high_freq_factor"));
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
// (quant_method fp8, fmt e4m3, weight_block_size [rows, cols]).
absl::Status ParseQuantization(const nlohmann::json& config, ModelSpec* spec) {
  auto it = config.find("quantization_config");
  if (it == config.end() || it->is_null()) return absl::OkStatus();
  const nlohmann::json& q = *it;
  if (!q.is_object()) {
    return absl::InvalidArgumentError(
        "field 'quantization_config' must be an object");
  }
  ASSIGN_OR_RETURN(std::optional<std::string> method,
                   OptionalString(q, "quant_method"));
  if (method != "fp8") {
    return absl::UnimplementedError(
        absl::StrCat("quantization_config.quant_method '", method.value_or(""),
                     "' is not supported (supported: fp8)"));
  }
  ASSIGN_OR_RETURN(std::optional<std::string> fmt, OptionalString(q, "fmt"));
  if (fmt.value_or("e4m3") != "e4m3") {
    return absl::UnimplementedError(
        absl::StrCat("quantization_config.fmt '", *fmt,
                     "' is not supported (supported: e4m3)"));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> block,
                   IntOrIntList(q, "weight_block_size"));
  if (block.size() != 2 || !IsPowerOfTwo(block[0]) || !IsPowerOfTwo(block[1]) ||
      block[1] < 8) {
    return absl::InvalidArgumentError(
        "quantization_config.weight_block_size must be [rows, cols], powers "
        "of two with cols >= 8 (DeepSeek-V3: [128, 128])");
  }
  spec->fp8 = {block[0], block[1]};
  return absl::OkStatus();
}

absl::Status ParseCommon(const nlohmann::json& config, ModelSpec* spec) {
  ASSIGN_OR_RETURN(spec->vocab_size, RequiredInt(config, "vocab_size"));
  ASSIGN_OR_RETURN(spec->hidden_size, RequiredInt(config, "hidden_size"));
  ASSIGN_OR_RETURN(spec->num_layers, RequiredInt(config, "num_hidden_layers"));
  ASSIGN_OR_RETURN(spec->num_heads, RequiredInt(config, "num_attention_heads"));
  ASSIGN_OR_RETURN(std::optional<int64_t> kv_heads,
                   OptionalInt(config, "num_key_value_heads"));
  spec->num_kv_heads = kv_heads.value_or(spec->num_heads);
  ASSIGN_OR_RETURN(std::optional<int64_t> head_dim,
                   OptionalInt(config, "head_dim"));
  spec->head_dim = head_dim.value_or(spec->hidden_size / spec->num_heads);
  ASSIGN_OR_RETURN(std::optional<int64_t> max_positions,
                   OptionalInt(config, "max_position_embeddings"));
  spec->max_position_embeddings = max_positions.value_or(4096);
  ASSIGN_OR_RETURN(std::optional<double> eps,
                   OptionalDouble(config, "rms_norm_eps"));
  spec->rms_norm_eps = eps.value_or(1e-6);
  ASSIGN_OR_RETURN(std::optional<double> theta,
                   OptionalDouble(config, "rope_theta"));
  spec->rope_theta = theta.value_or(10000.0);
  ASSIGN_OR_RETURN(spec->rope_scaling,
                   ParseRopeScaling(config, spec->max_position_embeddings));
  ASSIGN_OR_RETURN(std::optional<bool> tie,
                   OptionalBool(config, "tie_word_embeddings"));
  spec->tie_word_embeddings = tie.value_or(false);
  ASSIGN_OR_RETURN(std::optional<std::string> act,
                   OptionalString(config, "hidden_act"));
  if (act && *act != "silu") {
    return absl::UnimplementedError(
        absl::StrCat("hidden_act '", *act, "' is not supported (only silu)"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> bos,
                   OptionalInt(config, "bos_token_id"));
  if (bos) spec->bos_token_id = static_cast<int32_t>(*bos);
  ASSIGN_OR_RETURN(std::vector<int64_t> eos,
                   IntOrIntList(config, "eos_token_id"));
  spec->eos_token_ids.assign(eos.begin(), eos.end());

  if (spec->num_heads % spec->num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_attention_heads (", spec->num_heads,
                     ") is not a multiple of num_key_value_heads (",
                     spec->num_kv_heads, ")"));
  }
  if (spec->head_dim <= 0 || spec->head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim must be positive and even, got ", spec->head_dim));
  }
  return absl::OkStatus();
}

absl::Status CheckMoeFields(const ModelSpec& spec) {
  if (spec.experts_per_token > spec.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_experts_per_tok (", spec.experts_per_token,
        ") exceeds the number of experts (", spec.num_experts, ")"));
  }
  if (static_cast<int64_t>(spec.layer_is_moe.size()) != spec.num_layers) {
    return absl::InternalError("layer kinds not set by the architecture");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad())
    return absl::DataLossError(absl::StrCat("error reading ", path));
  return buffer.str();
}

absl::Status WithSource(const absl::Status& status, absl::string_view source) {
  return absl::Status(status.code(),
                      absl::StrCat(source, ": ", status.message()));
}

}  // namespace

absl::StatusOr<ModelSpec> ParseModelConfig(absl::string_view json_text,
                                           absl::string_view source) {
  nlohmann::json config = nlohmann::json::parse(json_text, nullptr, false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a valid JSON object"));
  }
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
  if (status.ok()) status = CheckMoeFields(spec);
  if (!status.ok()) return WithSource(status, source);
  return spec;
}

absl::StatusOr<ModelSpec> LoadModelConfig(const std::string& model_dir) {
  const std::string path = absl::StrCat(model_dir, "/config.json");
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(ModelSpec spec, ParseModelConfig(text, path));
  const std::string gen_path =
      absl::StrCat(model_dir, "/generation_config.json");
  absl::StatusOr<std::string> gen_text = ReadFile(gen_path);
  if (!gen_text.ok()) return spec;
  nlohmann::json gen = nlohmann::json::parse(*gen_text, nullptr, false);
  if (gen.is_discarded() || !gen.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(gen_path, ": not a valid JSON object"));
  }
  absl::StatusOr<std::vector<int64_t>> eos = IntOrIntList(gen, "eos_token_id");
  if (!eos.ok()) return WithSource(eos.status(), gen_path);
  if (!eos->empty()) spec.eos_token_ids.assign(eos->begin(), eos->end());
  absl::StatusOr<std::optional<int64_t>> bos = OptionalInt(gen, "bos_token_id");
  if (!bos.ok()) return WithSource(bos.status(), gen_path);
  if (bos->has_value()) spec.bos_token_id = static_cast<int32_t>(**bos);
  return spec;
}

}  // namespace ringmoe::model

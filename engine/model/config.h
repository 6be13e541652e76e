// Parsing a Hugging Face config.json into a ModelSpec.
#ifndef RINGMOE_ENGINE_MODEL_CONFIG_H_
#define RINGMOE_ENGINE_MODEL_CONFIG_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/model_spec.h"

namespace ringmoe::model {

// Parses config.json text; `source` (a path) prefixes every error.
absl::StatusOr<ModelSpec> ParseModelConfig(absl::string_view json_text,
                                           absl::string_view source);

// Reads DIR/config.json, and DIR/generation_config.json when present (its
// eos_token_id / bos_token_id take precedence, as in transformers).
absl::StatusOr<ModelSpec> LoadModelConfig(const std::string& model_dir);

}  // namespace ringmoe::model

#endif  // RINGMOE_ENGINE_MODEL_CONFIG_H_

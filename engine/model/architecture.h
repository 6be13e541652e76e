// Architecture: what differs between MoE model families — config keys,
// tensor names and flags. One small file per architecture (mixtral.cc,
// qwen2_moe.cc, qwen3_moe.cc, olmoe.cc, deepseek.cc, gpt_oss.cc) implements
// it.
#ifndef RINGMOE_ENGINE_MODEL_ARCHITECTURE_H_
#define RINGMOE_ENGINE_MODEL_ARCHITECTURE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/model_spec.h"
#include "nlohmann/json.hpp"

namespace ringmoe::model {

// The projections of one SiLU-gated MLP (an expert, the shared expert, or a
// dense layer): down(silu(gate(x)) * up(x)).
struct MlpTensorNames {
  std::string gate;
  std::string up;
  std::string down;
};

// All experts of a layer stored together, expert e at index e of each
// tensor (gpt-oss). The matrices are named by their stem: MXFP4 stores
// `<stem>_blocks` [E, rows, cols / 32, 16] beside `<stem>_scales`
// [E, rows, cols / 32], in PyTorch's [out, in] order; dense checkpoints
// store `<stem>` [E, cols, rows], the [in, out] order of transformers'
// fused expert parameters. gate_up's rows alternate gate and up.
struct FusedExpertTensorNames {
  std::string gate_up;       // [2 * intermediate, hidden] per expert
  std::string gate_up_bias;  // [E, 2 * intermediate]
  std::string down;          // [hidden, intermediate] per expert
  std::string down_bias;     // [E, hidden]
};

// The tensors of one grouped-query attention block. Biases and q/k norms
// are read when the spec says the model has them.
struct GqaTensorNames {
  std::string q_proj, k_proj, v_proj, o_proj;
  std::string q_bias, k_bias, v_bias, o_bias;
  std::string q_norm, k_norm;
  std::string sinks;
};

// The tensors outside the layers.
struct ModelTensorNames {
  std::string embed_tokens;
  std::string final_norm;
  std::string lm_head;  // may be absent when the embeddings are tied
};

// A layer's two RMSNorm weights: before attention and before the
// feed-forward block.
struct LayerNormTensorNames {
  std::string input;
  std::string post_attention;
};

// The tensors of one multi-head latent attention block. q_proj is used
// when the spec has no q_lora_rank, q_a_proj / q_a_norm / q_b_proj when it
// has one.
struct MlaTensorNames {
  std::string q_proj;
  std::string q_a_proj;
  std::string q_a_norm;
  std::string q_b_proj;
  std::string kv_a_proj;  // [kv_lora_rank + qk_rope_head_dim, hidden]
  std::string kv_a_norm;
  std::string kv_b_proj;  // [heads * (qk_nope_head_dim + v_head_dim), kv_lora]
  std::string o_proj;
};

class Architecture {
 public:
  virtual ~Architecture() = default;

  // The `architectures[0]` value of config.json this class handles.
  virtual absl::string_view name() const = 0;

  // Fills the architecture-specific fields of `spec` (MoE keys, flags);
  // the common fields are already parsed.
  virtual absl::Status ParseConfig(const nlohmann::json& config,
                                   ModelSpec* spec) const = 0;

  // Tensor names. The defaults are the Llama-style `model.layers.N.`
  // layout with `self_attn.` attention and the `mlp.` MoE block that
  // Qwen2-MoE, Qwen3-MoE and OLMoE use.
  virtual ModelTensorNames ModelTensors() const;
  virtual LayerNormTensorNames LayerNormTensors(int layer) const;
  virtual GqaTensorNames GqaTensors(int layer) const;
  virtual std::string RouterTensor(int layer) const;
  // The router's bias (spec.routing.router_bias); by default the router's
  // name with `bias` for its trailing `weight`.
  virtual std::string RouterBiasTensor(int layer) const;
  virtual MlpTensorNames ExpertTensors(int layer, int expert) const;
  // Set when the architecture stores a layer's experts in fused tensors;
  // ExpertTensors is then unused.
  virtual std::optional<FusedExpertTensorNames> FusedExpertTensors(
      int layer) const;
  // Empty names: the architecture has no shared expert.
  virtual MlpTensorNames SharedExpertTensors(int layer) const;
  virtual std::string SharedExpertGateTensor(int layer) const;
  virtual MlpTensorNames DenseMlpTensors(int layer) const;
  // The router's selection-only bias (spec.routing.selection_bias).
  virtual std::string ExpertScoreBiasTensor(int layer) const;
  // Architectures with spec.mla.
  virtual MlaTensorNames MlaTensors(int layer) const;
};

// The architecture registered under `name`, or NOT_FOUND listing the
// supported ones.
absl::StatusOr<const Architecture*> FindArchitecture(absl::string_view name);

// Names of every supported architecture.
std::vector<std::string> SupportedArchitectures();

// "model.layers.{layer}.{suffix}".
std::string LayerTensor(int layer, absl::string_view suffix);

// The gate_proj / up_proj / down_proj weights under
// "model.layers.{layer}.{prefix}".
MlpTensorNames GateUpDownTensors(int layer, absl::string_view prefix);

}  // namespace ringmoe::model

#endif  // RINGMOE_ENGINE_MODEL_ARCHITECTURE_H_

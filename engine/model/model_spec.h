// ModelSpec: the shape and semantics of a decoder-only MoE model, parsed from
// a Hugging Face config.json. Everything the forward pass needs to know about
// an architecture is a field here; tensor names live in Architecture.
#ifndef RINGMOE_ENGINE_MODEL_MODEL_SPEC_H_
#define RINGMOE_ENGINE_MODEL_MODEL_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ringmoe::model {

// Where query/key RMSNorm is applied, if at all.
enum class QkNorm {
  kNone,
  kPerHead,          // weight [head_dim], each head normalised separately
  kWholeProjection,  // weight [heads * head_dim], the whole q (k) vector
};

enum class RopeScalingType { kNone, kLinear, kYarn, kLlama3 };

// The `rope_scaling` kinds these models' configs use.
struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  // YaRN.
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  std::optional<double> attention_factor;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;
  // Llama 3.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
};

struct ModelSpec {
  std::string architecture;  // architectures[0], e.g. "MixtralForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;       // q/k/v projections carry biases
  bool o_proj_bias = false;    // the output projection carries a bias
  double clip_qkv = 0.0;       // > 0: clamp q, k, v to [-clip, clip] (OLMoE)
  int64_t sliding_window = 0;  // > 0: attend to the last N positions only
  QkNorm qk_norm = QkNorm::kNone;

  // Mixture of experts.
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t expert_intermediate_size = 0;
  bool norm_topk_prob = true;  // renormalise the top-k router weights
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  // Per layer: true for a sparse MoE block, false for a dense MLP of
  // dense_intermediate_size (decoder_sparse_step, mlp_only_layers).
  std::vector<bool> layer_is_moe;
  int64_t dense_intermediate_size = 0;

  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;

  int64_t q_width() const { return num_heads * head_dim; }
  int64_t kv_width() const { return num_kv_heads * head_dim; }
};

}  // namespace ringmoe::model

#endif  // RINGMOE_ENGINE_MODEL_MODEL_SPEC_H_

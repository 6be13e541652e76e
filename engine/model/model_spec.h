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

// How a MoE layer turns its router logits into experts and weights
// (moe::Router implements it).
enum class RouterScoring {
  kSoftmax,  // probabilities: softmax over all experts
  kSigmoid,  // independent scores: sigmoid of each logit (DeepSeek-V3)
};
// How a group of experts is scored when selection is group-limited.
enum class GroupScoring {
  kMax,        // its best score (DeepSeek-V2 group_limited_greedy)
  kTopTwoSum,  // the sum of its two best scores (DeepSeek-V3 noaux_tc)
};
// When the k experts are chosen.
enum class RouterOrder {
  kScoreThenTopK,    // scores of all experts, then the top k of them
  kTopKThenSoftmax,  // the top k logits, then a softmax over those k only
                     // (gpt-oss; scoring is ignored)
};
struct RoutingSpec {
  RouterScoring scoring = RouterScoring::kSoftmax;
  RouterOrder order = RouterOrder::kScoreThenTopK;
  // The router is a linear layer with a bias (LayerWeights::router_bias),
  // added to every token's logits.
  bool router_bias = false;
  // Experts come in num_groups contiguous groups; only the topk_groups best
  // groups are eligible. 1 / 1: plain top-k.
  int64_t num_groups = 1;
  int64_t topk_groups = 1;
  GroupScoring group_scoring = GroupScoring::kMax;
  // Divide the k weights by their sum (Hugging Face's norm_topk_prob).
  bool renormalize = true;
  // Multiplies the final weights (DeepSeek's routed_scaling_factor).
  double scaling_factor = 1.0;
  // A per-expert bias (LayerWeights::expert_score_bias) is added to the
  // scores for selection only; the weights use the unbiased scores.
  bool selection_bias = false;
};

// Multi-head latent attention (DeepSeek-V2/V3): keys and values are
// up-projected from a per-token latent of kv_lora_rank values, which is what
// the KV cache holds, beside one rotary key of qk_rope_head_dim shared by
// all heads.
struct MlaSpec {
  int64_t q_lora_rank = 0;  // 0: a plain q_proj, no query compression
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t qk_head_dim() const { return qk_nope_head_dim + qk_rope_head_dim; }
  // A cached row: the normalised latent, then the rotated shared key.
  int64_t cache_width() const { return kv_lora_rank + qk_rope_head_dim; }
};

// The block-scaled float8 layout of a checkpoint (quantization_config with
// quant_method fp8): F8_E4M3 weights beside F32 `<name>_scale_inv`.
struct Fp8BlockSpec {
  int64_t block_rows = 0;  // 0: the checkpoint has no fp8 weights
  int64_t block_cols = 0;
};

// gpt-oss's expert activation: g' = min(g, limit), u' = clamp(u, -limit,
// limit), (u' + 1) * g' * sigmoid(alpha * g').
struct ClampedSwiglu {
  double alpha = 1.702;
  double limit = 7.0;
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
  bool qkv_bias = false;     // q/k/v projections carry biases
  bool o_proj_bias = false;  // the output projection carries a bias
  double clip_qkv = 0.0;     // > 0: clamp q, k, v to [-clip, clip] (OLMoE)
  // Per layer: the attention window W, or 0 for full attention. Under a
  // window the query at position p attends positions [p + 1 - W, p] clipped
  // at 0 (W positions, its own included), so the KV cache can drop a
  // layer's keys once every later query is past them.
  std::vector<int64_t> layer_sliding_window;
  QkNorm qk_norm = QkNorm::kNone;
  // Each query head has a learned sink logit in its softmax denominator
  // (gpt-oss; LayerWeights::sinks).
  bool attention_sinks = false;
  // Rotary pairs: dimensions (2i, 2i+1) (DeepSeek) instead of (i, i + d/2).
  bool rope_interleaved = false;
  // Set (kv_lora_rank > 0) for multi-head latent attention, which replaces
  // the q/k/v projections, head_dim and num_kv_heads.
  std::optional<MlaSpec> mla;
  Fp8BlockSpec fp8;
  // quantization_config with quant_method mxfp4: expert matrices may be
  // stored as `<name>_blocks` (U8, two e2m1 values per byte, low nibble
  // first, 16 bytes per 32 values) beside `<name>_scales` (U8 e8m0, one per
  // 32 values).
  bool mxfp4 = false;

  // Mixture of experts.
  int64_t num_experts = 0;
  int64_t experts_per_token = 0;
  int64_t expert_intermediate_size = 0;
  // The experts' activation; unset: silu(gate) * up.
  std::optional<ClampedSwiglu> expert_swiglu;
  RoutingSpec routing;
  int64_t shared_expert_intermediate_size = 0;  // 0: no shared expert
  // The shared expert's output is scaled by sigmoid(shared_expert_gate · x)
  // (Qwen2-MoE); otherwise added as it is (DeepSeek).
  bool shared_expert_gated = false;
  // Per layer: true for a sparse MoE block, false for a dense MLP of
  // dense_intermediate_size (decoder_sparse_step, mlp_only_layers).
  std::vector<bool> layer_is_moe;
  int64_t dense_intermediate_size = 0;

  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;

  int64_t SlidingWindow(int64_t layer) const {
    return layer_sliding_window[layer];
  }
  int64_t q_width() const { return num_heads * head_dim; }
  int64_t kv_width() const { return num_kv_heads * head_dim; }
  // Floats per position and layer the KV cache holds for keys and for
  // values (MLA: the latent row, which serves as both; no value row).
  int64_t cache_key_width() const {
    return mla ? mla->cache_width() : kv_width();
  }
  int64_t cache_value_width() const { return mla ? 0 : kv_width(); }
  // Dimensions the rotary embedding rotates per head.
  int64_t rotary_dim() const { return mla ? mla->qk_rope_head_dim : head_dim; }
};

}  // namespace ringmoe::model

#endif  // RINGMOE_ENGINE_MODEL_MODEL_SPEC_H_

// ModelWeights: every tensor the forward pass reads, bound by name from a
// checkpoint and checked for shape and dtype before anything runs. Matrices
// are zero-copy views (backend::Weight) into the memory-mapped checkpoint,
// kept in the format it stores (experts sliced out of fused [E, ...]
// tensors included), except dense fused experts stored [in, out], which are
// transposed once; the small vectors (norms, biases) are widened to float32
// once.
#ifndef RINGMOE_ENGINE_MODEL_MODEL_WEIGHTS_H_
#define RINGMOE_ENGINE_MODEL_MODEL_WEIGHTS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "base/host_memory.h"
#include "base/thread_pool.h"
#include "engine/backend/backend.h"
#include "engine/backend/weight.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/model/architecture.h"
#include "engine/model/model_spec.h"

namespace ringmoe::model {

using backend::MlpWeights;
using backend::Vector;
using backend::Weight;

// Multi-head latent attention (spec.mla).
struct MlaWeights {
  Weight q;          // [heads * qk_head_dim, hidden], no q_lora
  Weight q_a;        // [q_lora_rank, hidden]
  Vector q_a_norm;   // [q_lora_rank]
  Weight q_b;        // [heads * qk_head_dim, q_lora_rank]
  Weight kv_a;       // [kv_lora_rank + qk_rope_head_dim, hidden]
  Vector kv_a_norm;  // [kv_lora_rank]
  Weight kv_b;       // [heads * (qk_nope_head_dim + v_head_dim), kv_lora]
};

struct LayerWeights {
  Vector input_norm;
  Vector post_attention_norm;
  // Grouped-query attention; o also serves MLA.
  Weight q, k, v, o;
  MlaWeights mla;
  // Empty when the architecture has none.
  Vector q_bias, k_bias, v_bias, o_bias;
  Vector q_norm, k_norm;
  Vector sinks;  // [num_heads] when spec.attention_sinks

  bool is_moe = true;
  Weight router;       // [num_experts, hidden]
  Vector router_bias;  // [num_experts]; empty when the router has none
  // [num_experts], added to the scores for selection only; empty if none.
  Vector expert_score_bias;
  std::vector<MlpWeights> experts;
  bool has_shared_expert = false;
  MlpWeights shared_expert;
  // [hidden]: one logit per token; empty when the shared expert is ungated.
  Vector shared_expert_gate;
  MlpWeights dense_mlp;  // when !is_moe
};

struct ModelWeights {
  Weight embed_tokens;  // [vocab, hidden]
  Weight lm_head;       // [vocab, hidden]; embed_tokens when tied
  Vector final_norm;
  std::vector<LayerWeights> layers;
  // Memory the weights above point into other than the checkpoint's
  // mapping: the widened vectors, copies of misaligned scales and converted
  // weights (ConvertWeights; each MLP's three matrices, data and scales,
  // share one buffer so an expert stays a self-contained region).
  std::vector<HostMemory> owned;
  // Checkpoint bytes copied only to align them (float32 block scales at an
  // offset the file does not align): copy -> the mapped bytes it holds, so
  // the memory ring still finds them in the checkpoint's files.
  absl::flat_hash_map<const void*, const void*> aligned_copy_of;
};

// Every matrix of `mlp` that is bound (gate and up, or the fused gate_up;
// down). Inline storage: the memory ring takes a view of every streamed
// expert it runs.
absl::InlinedVector<Weight*, 3> MlpMatrices(MlpWeights* mlp);

// Every attention matrix of `layer` that is bound (GQA's or MLA's).
std::vector<Weight*> AttentionMatrices(LayerWeights* layer);
std::vector<const Weight*> AttentionMatrices(const LayerWeights& layer);

// How weights are stored after loading.
struct WeightConversion {
  // Type of every MLP matrix (experts, shared experts, dense MLPs); nullopt
  // keeps the checkpoint's.
  std::optional<backend::WeightType> mlp_type;
  // Also convert the attention projections (q, k, v, o) to mlp_type.
  bool attention = false;
  // Also convert lm_head (and the embedding, where tied to it) to mlp_type:
  // it is read whole for every token, a large share of decode's bytes.
  bool lm_head = false;
  int32_t group_size = 32;  // int8 and int4: columns per scale, 32 or 64
};

// Binds every tensor `spec` needs. Errors name the checkpoint and the tensor:
// a missing tensor, a wrong shape, or a dtype other than F32/BF16/F16 or,
// for matrices of a checkpoint with spec.fp8, F8_E4M3 with its F32
// `<name>_scale_inv` of [ceil(rows / block_rows), ceil(cols / block_cols)],
// or, for fused experts of a checkpoint with spec.mxfp4, U8 `<stem>_blocks`
// with its U8 `<stem>_scales` (FusedExpertTensorNames).
absl::StatusOr<ModelWeights> BindModelWeights(
    const ModelSpec& spec, const Architecture& arch,
    const checkpoint::Checkpoint& checkpoint);

// Converts (quantizes) the weights `conversion` names, in place, spreading
// the work over `pool` (may be null). INVALID_ARGUMENT for a bad group size.
absl::Status ConvertWeights(const WeightConversion& conversion,
                            ThreadPool* pool, ModelWeights* weights);

// A copy of `host` whose matrices and vectors lie in `backend`'s weight
// memory, uploaded there (the backend owns the copies; a matrix shared by
// two fields, such as a tied lm_head, is uploaded once). The experts'
// selection biases stay in host memory, where routing reads them, copied:
// the result does not depend on `host` staying alive. With
// `expert_on_device` ([layer][expert]), the routed experts it marks false
// keep their host views (an expert executor runs them elsewhere). Fails,
// naming what did not fit, when the backend has no room.
absl::StatusOr<ModelWeights> UploadWeights(
    const ModelWeights& host, backend::Backend& backend,
    const std::vector<std::vector<bool>>* expert_on_device = nullptr);

// Bytes UploadWeights moves for everything but the routed experts.
uint64_t NonExpertBytes(const ModelWeights& weights);

// Maps in now every page of the matrices a step reads whole (all but the
// embedding table, of which a step reads one row per token), so that no
// request pays the page faults of weights read straight from the
// checkpoint's mapping: an expert first routed to hours after start would
// otherwise fault in megabytes inside a decode step. For weights that stay
// resident; the memory ring manages streamed ones. With `experts`, only
// those routed experts of each layer (expert parallelism: the others run on
// other ranks, and their pages are never read here).
void PrefaultWeights(const ModelWeights& weights,
                     const std::vector<int32_t>* experts = nullptr);

// Copies the weights of every bound matrix (data and scales) that lie in
// `checkpoint`'s mapping into one new buffer of host memory, in 2 MiB pages
// where the host gives them (base/host_memory.h), and points the matrices
// there: the embedding table, lm_head, attention, routers, shared and
// dense MLPs, and the routed experts routed(layer, expert) accepts (the
// others keep their views of the mapping, for the memory ring or another
// rank). Reads through a mapping's 4 KiB pages miss the TLB that much more
// often (docs/PERFORMANCE.md). Copies on `pool` (may be null); the buffer
// joins weights->owned. RESOURCE_EXHAUSTED, naming the checkpoint and the
// bytes, when the host has no memory for it.
absl::Status CopyOutOfCheckpoint(
    const checkpoint::Checkpoint& checkpoint,
    const std::function<bool(int layer, int expert)>& routed, ThreadPool* pool,
    ModelWeights* weights);

// The types of the matrices a step multiplies (every bound matrix but the
// embedding table), each once, in WeightType order, with the bytes of
// weights (DataBytes: no scales) of that type.
std::vector<std::pair<kernels::WeightType, int64_t>> ProductWeightBytes(
    const ModelWeights& weights);

}  // namespace ringmoe::model

#endif  // RINGMOE_ENGINE_MODEL_MODEL_WEIGHTS_H_

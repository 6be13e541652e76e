#include "engine/model/model_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace ringmoe::model {
namespace {

using checkpoint::DType;
using checkpoint::TensorView;

class Binder {
 public:
  explicit Binder(const checkpoint::Checkpoint& ckpt) : ckpt_(ckpt) {}

  absl::StatusOr<kernels::Matrix> Matrix(const std::string& name, int64_t rows,
                                         int64_t cols) {
    ASSIGN_OR_RETURN(const TensorView* t, Tensor(name, {rows, cols}));
    ASSIGN_OR_RETURN(kernels::WeightType type, WeightTypeOf(*t));
    return kernels::Matrix{t->data, type, rows, cols};
  }

  absl::StatusOr<std::vector<float>> Vector(const std::string& name,
                                            int64_t size) {
    ASSIGN_OR_RETURN(const TensorView* t, Tensor(name, {size}));
    RETURN_IF_ERROR(WeightTypeOf(*t).status());
    return checkpoint::CopyAsFloat32(*t);
  }

  // A [1, size] tensor read as a vector (Linear(hidden, 1) weights).
  absl::StatusOr<std::vector<float>> RowVector(const std::string& name,
                                               int64_t size) {
    ASSIGN_OR_RETURN(const TensorView* t, Tensor(name, {1, size}));
    RETURN_IF_ERROR(WeightTypeOf(*t).status());
    return checkpoint::CopyAsFloat32(*t);
  }

  absl::StatusOr<MlpWeights> Mlp(const MlpTensorNames& names, int64_t hidden,
                                 int64_t intermediate) {
    MlpWeights mlp;
    ASSIGN_OR_RETURN(mlp.gate, Matrix(names.gate, intermediate, hidden));
    ASSIGN_OR_RETURN(mlp.up, Matrix(names.up, intermediate, hidden));
    ASSIGN_OR_RETURN(mlp.down, Matrix(names.down, hidden, intermediate));
    return mlp;
  }

  bool Has(const std::string& name) const {
    return ckpt_.Find(name) != nullptr;
  }

 private:
  absl::StatusOr<const TensorView*> Tensor(const std::string& name,
                                           const std::vector<int64_t>& shape) {
    const TensorView* t = ckpt_.Find(name);
    if (t == nullptr) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", ckpt_.dir(),
                                              ": missing tensor '", name, "'"));
    }
    if (t->shape != shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint ", ckpt_.dir(), ": tensor '", name,
                       "' has shape [", absl::StrJoin(t->shape, ", "),
                       "], expected [", absl::StrJoin(shape, ", "), "]"));
    }
    return t;
  }

  absl::StatusOr<kernels::WeightType> WeightTypeOf(const TensorView& t) const {
    switch (t.dtype) {
      case DType::kF32:
        return kernels::WeightType::kF32;
      case DType::kBF16:
        return kernels::WeightType::kBF16;
      case DType::kF16:
        return kernels::WeightType::kF16;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint ", ckpt_.dir(), ": tensor '", t.name, "' has dtype ",
            checkpoint::DTypeName(t.dtype), ", expected F32, BF16 or F16"));
    }
  }

  const checkpoint::Checkpoint& ckpt_;
};

absl::StatusOr<LayerWeights> BindLayer(const ModelSpec& spec,
                                       const Architecture& arch, int l,
                                       Binder& bind) {
  const int64_t h = spec.hidden_size;
  LayerWeights layer;
  ASSIGN_OR_RETURN(layer.input_norm,
                   bind.Vector(LayerTensor(l, "input_layernorm.weight"), h));
  ASSIGN_OR_RETURN(
      layer.post_attention_norm,
      bind.Vector(LayerTensor(l, "post_attention_layernorm.weight"), h));
  ASSIGN_OR_RETURN(layer.q,
                   bind.Matrix(LayerTensor(l, "self_attn.q_proj.weight"),
                               spec.q_width(), h));
  ASSIGN_OR_RETURN(layer.k,
                   bind.Matrix(LayerTensor(l, "self_attn.k_proj.weight"),
                               spec.kv_width(), h));
  ASSIGN_OR_RETURN(layer.v,
                   bind.Matrix(LayerTensor(l, "self_attn.v_proj.weight"),
                               spec.kv_width(), h));
  ASSIGN_OR_RETURN(layer.o,
                   bind.Matrix(LayerTensor(l, "self_attn.o_proj.weight"), h,
                               spec.q_width()));
  if (spec.qkv_bias) {
    ASSIGN_OR_RETURN(
        layer.q_bias,
        bind.Vector(LayerTensor(l, "self_attn.q_proj.bias"), spec.q_width()));
    ASSIGN_OR_RETURN(
        layer.k_bias,
        bind.Vector(LayerTensor(l, "self_attn.k_proj.bias"), spec.kv_width()));
    ASSIGN_OR_RETURN(
        layer.v_bias,
        bind.Vector(LayerTensor(l, "self_attn.v_proj.bias"), spec.kv_width()));
  }
  if (spec.o_proj_bias) {
    ASSIGN_OR_RETURN(layer.o_bias,
                     bind.Vector(LayerTensor(l, "self_attn.o_proj.bias"), h));
  }
  if (spec.qk_norm != QkNorm::kNone) {
    const bool per_head = spec.qk_norm == QkNorm::kPerHead;
    ASSIGN_OR_RETURN(layer.q_norm,
                     bind.Vector(LayerTensor(l, "self_attn.q_norm.weight"),
                                 per_head ? spec.head_dim : spec.q_width()));
    ASSIGN_OR_RETURN(layer.k_norm,
                     bind.Vector(LayerTensor(l, "self_attn.k_norm.weight"),
                                 per_head ? spec.head_dim : spec.kv_width()));
  }
  layer.is_moe = spec.layer_is_moe[l];
  if (!layer.is_moe) {
    ASSIGN_OR_RETURN(layer.dense_mlp, bind.Mlp(arch.DenseMlpTensors(l), h,
                                               spec.dense_intermediate_size));
    return layer;
  }
  ASSIGN_OR_RETURN(layer.router,
                   bind.Matrix(arch.RouterTensor(l), spec.num_experts, h));
  layer.experts.reserve(spec.num_experts);
  for (int e = 0; e < spec.num_experts; ++e) {
    ASSIGN_OR_RETURN(
        MlpWeights expert,
        bind.Mlp(arch.ExpertTensors(l, e), h, spec.expert_intermediate_size));
    layer.experts.push_back(expert);
  }
  if (spec.shared_expert_intermediate_size > 0) {
    layer.has_shared_expert = true;
    ASSIGN_OR_RETURN(layer.shared_expert,
                     bind.Mlp(arch.SharedExpertTensors(l), h,
                              spec.shared_expert_intermediate_size));
    ASSIGN_OR_RETURN(layer.shared_expert_gate,
                     bind.RowVector(arch.SharedExpertGateTensor(l), h));
  }
  return layer;
}

// Bytes rounded up so every matrix in a shared buffer starts on a cache line.
int64_t Aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }

int64_t ConvertedBytes(const kernels::Matrix& m, kernels::WeightType type,
                       int32_t group) {
  return Aligned(kernels::QuantizedDataBytes(type, m.rows, m.cols, group)) +
         Aligned(kernels::QuantizedScaleCount(type, m.rows, m.cols, group) *
                 static_cast<int64_t>(sizeof(uint16_t)));
}

// Converts `matrices` into one new buffer and points them into it.
std::unique_ptr<uint8_t[]> ConvertTogether(
    const std::vector<kernels::Matrix*>& matrices, kernels::WeightType type,
    int32_t group) {
  int64_t total = 0;
  for (const kernels::Matrix* m : matrices)
    total += ConvertedBytes(*m, type, group);
  // operator new[] on uint8_t only guarantees 16-byte alignment; the kernels
  // use unaligned loads, so that suffices.
  std::unique_ptr<uint8_t[]> buffer(new uint8_t[total]);
  uint8_t* p = buffer.get();
  for (kernels::Matrix* m : matrices) {
    const int64_t data =
        Aligned(kernels::QuantizedDataBytes(type, m->rows, m->cols, group));
    *m = kernels::QuantizeMatrix(*m, type, group, p,
                                 reinterpret_cast<uint16_t*>(p + data));
    p += ConvertedBytes(*m, type, group);
  }
  return buffer;
}

}  // namespace

absl::Status ConvertWeights(const WeightConversion& conversion,
                            ThreadPool* pool, ModelWeights* weights) {
  if (!conversion.mlp_type) return absl::OkStatus();
  const kernels::WeightType type = *conversion.mlp_type;
  if ((type == kernels::WeightType::kInt8 ||
       type == kernels::WeightType::kInt4) &&
      conversion.group_size != 32 && conversion.group_size != 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        kernels::WeightTypeName(type), " group size must be 32 or 64, got ",
        conversion.group_size));
  }
  // Each unit converts into one buffer: an MLP, or a layer's attention.
  std::vector<std::vector<kernels::Matrix*>> units;
  auto add_mlp = [&](MlpWeights& mlp) {
    units.push_back({&mlp.gate, &mlp.up, &mlp.down});
  };
  for (LayerWeights& layer : weights->layers) {
    if (conversion.attention)
      units.push_back({&layer.q, &layer.k, &layer.v, &layer.o});
    if (!layer.is_moe) add_mlp(layer.dense_mlp);
    for (MlpWeights& expert : layer.experts) add_mlp(expert);
    if (layer.has_shared_expert) add_mlp(layer.shared_expert);
  }
  const bool tied = weights->lm_head.data == weights->embed_tokens.data;
  if (conversion.lm_head) units.push_back({&weights->lm_head});
  std::vector<std::unique_ptr<uint8_t[]>> buffers(units.size());
  ParallelFor(pool, static_cast<int64_t>(units.size()), [&](int64_t i) {
    buffers[i] = ConvertTogether(units[i], type, conversion.group_size);
  });
  for (auto& b : buffers) weights->converted.push_back(std::move(b));
  if (conversion.lm_head && tied) weights->embed_tokens = weights->lm_head;
  return absl::OkStatus();
}

absl::StatusOr<ModelWeights> BindModelWeights(
    const ModelSpec& spec, const Architecture& arch,
    const checkpoint::Checkpoint& checkpoint) {
  Binder bind(checkpoint);
  ModelWeights weights;
  ASSIGN_OR_RETURN(weights.embed_tokens,
                   bind.Matrix("model.embed_tokens.weight", spec.vocab_size,
                               spec.hidden_size));
  ASSIGN_OR_RETURN(weights.final_norm,
                   bind.Vector("model.norm.weight", spec.hidden_size));
  // Tied checkpoints usually omit lm_head.weight; some still write it.
  if (spec.tie_word_embeddings && !bind.Has("lm_head.weight")) {
    weights.lm_head = weights.embed_tokens;
  } else {
    ASSIGN_OR_RETURN(
        weights.lm_head,
        bind.Matrix("lm_head.weight", spec.vocab_size, spec.hidden_size));
  }
  weights.layers.reserve(spec.num_layers);
  for (int l = 0; l < spec.num_layers; ++l) {
    ASSIGN_OR_RETURN(LayerWeights layer, BindLayer(spec, arch, l, bind));
    weights.layers.push_back(std::move(layer));
  }
  return weights;
}

namespace {

// Maps in the pages of [data, data + bytes): MADV_POPULATE_READ (Linux
// 5.14) in one call, else a read of one byte per page.
void PrefaultRange(const void* data, int64_t bytes) {
  if (data == nullptr || bytes <= 0) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data) / page * page;
  const auto end = reinterpret_cast<uintptr_t>(data) + bytes;
#ifdef MADV_POPULATE_READ
  if (::madvise(reinterpret_cast<void*>(begin), end - begin,
                MADV_POPULATE_READ) == 0) {
    return;
  }
#endif
  volatile uint8_t sink = 0;
  for (uintptr_t p = begin; p < end; p += page) {
    sink = sink + *reinterpret_cast<const volatile uint8_t*>(
                      std::max(p, reinterpret_cast<uintptr_t>(data)));
  }
}

void PrefaultMatrix(const kernels::Matrix& m) {
  PrefaultRange(m.data, kernels::QuantizedDataBytes(m.type, m.rows, m.cols,
                                                    m.group_size));
  PrefaultRange(m.scales, kernels::QuantizedScaleCount(m.type, m.rows, m.cols,
                                                       m.group_size) *
                              static_cast<int64_t>(sizeof(uint16_t)));
}

void PrefaultMlp(const MlpWeights& mlp) {
  for (const kernels::Matrix* m : {&mlp.gate, &mlp.up, &mlp.down}) {
    PrefaultMatrix(*m);
  }
}

}  // namespace

void PrefaultWeights(const ModelWeights& weights) {
  PrefaultMatrix(weights.lm_head);
  for (const LayerWeights& layer : weights.layers) {
    for (const kernels::Matrix* m :
         {&layer.q, &layer.k, &layer.v, &layer.o, &layer.router}) {
      PrefaultMatrix(*m);
    }
    for (const MlpWeights& expert : layer.experts) PrefaultMlp(expert);
    if (layer.has_shared_expert) PrefaultMlp(layer.shared_expert);
    if (!layer.is_moe) PrefaultMlp(layer.dense_mlp);
  }
}

}  // namespace ringmoe::model

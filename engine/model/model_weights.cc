#include "engine/model/model_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/backend/host_weight.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::model {
namespace {

using checkpoint::DType;
using checkpoint::TensorView;

// dst[c, r] = src[r, c] for a [rows, cols] matrix of T, in tiles that keep
// both sides' cache lines in use.
template <typename T>
void Transpose(const uint8_t* src_bytes, int64_t rows, int64_t cols,
               uint8_t* dst_bytes) {
  constexpr int64_t kTile = 32;
  const T* src = reinterpret_cast<const T*>(src_bytes);
  T* dst = reinterpret_cast<T*>(dst_bytes);
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r_end = std::min(rows, r0 + kTile);
      const int64_t c_end = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r_end; ++r) {
        for (int64_t c = c0; c < c_end; ++c) {
          std::memcpy(&dst[c * rows + r], &src[r * cols + c], sizeof(T));
        }
      }
    }
  }
}

class Binder {
 public:
  Binder(const checkpoint::Checkpoint& ckpt, const ModelSpec& spec)
      : ckpt_(ckpt), fp8_(spec.fp8), mxfp4_(spec.mxfp4) {}

  absl::StatusOr<Weight> Matrix(const std::string& name, int64_t rows,
                                int64_t cols) {
    ASSIGN_OR_RETURN(const TensorView* t, Tensor(name, {rows, cols}));
    if (t->dtype == DType::kF8E4M3) return Fp8Matrix(*t, rows, cols);
    ASSIGN_OR_RETURN(backend::WeightType type, WeightTypeOf(*t));
    Weight w;
    w.data = t->data;
    w.type = type;
    w.rows = rows;
    w.cols = cols;
    return w;
  }

  absl::StatusOr<model::Vector> Vector(const std::string& name, int64_t size) {
    ASSIGN_OR_RETURN(const TensorView* t, Tensor(name, {size}));
    return Widened(*t);
  }

  // A [1, size] tensor read as a vector (Linear(hidden, 1) weights).
  absl::StatusOr<model::Vector> RowVector(const std::string& name,
                                          int64_t size) {
    ASSIGN_OR_RETURN(const TensorView* t, Tensor(name, {1, size}));
    return Widened(*t);
  }

  absl::StatusOr<MlpWeights> Mlp(const MlpTensorNames& names, int64_t hidden,
                                 int64_t intermediate) {
    MlpWeights mlp;
    ASSIGN_OR_RETURN(mlp.gate, Matrix(names.gate, intermediate, hidden));
    ASSIGN_OR_RETURN(mlp.up, Matrix(names.up, intermediate, hidden));
    ASSIGN_OR_RETURN(mlp.down, Matrix(names.down, hidden, intermediate));
    return mlp;
  }

  // Every expert of a layer sliced out of fused tensors (see
  // FusedExpertTensorNames): matrices are views into the checkpoint when
  // stored as MXFP4 and transposed copies when stored dense [in, out].
  absl::StatusOr<std::vector<MlpWeights>> FusedExperts(
      const FusedExpertTensorNames& names, int64_t experts, int64_t hidden,
      int64_t intermediate, backend::GatedActivation activation) {
    ASSIGN_OR_RETURN(
        std::vector<Weight> gate_up,
        FusedMatrices(names.gate_up, experts, 2 * intermediate, hidden));
    ASSIGN_OR_RETURN(std::vector<Weight> down,
                     FusedMatrices(names.down, experts, hidden, intermediate));
    ASSIGN_OR_RETURN(
        std::vector<model::Vector> gate_up_bias,
        FusedVectors(names.gate_up_bias, experts, 2 * intermediate));
    ASSIGN_OR_RETURN(std::vector<model::Vector> down_bias,
                     FusedVectors(names.down_bias, experts, hidden));
    std::vector<MlpWeights> mlps(experts);
    for (int64_t e = 0; e < experts; ++e) {
      mlps[e].gate_up = gate_up[e];
      mlps[e].gate_up_bias = gate_up_bias[e];
      mlps[e].down = down[e];
      mlps[e].down_bias = down_bias[e];
      mlps[e].activation = activation;
    }
    return mlps;
  }

  bool Has(const std::string& name) const {
    return ckpt_.Find(name) != nullptr;
  }

  // Buffers the bound weights point into, for ModelWeights::owned, and
  // where the aligned copies among them come from.
  std::vector<HostMemory> TakeOwned() { return std::move(owned_); }
  absl::flat_hash_map<const void*, const void*> TakeAlignedCopies() {
    return std::move(aligned_copy_of_);
  }

 private:
  // The tensor's values as float32, in a buffer of their own.
  absl::StatusOr<model::Vector> Widened(const TensorView& t) {
    RETURN_IF_ERROR(WeightTypeOf(t).status());
    ASSIGN_OR_RETURN(const std::vector<float> values,
                     checkpoint::CopyAsFloat32(t));
    ASSIGN_OR_RETURN(uint8_t* const copy,
                     Own(values.size() * sizeof(float), t.name));
    std::memcpy(copy, values.data(), values.size() * sizeof(float));
    return model::Vector{reinterpret_cast<const float*>(copy),
                         static_cast<int64_t>(values.size())};
  }

  // An F8_E4M3 weight and its block scales, kept as stored.
  absl::StatusOr<Weight> Fp8Matrix(const TensorView& t, int64_t rows,
                                   int64_t cols) {
    if (fp8_.block_rows == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", ckpt_.dir(), ": tensor '", t.name,
          "' is F8_E4M3 but config.json has no quantization_config with "
          "quant_method fp8 and its weight_block_size"));
    }
    const std::string scale_name = absl::StrCat(t.name, "_scale_inv");
    const int64_t scale_rows = (rows + fp8_.block_rows - 1) / fp8_.block_rows;
    const int64_t scale_cols = (cols + fp8_.block_cols - 1) / fp8_.block_cols;
    if (ckpt_.Find(scale_name) == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "checkpoint ", ckpt_.dir(), ": F8_E4M3 tensor '", t.name,
          "' has no block scales: missing tensor '", scale_name, "'"));
    }
    ASSIGN_OR_RETURN(const TensorView* scales,
                     Tensor(scale_name, {scale_rows, scale_cols}));
    if (scales->dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", ckpt_.dir(), ": tensor '", scale_name, "' has dtype ",
          checkpoint::DTypeName(scales->dtype), ", expected F32"));
    }
    Weight m;
    m.data = t.data;
    m.type = backend::WeightType::kFp8E4M3;
    m.rows = rows;
    m.cols = cols;
    ASSIGN_OR_RETURN(m.block_scales, AlignedFloats(*scales));
    m.block_rows = static_cast<int32_t>(fp8_.block_rows);
    m.block_cols = static_cast<int32_t>(fp8_.block_cols);
    return m;
  }

  // Expert e's [rows, cols] matrix of the fused tensors under `stem`.
  absl::StatusOr<std::vector<Weight>> FusedMatrices(const std::string& stem,
                                                    int64_t experts,
                                                    int64_t rows,
                                                    int64_t cols) {
    const std::string blocks = absl::StrCat(stem, "_blocks");
    if (Has(blocks)) return Mxfp4Matrices(stem, experts, rows, cols);
    if (!Has(stem)) {
      return absl::NotFoundError(absl::StrCat("checkpoint ", ckpt_.dir(),
                                              ": missing tensor '",
                                              mxfp4_ ? blocks : stem, "'"));
    }
    // Dense fused experts are [E, in, out]: each becomes an [out, in] copy.
    ASSIGN_OR_RETURN(const TensorView* t, Tensor(stem, {experts, cols, rows}));
    ASSIGN_OR_RETURN(const backend::WeightType type, WeightTypeOf(*t));
    const int64_t bytes = rows * cols * checkpoint::DTypeSize(t->dtype);
    ASSIGN_OR_RETURN(uint8_t* const buffer, Own(t->num_bytes, stem));
    std::vector<Weight> out(experts);
    for (int64_t e = 0; e < experts; ++e) {
      uint8_t* dst = buffer + e * bytes;
      if (type == backend::WeightType::kF32) {
        Transpose<uint32_t>(t->data + e * bytes, cols, rows, dst);
      } else {
        Transpose<uint16_t>(t->data + e * bytes, cols, rows, dst);
      }
      out[e].data = dst;
      out[e].type = type;
      out[e].rows = rows;
      out[e].cols = cols;
    }
    return out;
  }

  // `<stem>_blocks` and `<stem>_scales` as each expert's MXFP4 matrix, in
  // place.
  absl::StatusOr<std::vector<Weight>> Mxfp4Matrices(const std::string& stem,
                                                    int64_t experts,
                                                    int64_t rows,
                                                    int64_t cols) {
    const std::string blocks_name = absl::StrCat(stem, "_blocks");
    const std::string scales_name = absl::StrCat(stem, "_scales");
    if (!mxfp4_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", ckpt_.dir(), ": tensor '", blocks_name,
          "' is MXFP4 but config.json has no quantization_config with "
          "quant_method mxfp4"));
    }
    if (!Has(scales_name)) {
      return absl::NotFoundError(absl::StrCat(
          "checkpoint ", ckpt_.dir(), ": MXFP4 tensor '", blocks_name,
          "' has no scales: missing tensor '", scales_name, "'"));
    }
    const int64_t groups = (cols + 31) / 32;
    ASSIGN_OR_RETURN(const TensorView* blocks,
                     Tensor(blocks_name, {experts, rows, groups, 16}));
    ASSIGN_OR_RETURN(const TensorView* scales,
                     Tensor(scales_name, {experts, rows, groups}));
    for (const TensorView* t : {blocks, scales}) {
      if (t->dtype != DType::kU8) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint ", ckpt_.dir(), ": tensor '", t->name, "' has dtype ",
            checkpoint::DTypeName(t->dtype), ", expected U8"));
      }
    }
    std::vector<Weight> out(experts);
    for (int64_t e = 0; e < experts; ++e) {
      out[e].data = blocks->data + e * rows * groups * 16;
      out[e].type = backend::WeightType::kMxfp4;
      out[e].rows = rows;
      out[e].cols = cols;
      out[e].exponents = scales->data + e * rows * groups;
    }
    return out;
  }

  // Row e of the [experts, size] tensor `name` as expert e's vector.
  absl::StatusOr<std::vector<model::Vector>> FusedVectors(
      const std::string& name, int64_t experts, int64_t size) {
    ASSIGN_OR_RETURN(const TensorView* t, Tensor(name, {experts, size}));
    ASSIGN_OR_RETURN(const model::Vector all, Widened(*t));
    std::vector<model::Vector> out(experts);
    for (int64_t e = 0; e < experts; ++e) {
      out[e] = model::Vector{all.data + e * size, size};
    }
    return out;
  }

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

  absl::StatusOr<backend::WeightType> WeightTypeOf(const TensorView& t) const {
    switch (t.dtype) {
      case DType::kF32:
        return backend::WeightType::kF32;
      case DType::kBF16:
        return backend::WeightType::kBF16;
      case DType::kF16:
        return backend::WeightType::kF16;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint ", ckpt_.dir(), ": tensor '", t.name, "' has dtype ",
            checkpoint::DTypeName(t.dtype), ", expected F32, BF16 or F16"));
    }
  }

  // The tensor's floats in place, or a copy where the file puts them at an
  // offset that is not a multiple of 4 (safetensors does not align them).
  absl::StatusOr<const float*> AlignedFloats(const TensorView& t) {
    if (reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0) {
      return reinterpret_cast<const float*>(t.data);
    }
    ASSIGN_OR_RETURN(uint8_t* const copy, Own(t.num_bytes, t.name));
    std::memcpy(copy, t.data, t.num_bytes);
    aligned_copy_of_[copy] = t.data;
    return reinterpret_cast<const float*>(copy);
  }

  // A new buffer of `bytes` for the copy of `tensor`, kept in owned_.
  absl::StatusOr<uint8_t*> Own(size_t bytes, absl::string_view tensor) {
    HostMemory buffer = AllocateHostMemory(bytes);
    if (buffer == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("checkpoint ", ckpt_.dir(), ": no host memory for ",
                       bytes, " bytes of '", tensor, "'"));
    }
    owned_.push_back(std::move(buffer));
    return owned_.back().get();
  }

  const checkpoint::Checkpoint& ckpt_;
  Fp8BlockSpec fp8_;
  bool mxfp4_;
  std::vector<HostMemory> owned_;
  absl::flat_hash_map<const void*, const void*> aligned_copy_of_;
};

absl::Status BindGqa(const ModelSpec& spec, const Architecture& arch, int l,
                     Binder& bind, LayerWeights* out) {
  const int64_t h = spec.hidden_size;
  const GqaTensorNames names = arch.GqaTensors(l);
  LayerWeights& layer = *out;
  ASSIGN_OR_RETURN(layer.q, bind.Matrix(names.q_proj, spec.q_width(), h));
  ASSIGN_OR_RETURN(layer.k, bind.Matrix(names.k_proj, spec.kv_width(), h));
  ASSIGN_OR_RETURN(layer.v, bind.Matrix(names.v_proj, spec.kv_width(), h));
  ASSIGN_OR_RETURN(layer.o, bind.Matrix(names.o_proj, h, spec.q_width()));
  if (spec.qkv_bias) {
    ASSIGN_OR_RETURN(layer.q_bias, bind.Vector(names.q_bias, spec.q_width()));
    ASSIGN_OR_RETURN(layer.k_bias, bind.Vector(names.k_bias, spec.kv_width()));
    ASSIGN_OR_RETURN(layer.v_bias, bind.Vector(names.v_bias, spec.kv_width()));
  }
  if (spec.o_proj_bias) {
    ASSIGN_OR_RETURN(layer.o_bias, bind.Vector(names.o_bias, h));
  }
  if (spec.attention_sinks) {
    ASSIGN_OR_RETURN(layer.sinks, bind.Vector(names.sinks, spec.num_heads));
  }
  if (spec.qk_norm != QkNorm::kNone) {
    const bool per_head = spec.qk_norm == QkNorm::kPerHead;
    ASSIGN_OR_RETURN(
        layer.q_norm,
        bind.Vector(names.q_norm, per_head ? spec.head_dim : spec.q_width()));
    ASSIGN_OR_RETURN(
        layer.k_norm,
        bind.Vector(names.k_norm, per_head ? spec.head_dim : spec.kv_width()));
  }
  return absl::OkStatus();
}

absl::StatusOr<LayerWeights> BindFeedForward(const ModelSpec& spec,
                                             const Architecture& arch, int l,
                                             Binder& bind, LayerWeights layer) {
  const int64_t h = spec.hidden_size;
  layer.is_moe = spec.layer_is_moe[l];
  if (!layer.is_moe) {
    ASSIGN_OR_RETURN(layer.dense_mlp, bind.Mlp(arch.DenseMlpTensors(l), h,
                                               spec.dense_intermediate_size));
    return layer;
  }
  ASSIGN_OR_RETURN(layer.router,
                   bind.Matrix(arch.RouterTensor(l), spec.num_experts, h));
  if (spec.routing.router_bias) {
    ASSIGN_OR_RETURN(layer.router_bias,
                     bind.Vector(arch.RouterBiasTensor(l), spec.num_experts));
  }
  if (spec.routing.selection_bias) {
    ASSIGN_OR_RETURN(
        layer.expert_score_bias,
        bind.Vector(arch.ExpertScoreBiasTensor(l), spec.num_experts));
  }
  backend::GatedActivation activation;
  if (spec.expert_swiglu) {
    activation.kind = backend::GatedActivation::Kind::kClampedSwiglu;
    activation.alpha = static_cast<float>(spec.expert_swiglu->alpha);
    activation.limit = static_cast<float>(spec.expert_swiglu->limit);
  }
  if (const std::optional<FusedExpertTensorNames> fused =
          arch.FusedExpertTensors(l)) {
    ASSIGN_OR_RETURN(
        layer.experts,
        bind.FusedExperts(*fused, spec.num_experts, h,
                          spec.expert_intermediate_size, activation));
  } else {
    layer.experts.reserve(spec.num_experts);
    for (int e = 0; e < spec.num_experts; ++e) {
      ASSIGN_OR_RETURN(
          MlpWeights expert,
          bind.Mlp(arch.ExpertTensors(l, e), h, spec.expert_intermediate_size));
      expert.activation = activation;
      layer.experts.push_back(expert);
    }
  }
  if (spec.shared_expert_intermediate_size > 0) {
    layer.has_shared_expert = true;
    ASSIGN_OR_RETURN(layer.shared_expert,
                     bind.Mlp(arch.SharedExpertTensors(l), h,
                              spec.shared_expert_intermediate_size));
    if (spec.shared_expert_gated) {
      ASSIGN_OR_RETURN(layer.shared_expert_gate,
                       bind.RowVector(arch.SharedExpertGateTensor(l), h));
    }
  }
  return layer;
}

absl::Status BindMla(const ModelSpec& spec, const Architecture& arch, int l,
                     Binder& bind, LayerWeights* layer) {
  const MlaSpec& m = *spec.mla;
  const int64_t h = spec.hidden_size, heads = spec.num_heads;
  const MlaTensorNames names = arch.MlaTensors(l);
  MlaWeights& w = layer->mla;
  if (m.q_lora_rank > 0) {
    ASSIGN_OR_RETURN(w.q_a, bind.Matrix(names.q_a_proj, m.q_lora_rank, h));
    ASSIGN_OR_RETURN(w.q_a_norm, bind.Vector(names.q_a_norm, m.q_lora_rank));
    ASSIGN_OR_RETURN(w.q_b, bind.Matrix(names.q_b_proj, heads * m.qk_head_dim(),
                                        m.q_lora_rank));
  } else {
    ASSIGN_OR_RETURN(w.q,
                     bind.Matrix(names.q_proj, heads * m.qk_head_dim(), h));
  }
  ASSIGN_OR_RETURN(w.kv_a, bind.Matrix(names.kv_a_proj, m.cache_width(), h));
  ASSIGN_OR_RETURN(w.kv_a_norm, bind.Vector(names.kv_a_norm, m.kv_lora_rank));
  ASSIGN_OR_RETURN(
      w.kv_b,
      bind.Matrix(names.kv_b_proj, heads * (m.qk_nope_head_dim + m.v_head_dim),
                  m.kv_lora_rank));
  ASSIGN_OR_RETURN(layer->o,
                   bind.Matrix(names.o_proj, h, heads * m.v_head_dim));
  return absl::OkStatus();
}

absl::StatusOr<LayerWeights> BindLayer(const ModelSpec& spec,
                                       const Architecture& arch, int l,
                                       Binder& bind) {
  const int64_t h = spec.hidden_size;
  const LayerNormTensorNames norms = arch.LayerNormTensors(l);
  LayerWeights layer;
  ASSIGN_OR_RETURN(layer.input_norm, bind.Vector(norms.input, h));
  ASSIGN_OR_RETURN(layer.post_attention_norm,
                   bind.Vector(norms.post_attention, h));
  if (spec.mla) {
    RETURN_IF_ERROR(BindMla(spec, arch, l, bind, &layer));
  } else {
    RETURN_IF_ERROR(BindGqa(spec, arch, l, bind, &layer));
  }
  return BindFeedForward(spec, arch, l, bind, std::move(layer));
}

// Bytes rounded up so every matrix in a shared buffer starts on a cache line.
int64_t Aligned(int64_t bytes) { return (bytes + 63) / 64 * 64; }

int64_t ConvertedBytes(const Weight& m, backend::WeightType type,
                       int32_t group) {
  return Aligned(kernels::QuantizedDataBytes(type, m.rows, m.cols, group)) +
         Aligned(kernels::QuantizedScaleCount(type, m.rows, m.cols, group) *
                 static_cast<int64_t>(sizeof(uint16_t)));
}

// Converts `matrices` into one new buffer and points them into it; nullptr
// (and the matrices as they were) when the host has no memory for it.
HostMemory ConvertTogether(const std::vector<Weight*>& matrices,
                           backend::WeightType type, int32_t group) {
  int64_t total = 0;
  for (const Weight* m : matrices) total += ConvertedBytes(*m, type, group);
  HostMemory buffer = AllocateHostMemory(total);
  if (buffer == nullptr) return nullptr;
  uint8_t* p = buffer.get();
  for (Weight* m : matrices) {
    const int64_t data =
        Aligned(kernels::QuantizedDataBytes(type, m->rows, m->cols, group));
    *m = backend::AsWeight(
        kernels::QuantizeMatrix(backend::AsMatrix(*m), type, group, p,
                                reinterpret_cast<uint16_t*>(p + data)));
    p += ConvertedBytes(*m, type, group);
  }
  return buffer;
}

}  // namespace

absl::InlinedVector<Weight*, 3> MlpMatrices(MlpWeights* mlp) {
  absl::InlinedVector<Weight*, 3> out;
  for (Weight* m : {&mlp->gate, &mlp->up, &mlp->gate_up, &mlp->down}) {
    if (!m->empty()) out.push_back(m);
  }
  return out;
}

std::vector<Weight*> AttentionMatrices(LayerWeights* layer) {
  std::vector<Weight*> out;
  for (Weight* m :
       {&layer->q, &layer->k, &layer->v, &layer->o, &layer->mla.q,
        &layer->mla.q_a, &layer->mla.q_b, &layer->mla.kv_a, &layer->mla.kv_b}) {
    if (m->data != nullptr) out.push_back(m);
  }
  return out;
}

std::vector<const Weight*> AttentionMatrices(const LayerWeights& layer) {
  std::vector<Weight*> matrices =
      AttentionMatrices(const_cast<LayerWeights*>(&layer));
  return {matrices.begin(), matrices.end()};
}

namespace {

// The layer's vectors the forward pass reads on the compute device (the
// experts' selection bias is read by routing, on the host).
std::vector<Vector*> LayerVectors(LayerWeights& layer) {
  return {&layer.input_norm,
          &layer.post_attention_norm,
          &layer.q_bias,
          &layer.k_bias,
          &layer.v_bias,
          &layer.o_bias,
          &layer.q_norm,
          &layer.k_norm,
          &layer.sinks,
          &layer.mla.q_a_norm,
          &layer.mla.kv_a_norm,
          &layer.router_bias,
          &layer.shared_expert_gate};
}

// Uploads every bound tensor in place, each distinct host matrix once.
class Uploader {
 public:
  explicit Uploader(backend::Backend& backend) : backend_(backend) {}

  absl::Status Matrix(Weight* w, const std::string& what) {
    if (w->empty()) return absl::OkStatus();
    auto [it, inserted] = uploaded_.try_emplace(w->data);
    if (inserted) {
      absl::StatusOr<Weight> device = backend_.Upload(*w);
      if (!device.ok()) {
        return absl::Status(
            device.status().code(),
            absl::StrCat(what, ": ", device.status().message()));
      }
      it->second = *device;
    }
    *w = it->second;
    return absl::OkStatus();
  }

  absl::Status Vec(Vector* v, const std::string& what) {
    if (v->empty()) return absl::OkStatus();
    absl::StatusOr<Vector> device = backend_.Upload(*v);
    if (!device.ok()) {
      return absl::Status(device.status().code(),
                          absl::StrCat(what, ": ", device.status().message()));
    }
    *v = *device;
    return absl::OkStatus();
  }

  absl::Status Mlp(MlpWeights* mlp, const std::string& what) {
    for (Weight* m : MlpMatrices(mlp)) RETURN_IF_ERROR(Matrix(m, what));
    RETURN_IF_ERROR(Vec(&mlp->gate_up_bias, what + " gate_up bias"));
    return Vec(&mlp->down_bias, what + " down bias");
  }

 private:
  backend::Backend& backend_;
  absl::flat_hash_map<const void*, Weight> uploaded_;
};

}  // namespace

absl::StatusOr<ModelWeights> UploadWeights(
    const ModelWeights& host, backend::Backend& backend,
    const std::vector<std::vector<bool>>* expert_on_device) {
  ModelWeights device;
  device.embed_tokens = host.embed_tokens;
  device.lm_head = host.lm_head;
  device.final_norm = host.final_norm;
  device.layers = host.layers;
  Uploader up(backend);
  RETURN_IF_ERROR(up.Matrix(&device.embed_tokens, "embed_tokens"));
  RETURN_IF_ERROR(up.Matrix(&device.lm_head, "lm_head"));
  RETURN_IF_ERROR(up.Vec(&device.final_norm, "final norm"));
  for (size_t l = 0; l < device.layers.size(); ++l) {
    LayerWeights& layer = device.layers[l];
    const std::string name = absl::StrCat("layer ", l);
    for (Weight* m : AttentionMatrices(&layer)) {
      RETURN_IF_ERROR(up.Matrix(m, name + " attention"));
    }
    for (Vector* v : LayerVectors(layer)) RETURN_IF_ERROR(up.Vec(v, name));
    RETURN_IF_ERROR(up.Matrix(&layer.router, name + " router"));
    // Routing reads the selection bias on the host: the copy keeps its own,
    // so it outlives `host`.
    if (!layer.expert_score_bias.empty()) {
      const size_t bytes = layer.expert_score_bias.size * sizeof(float);
      HostMemory copy = AllocateHostMemory(bytes);
      if (copy == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "no host memory for ", name, "'s expert selection bias"));
      }
      std::memcpy(copy.get(), layer.expert_score_bias.data, bytes);
      layer.expert_score_bias.data = reinterpret_cast<const float*>(copy.get());
      device.owned.push_back(std::move(copy));
    }
    for (size_t e = 0; e < layer.experts.size(); ++e) {
      if (expert_on_device != nullptr && !(*expert_on_device)[l][e]) continue;
      RETURN_IF_ERROR(
          up.Mlp(&layer.experts[e], absl::StrCat(name, " expert ", e)));
    }
    if (layer.has_shared_expert) {
      RETURN_IF_ERROR(up.Mlp(&layer.shared_expert, name + " shared expert"));
    }
    if (!layer.is_moe) {
      RETURN_IF_ERROR(up.Mlp(&layer.dense_mlp, name + " dense MLP"));
    }
  }
  return device;
}

uint64_t NonExpertBytes(const ModelWeights& weights) {
  absl::flat_hash_set<const void*> seen;
  uint64_t bytes = 0;
  auto matrix = [&](const Weight& w) {
    if (!w.empty() && seen.insert(w.data).second) bytes += StoredBytes(w);
  };
  auto vec = [&](const Vector& v) { bytes += v.size * sizeof(float); };
  auto mlp = [&](const MlpWeights& m) {
    for (const Weight* w : MlpMatrices(const_cast<MlpWeights*>(&m))) {
      matrix(*w);
    }
    vec(m.gate_up_bias);
    vec(m.down_bias);
  };
  matrix(weights.embed_tokens);
  matrix(weights.lm_head);
  vec(weights.final_norm);
  for (const LayerWeights& layer : weights.layers) {
    for (const Weight* m : AttentionMatrices(layer)) matrix(*m);
    for (Vector* v : LayerVectors(const_cast<LayerWeights&>(layer))) vec(*v);
    matrix(layer.router);
    if (layer.has_shared_expert) mlp(layer.shared_expert);
    if (!layer.is_moe) mlp(layer.dense_mlp);
  }
  return bytes;
}

absl::Status ConvertWeights(const WeightConversion& conversion,
                            ThreadPool* pool, ModelWeights* weights) {
  if (!conversion.mlp_type) return absl::OkStatus();
  const backend::WeightType type = *conversion.mlp_type;
  if (type == backend::WeightType::kFp8E4M3 ||
      type == backend::WeightType::kMxfp4) {
    return absl::InvalidArgumentError(
        absl::StrCat(kernels::WeightTypeName(type),
                     " is a checkpoint format, not a conversion target"));
  }
  if ((type == backend::WeightType::kInt8 ||
       type == backend::WeightType::kInt4) &&
      conversion.group_size != 32 && conversion.group_size != 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        kernels::WeightTypeName(type), " group size must be 32 or 64, got ",
        conversion.group_size));
  }
  // Each unit converts into one buffer: an MLP, or a layer's attention.
  std::vector<std::vector<Weight*>> units;
  auto add_mlp = [&](MlpWeights& mlp) {
    const absl::InlinedVector<Weight*, 3> matrices = MlpMatrices(&mlp);
    units.emplace_back(matrices.begin(), matrices.end());
  };
  for (LayerWeights& layer : weights->layers) {
    if (conversion.attention) units.push_back(AttentionMatrices(&layer));
    if (!layer.is_moe) add_mlp(layer.dense_mlp);
    for (MlpWeights& expert : layer.experts) add_mlp(expert);
    if (layer.has_shared_expert) add_mlp(layer.shared_expert);
  }
  const bool tied = weights->lm_head.data == weights->embed_tokens.data;
  if (conversion.lm_head) units.push_back({&weights->lm_head});
  std::vector<HostMemory> buffers(units.size());
  ParallelFor(pool, static_cast<int64_t>(units.size()), [&](int64_t i) {
    buffers[i] = ConvertTogether(units[i], type, conversion.group_size);
  });
  for (size_t i = 0; i < units.size(); ++i) {
    if (buffers[i] == nullptr) {
      int64_t bytes = 0;
      for (const Weight* m : units[i]) {
        bytes += ConvertedBytes(*m, type, conversion.group_size);
      }
      return absl::ResourceExhaustedError(
          absl::StrCat("no host memory for ", bytes, " bytes of ",
                       kernels::WeightTypeName(type), " weights"));
    }
    weights->owned.push_back(std::move(buffers[i]));
  }
  if (conversion.lm_head && tied) weights->embed_tokens = weights->lm_head;
  return absl::OkStatus();
}

absl::StatusOr<ModelWeights> BindModelWeights(
    const ModelSpec& spec, const Architecture& arch,
    const checkpoint::Checkpoint& checkpoint) {
  Binder bind(checkpoint, spec);
  const ModelTensorNames names = arch.ModelTensors();
  ModelWeights weights;
  ASSIGN_OR_RETURN(
      weights.embed_tokens,
      bind.Matrix(names.embed_tokens, spec.vocab_size, spec.hidden_size));
  ASSIGN_OR_RETURN(weights.final_norm,
                   bind.Vector(names.final_norm, spec.hidden_size));
  // Tied checkpoints usually omit lm_head; some still write it.
  if (spec.tie_word_embeddings && !bind.Has(names.lm_head)) {
    weights.lm_head = weights.embed_tokens;
  } else {
    ASSIGN_OR_RETURN(
        weights.lm_head,
        bind.Matrix(names.lm_head, spec.vocab_size, spec.hidden_size));
  }
  weights.layers.reserve(spec.num_layers);
  for (int l = 0; l < spec.num_layers; ++l) {
    ASSIGN_OR_RETURN(LayerWeights layer, BindLayer(spec, arch, l, bind));
    weights.layers.push_back(std::move(layer));
  }
  weights.owned = bind.TakeOwned();
  weights.aligned_copy_of = bind.TakeAlignedCopies();
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

void PrefaultMatrix(const Weight& m) {
  PrefaultRange(m.data, backend::DataBytes(m));
  PrefaultRange(m.scales, backend::GroupScaleBytes(m));
  PrefaultRange(m.block_scales, backend::BlockScaleBytes(m));
  PrefaultRange(m.exponents, backend::ExponentBytes(m));
}

// Calls fn on every matrix a step multiplies, and on the embedding table
// first where `with_embedding`; of the routed experts, those
// routed(layer, expert) accepts. A matrix bound to two fields (a tied
// lm_head) is seen twice.
template <typename RoutedFn, typename Fn>
void ForEachMatrix(ModelWeights& weights, bool with_embedding,
                   const RoutedFn& routed, const Fn& fn) {
  const auto mlp = [&](MlpWeights& m) {
    for (Weight* w : MlpMatrices(&m)) fn(*w);
  };
  if (with_embedding) fn(weights.embed_tokens);
  fn(weights.lm_head);
  for (int l = 0; l < static_cast<int>(weights.layers.size()); ++l) {
    LayerWeights& layer = weights.layers[l];
    for (Weight* m : AttentionMatrices(&layer)) fn(*m);
    fn(layer.router);
    for (int e = 0; e < static_cast<int>(layer.experts.size()); ++e) {
      if (routed(l, e)) mlp(layer.experts[e]);
    }
    if (layer.has_shared_expert) mlp(layer.shared_expert);
    if (!layer.is_moe) mlp(layer.dense_mlp);
  }
}

// ForEachMatrix for reading: the matrices a step multiplies (not the
// embedding table); of the routed experts, only `experts` where given.
template <typename Fn>
void ForEachProductMatrix(const ModelWeights& weights,
                          const std::vector<int32_t>* experts, const Fn& fn) {
  ForEachMatrix(
      const_cast<ModelWeights&>(weights), /*with_embedding=*/false,
      [&](int, int e) {
        return experts == nullptr ||
               std::find(experts->begin(), experts->end(), e) != experts->end();
      },
      [&](const Weight& m) { fn(m); });
}

}  // namespace

std::vector<std::pair<kernels::WeightType, int64_t>> ProductWeightBytes(
    const ModelWeights& weights) {
  constexpr int kTypes = static_cast<int>(kernels::WeightType::kMxfp4) + 1;
  int64_t bytes[kTypes] = {};
  bool seen[kTypes] = {};
  const auto see = [&](const Weight& m) {
    if (m.rows == 0) return;
    seen[static_cast<int>(m.type)] = true;
    bytes[static_cast<int>(m.type)] += backend::DataBytes(m);
  };
  ForEachProductMatrix(weights, nullptr, see);
  std::vector<std::pair<kernels::WeightType, int64_t>> types;
  for (int t = 0; t < kTypes; ++t) {
    if (seen[t])
      types.emplace_back(static_cast<kernels::WeightType>(t), bytes[t]);
  }
  return types;
}

void PrefaultWeights(const ModelWeights& weights,
                     const std::vector<int32_t>* experts) {
  ForEachProductMatrix(weights, experts, PrefaultMatrix);
}

absl::Status CopyOutOfCheckpoint(
    const checkpoint::Checkpoint& checkpoint,
    const std::function<bool(int layer, int expert)>& routed, ThreadPool* pool,
    ModelWeights* weights) {
  // Each distinct range of the mapping once (a tied lm_head is the
  // embedding), at its offset in the one buffer.
  absl::flat_hash_map<const void*, int64_t> offset_of;
  std::vector<std::pair<const void*, int64_t>> ranges;
  int64_t total = 0;
  const auto note = [&](const void* p, int64_t bytes) {
    if (p == nullptr || bytes <= 0 || offset_of.contains(p) ||
        !checkpoint.Locate(p, static_cast<uint64_t>(bytes))) {
      return;
    }
    offset_of[p] = total;
    ranges.emplace_back(p, bytes);
    total += Aligned(bytes);
  };
  ForEachMatrix(*weights, /*with_embedding=*/true, routed, [&](Weight& m) {
    note(m.data, backend::DataBytes(m));
    note(m.scales, backend::GroupScaleBytes(m));
    note(m.block_scales, backend::BlockScaleBytes(m));
    note(m.exponents, backend::ExponentBytes(m));
  });
  if (total == 0) return absl::OkStatus();
  HostMemory buffer = AllocateHostMemory(static_cast<size_t>(total));
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "checkpoint ", checkpoint.dir(), ": no host memory to copy ", total,
        " bytes of resident weights out of its mapping"));
  }
  uint8_t* const base = buffer.get();
  ParallelFor(pool, static_cast<int64_t>(ranges.size()), [&](int64_t i) {
    const auto& [p, bytes] = ranges[i];
    std::memcpy(base + offset_of.at(p), p, static_cast<size_t>(bytes));
  });
  const auto moved = [&](auto* p) {
    const auto it = offset_of.find(p);
    return it == offset_of.end()
               ? p
               : reinterpret_cast<decltype(p)>(base + it->second);
  };
  ForEachMatrix(*weights, /*with_embedding=*/true, routed, [&](Weight& m) {
    m.data = moved(m.data);
    m.scales = moved(m.scales);
    m.block_scales = moved(m.block_scales);
    m.exponents = moved(m.exponents);
  });
  weights->owned.push_back(std::move(buffer));
  return absl::OkStatus();
}

}  // namespace ringmoe::model

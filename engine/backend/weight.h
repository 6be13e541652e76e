// The engine's weights: views of stored bytes in one of the storage formats
// (kernels/weight_format.h), in host memory or on a device. A backend reads
// the ones in its memory space; nothing above the backend looks inside.
#ifndef RINGMOE_ENGINE_BACKEND_WEIGHT_H_
#define RINGMOE_ENGINE_BACKEND_WEIGHT_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/weight_format.h"

namespace ringmoe::backend {

using kernels::WeightType;

// Which memory a pointer points into.
enum class MemorySpace : uint8_t {
  kHost,    // the process's memory (a checkpoint mapping, a host ring slot)
  kDevice,  // the backend's device memory (a GPU)
};

// A row-major weight matrix [rows, cols] in PyTorch's [out, in] order. int8
// and int4 carry f16 group scales beside the data ([rows, ceil(cols /
// group_size)]); fp8 its float32 block scales ([ceil(rows / block_rows),
// ceil(cols / block_cols)]) and mxfp4 its exponents ([rows, ceil(cols /
// 32)]) wherever they lie. Every pointer is in `memory`.
struct Weight {
  const void* data = nullptr;
  WeightType type = WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint16_t* scales = nullptr;     // int8 and int4 only
  int32_t group_size = 0;               // int8 and int4 only
  const float* block_scales = nullptr;  // kFp8E4M3 only
  int32_t block_rows = 0;
  int32_t block_cols = 0;
  const uint8_t* exponents = nullptr;  // kMxfp4 only: e8m0 per 32 values
  MemorySpace memory = MemorySpace::kHost;

  bool empty() const { return data == nullptr; }
};

// Bytes of the data, of the group scales, of the block scales and of the
// exponents, and all of them: what moving or reading the whole weight
// costs.
int64_t DataBytes(const Weight& w);
int64_t GroupScaleBytes(const Weight& w);
int64_t BlockScaleBytes(const Weight& w);
int64_t ExponentBytes(const Weight& w);
int64_t StoredBytes(const Weight& w);

// A float32 vector (a norm's weight, a bias) in `memory`; empty when the
// model has none.
struct Vector {
  const float* data = nullptr;
  int64_t size = 0;
  MemorySpace memory = MemorySpace::kHost;

  bool empty() const { return size == 0; }
};

// How a gated MLP's gate and up values g, u become its down projection's
// input.
struct GatedActivation {
  enum class Kind {
    kSilu,           // silu(g) · u
    kClampedSwiglu,  // gpt-oss: g' = min(g, limit), u' = clamp(u, ±limit),
                     // (u' + 1) · g' · sigmoid(alpha · g')
  };
  Kind kind = Kind::kSilu;
  float alpha = 1.702f;
  float limit = 7.f;
};

// down(act(gate(x), up(x))) (+ biases): an expert, a shared expert, a
// dense MLP. The gate and up projections are either two matrices or one
// fused matrix whose rows alternate gate and up (gpt-oss's gate_up_proj),
// with an optional bias of the same interleaving.
struct MlpWeights {
  Weight gate;     // [intermediate, hidden]; empty when fused
  Weight up;       // [intermediate, hidden]; empty when fused
  Weight down;     // [hidden, intermediate]
  Weight gate_up;  // [2 * intermediate, hidden]: rows gate 0, up 0, gate 1..
  Vector gate_up_bias;  // [2 * intermediate] or empty
  Vector down_bias;     // [hidden] or empty
  GatedActivation activation;

  bool fused() const { return !gate_up.empty(); }
  int64_t intermediate() const {
    return fused() ? gate_up.rows / 2 : gate.rows;
  }
};

// Uploads a weight or vector in host memory into a device backend's memory
// (named `target` in errors): `part` copies one stored part (`bytes` > 0
// from non-null `host`; `what` names it) and returns where it now lies.
// Fails naming the part that has no data, and with `part`'s errors.
using UploadPart = absl::FunctionRef<absl::StatusOr<const void*>(
    const void* host, int64_t bytes, const char* what)>;
absl::StatusOr<Weight> UploadWeight(const Weight& host,
                                    absl::string_view target, UploadPart part);
absl::StatusOr<Vector> UploadVector(const Vector& host,
                                    absl::string_view target, UploadPart part);

}  // namespace ringmoe::backend

#endif  // RINGMOE_ENGINE_BACKEND_WEIGHT_H_

// The CPU math the engine's forward pass is built from. Model-agnostic:
// shapes and layouts are explicit, nothing here knows about layers or
// architectures. Activations are float32; weights may be f32, bf16 or f16
// and are widened as they are read (accumulation is always float32).
#ifndef RINGMOE_KERNELS_CPU_OPS_H_
#define RINGMOE_KERNELS_CPU_OPS_H_

#include <cstdint>

namespace ringmoe::kernels {

enum class WeightType : uint8_t { kF32, kBF16, kF16 };

// Bytes per element of a weight type.
int WeightTypeSize(WeightType type);

// A row-major weight matrix [rows, cols] in PyTorch's [out, in] order.
struct Matrix {
  const void* data = nullptr;
  WeightType type = WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
};

// y[n, w.rows] = x[n, w.cols] · wᵀ.
void MatMulTransposed(const float* x, int64_t n, const Matrix& w, float* y);

// Widens row `row` of `w` into `out[w.cols]`.
void ReadRow(const Matrix& w, int64_t row, float* out);

// y[i, :] += bias for each of the n rows.
void AddBias(float* y, int64_t n, int64_t dim, const float* bias);

// y = x / sqrt(mean(x²) + eps) * weight, for each of the n rows (may alias).
void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim,
             float eps, float* y);

// Rotary embedding in the rotate-half layout: within each of `num_heads`
// heads of `head_dim`, element j pairs with j + head_dim/2. cos and sin hold
// head_dim/2 values for this token's position.
void ApplyRotaryHalf(float* x, int64_t num_heads, int64_t head_dim,
                     const float* cos, const float* sin);

// In-place numerically stable softmax over n values.
void Softmax(float* x, int64_t n);

// out = silu(gate) * up, elementwise (out may alias either input).
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// Indices of the k largest values, largest first; ties go to the lower index.
void TopK(const float* x, int64_t n, int k, int32_t* indices);

// Keys and values of one sequence in fixed-size blocks: position p lives in
// block p / block_size at row p % block_size; each row holds
// num_kv_heads * head_dim floats.
struct KvBlocks {
  const float* const* k_blocks = nullptr;
  const float* const* v_blocks = nullptr;
  int64_t block_size = 0;
};

// Grouped-query attention of one query token over positions
// [first_position, end_position) of a sequence (causal: end is the query's
// own position + 1; first is > 0 only under a sliding window). q is
// [num_heads, head_dim]; query head h reads kv head
// h / (num_heads / num_kv_heads); out is [num_heads, head_dim].
void AttendOneQuery(const float* q, int64_t num_heads, int64_t num_kv_heads,
                    int64_t head_dim, const KvBlocks& kv,
                    int64_t first_position, int64_t end_position, float scale,
                    float* out);

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_OPS_H_

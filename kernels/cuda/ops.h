// CUDA kernels of the forward pass: the device counterparts of
// kernels/cpu/ops.h that the CUDA backend (engine/backend/cuda_backend.h)
// is built from. Activations are float32 row-major device arrays; weights
// are read in the format they are stored in (kernels/weight_format.h),
// dequantised in registers, with float32 accumulation. Every function
// enqueues its work on `stream` with no host synchronisation and returns
// the launch's error; device pointers are marked d_, host ones are not.
#ifndef RINGMOE_KERNELS_CUDA_OPS_H_
#define RINGMOE_KERNELS_CUDA_OPS_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/weight_format.h"

namespace ringmoe::cuda {

// A weight matrix [rows, cols] in device memory, in PyTorch's [out, in]
// order, with its scales as kernels/weight_format.h describes them.
struct DeviceWeight {
  const void* data = nullptr;
  kernels::WeightType type = kernels::WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_bytes = 0;                // kernels::RowBytes
  const uint16_t* scales = nullptr;     // int8, int4: f16 per group
  int32_t group_size = 0;               // int8, int4
  const float* block_scales = nullptr;  // fp8
  int32_t block_rows = 0;               // fp8
  int32_t block_cols = 0;               // fp8
  const uint8_t* exponents = nullptr;   // mxfp4: e8m0 per 32 values
};

// Products of at most this many rows run as one pass over the weight's
// stored bytes (decode); up to kMaxMmaProductRows rows the same pass runs on
// the tensor cores (float32's precision: mma_dot.cuh) where the weight
// CanDecodeVectorized and x is 16-byte aligned; other products dequantise
// the weight in tiles to float32 and multiply through cuBLAS.
inline constexpr int64_t kMaxFusedProductRows = 8;
inline constexpr int64_t kMaxMmaProductRows = 64;

// d_y[n, w.rows] = d_x[n, w.cols] · wᵀ. Products that ProductUsesCublas
// need `d_scratch` of ProductScratchFloats floats and `cublas` bound to
// `stream`; others take neither (may be null).
cudaError_t LaunchProduct(const DeviceWeight& w, const float* d_x, int64_t n,
                          float* d_y, float* d_scratch, cublasHandle_t cublas,
                          cudaStream_t stream);
bool ProductUsesCublas(const DeviceWeight& w, const float* d_x, int64_t n);
int64_t ProductScratchFloats(const DeviceWeight& w, const float* d_x,
                             int64_t n);

// One of several independent products of one launch: d_y[n, w.rows] =
// d_x[n, w.cols] · wᵀ.
struct ProductOperands {
  DeviceWeight w;
  const float* d_x = nullptr;
  float* d_y = nullptr;
};
inline constexpr int kMaxProductsPerLaunch = 4;
// Whether products of `a` and `b` may share one LaunchFusedProducts: one
// weight type and width, so one kernel and block size serve both.
bool CanLaunchTogether(const DeviceWeight& a, const DeviceWeight& b);
// The products of `count` (1 to kMaxProductsPerLaunch) operands of n <=
// kMaxFusedProductRows rows each, every pair CanLaunchTogether, as one
// launch: decode-sized products (q, k and v of one input) are too small to
// fill the GPU one launch at a time.
cudaError_t LaunchFusedProducts(const ProductOperands* products, int count,
                                int64_t n, cudaStream_t stream);
// Whether the kernels may read `w` eight values per load (rows of whole
// groups of eight, 16-byte aligned).
bool CanDecodeVectorized(const DeviceWeight& w);

// d_out[i, :] = row d_tokens[i] of `table`, widened to float32.
cudaError_t LaunchEmbed(const DeviceWeight& table, const int32_t* d_tokens,
                        int64_t n, float* d_out, cudaStream_t stream);

// d_y[i, j] += d_bias[j] over [rows, cols].
cudaError_t LaunchAddBias(float* d_y, int64_t rows, int64_t cols,
                          const float* d_bias, cudaStream_t stream);
// d_y[i] += d_x[i].
cudaError_t LaunchAdd(float* d_y, const float* d_x, int64_t n,
                      cudaStream_t stream);
// d_y[i] = clamp(d_y[i], -limit, limit).
cudaError_t LaunchClamp(float* d_y, int64_t n, float limit,
                        cudaStream_t stream);

// How a gated MLP's gate g and up u become the down projection's input.
struct GatedActivationParams {
  bool clamped_swiglu = false;  // else silu(g) · u
  float alpha = 1.702f;         // clamped SwiGLU (gpt-oss)
  float limit = 7.f;
};
// d_out[j] = act(d_gate[j * stride], d_up[j * stride]) for j < count.
cudaError_t LaunchGatedActivation(const float* d_gate, const float* d_up,
                                  int64_t stride, int64_t count,
                                  const GatedActivationParams& act,
                                  float* d_out, cudaStream_t stream);

// A tensor of `rows` rows (row stride x_cols) whose rows each hold `count`
// vectors to rotate, vector i starting at column offset + i * stride.
struct RotaryTensor {
  float* d_x = nullptr;
  int64_t x_cols = 0;
  int64_t count = 0;
  int64_t stride = 0;
  int64_t offset = 0;
};
inline constexpr int kMaxRotaryTensors = 4;
// Rotates every vector of `dim` floats of each of `tensors` (1 to
// kMaxRotaryTensors: a layer's queries and keys in one launch) in each row
// by the row's d_cos and d_sin ([rows, dim / 2]); pairs (j, j + dim / 2),
// or (2j, 2j + 1) when interleaved.
cudaError_t LaunchRotary(const RotaryTensor* tensors, int count, int64_t rows,
                         int64_t dim, bool interleaved, const float* d_cos,
                         const float* d_sin, cudaStream_t stream);

// Rows of d_src ([rows, cols]) to write through d_dst (a device array of
// `rows` device row pointers).
struct RowWrites {
  const float* d_src = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  float* const* d_dst = nullptr;
};
inline constexpr int kMaxRowWrites = 4;
// d_dst[i][:cols] = d_src[i, :] for every i < rows of each of `writes` (1
// to kMaxRowWrites: a layer's keys and values in one launch).
cudaError_t LaunchWriteRows(const RowWrites* writes, int count,
                            cudaStream_t stream);
// d_out[i, :] = d_x[d_rows[i], :] for i < n.
cudaError_t LaunchGatherRows(const float* d_x, int64_t cols,
                             const int32_t* d_rows, int64_t n, float* d_out,
                             cudaStream_t stream);
// d_tokens[r] = kernels::GreedyToken(d_logits[r, :cols]) for r < rows: the
// lowest index of the row's maximum, NaN as -inf and +inf as FLT_MAX; -1
// where no value is above -inf.
cudaError_t LaunchGreedyTokens(const float* d_logits, int64_t rows,
                               int64_t cols, int32_t* d_tokens,
                               cudaStream_t stream);
// d_y[d_rows[i], :] += d_scales[i] * d_src[i, :], in order of i (rows may
// repeat), for i < n.
cudaError_t LaunchAddScaledRows(const float* d_src, int64_t cols,
                                const int32_t* d_rows, const float* d_scales,
                                int64_t n, float* d_y, cudaStream_t stream);
// d_y[t] += sigmoid(d_x[t] · d_gate) * d_src[t] for t < rows (d_x [rows,
// x_cols], d_gate [x_cols], d_src and d_y [rows, cols]).
cudaError_t LaunchAddSigmoidGated(const float* d_src, const float* d_x,
                                  const float* d_gate, int64_t rows,
                                  int64_t x_cols, int64_t cols, float* d_y,
                                  cudaStream_t stream);

// One routed expert's MLP in device memory: gate and up ([inter, hidden]
// each) or gate_up ([2 * inter, hidden], rows gate 0, up 0, gate 1, ...,
// with its optional bias), then down ([hidden, inter], optional bias).
struct DeviceExpert {
  DeviceWeight gate, up, gate_up, down;
  const float* gate_up_bias = nullptr;  // [2 * inter] or null
  const float* down_bias = nullptr;     // [hidden] or null
};

// How router logits pick a token's experts and their weights: the device
// counterpart of moe::Router (engine/moe/routing.h states each step),
// with the same ties (to the lower index).
struct DeviceRouting {
  int32_t num_experts = 0;
  int32_t top_k = 0;
  bool sigmoid = false;      // scores: sigmoid of each logit, else softmax
  bool top_k_first = false;  // chosen by logit, softmax over the chosen
  int32_t num_groups = 1;
  int32_t topk_groups = 1;
  bool group_sum_of_two = false;  // group score: its two best, else max
  bool renormalize = true;
  float scaling_factor = 1.f;
  const float* d_selection_bias = nullptr;  // [num_experts] or null
};

// Bounds of LaunchRoutedExperts: decode-sized steps (more tokens go
// through products with host-known row counts, which cuBLAS runs).
inline constexpr int64_t kMaxRoutedTokens = 64;
inline constexpr int64_t kMaxRoutedExperts = 1024;
inline constexpr int64_t kMaxRoutedTopK = 32;

struct RoutedExpertsParams {
  const float* d_x = nullptr;       // [n, hidden]
  const float* d_logits = nullptr;  // [n, num_experts], router bias added
  int64_t n = 0;                    // <= kMaxRoutedTokens
  int64_t hidden = 0;
  int64_t intermediate = 0;
  DeviceRouting routing;
  // [num_experts], all of one weight type, layout and shape.
  const DeviceExpert* d_experts = nullptr;
  kernels::WeightType type = kernels::WeightType::kF32;
  bool fused = false;  // gate_up, else gate and up
  GatedActivationParams activation;
  // Whether every expert's gate/up (resp. down) matrices CanDecode8.
  bool vectorized_gate_up = false;
  bool vectorized_down = false;
  // Stored bytes of one expert's matrices, added to *d_weight_bytes
  // (when not null) for each distinct expert the step runs.
  uint64_t expert_bytes = 0;
  unsigned long long* d_weight_bytes = nullptr;
  void* d_scratch = nullptr;  // RoutedExpertsScratchBytes
  float* d_out = nullptr;     // [n, hidden]
};
size_t RoutedExpertsScratchBytes(int64_t n, int64_t top_k, int64_t num_experts,
                                 int64_t hidden, int64_t intermediate);
// The routed experts of one MoE layer without the host: each token's
// experts and weights routed from its logits, its rows grouped by expert
// (each expert's weights read once for all of its tokens), every expert's
// MLP, and d_out[t] = Σ weight · expert(x[t]) over the token's experts in
// ascending expert order (what moe::GroupByExpert, the MLPs and
// LaunchAddScaledRows compute from a host routing).
cudaError_t LaunchRoutedExperts(const RoutedExpertsParams& p,
                                cudaStream_t stream);

// Causal attention over a paged KV cache. Token i (of sequence
// d_sequence_of[i], at position d_position_of[i]) attends positions
// [max(0, p + 1 - window), p] (window 0: [0, p]); position p of sequence s
// lies in block d_k_blocks[d_table_offset[s] + p / block_size] (d_v_blocks
// likewise), row p % block_size, kv_heads * head_dim floats per row. Query
// head h reads kv head h / (heads / kv_heads). d_sinks: null, or one logit
// per head joining every softmax denominator. head_dim <= kMaxHeadDim.
inline constexpr int64_t kMaxHeadDim = 1024;
struct AttentionParams {
  const float* d_q = nullptr;  // [n, heads * head_dim]
  int64_t n = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.f;
  int64_t window = 0;
  const float* const* d_k_blocks = nullptr;
  const float* const* d_v_blocks = nullptr;
  const int64_t* d_table_offset = nullptr;  // per sequence
  int64_t block_size = 0;
  const int32_t* d_sequence_of = nullptr;  // [n]
  const int64_t* d_position_of = nullptr;  // [n]
  const float* d_sinks = nullptr;          // [heads] or null
  float* d_out = nullptr;                  // [n, heads * head_dim]
};
cudaError_t LaunchAttention(const AttentionParams& p, cudaStream_t stream);

// Multi-head latent attention's absorbed up-projection kv_b ([heads *
// (nope + v_dim), lora]): d_absorbed[t, h * row + c] = Σ_d d_q[t, h * qk +
// d] · kv_b[h * (nope + v_dim) + d, c] for c < lora, then the rope part of
// the query copied after it (row = lora + qk - nope).
cudaError_t LaunchAbsorbMlaQueries(const float* d_q, int64_t n,
                                   const DeviceWeight& kv_b, int64_t heads,
                                   int64_t nope, int64_t qk, int64_t v_dim,
                                   int64_t lora, float* d_absorbed,
                                   cudaStream_t stream);
// d_values[t, h * v_dim + e] = Σ_c d_attended[t, h * row + c] · kv_b[h *
// (nope + v_dim) + nope + e, c] for c < lora.
cudaError_t LaunchExpandMlaValues(const float* d_attended, int64_t n,
                                  const DeviceWeight& kv_b, int64_t heads,
                                  int64_t nope, int64_t v_dim, int64_t lora,
                                  int64_t row, float* d_values,
                                  cudaStream_t stream);

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_OPS_H_

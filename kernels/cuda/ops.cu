// The forward pass's kernels other than products (products.cu): row
// operations, rotary embeddings, attention over the paged KV cache and
// multi-head latent attention's absorbed projections.
#include <algorithm>
#include <cfloat>
#include <cstdint>

#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/weight_decode.cuh"

namespace ringmoe::cuda {
namespace {

constexpr int kThreads = 256;

unsigned GridFor(int64_t work) {
  return static_cast<unsigned>(
      std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, 65535));
}

// Grid-stride loop over [0, n).
#define FOR_EACH_INDEX(i, n)                                            \
  for (int64_t i =                                                      \
           static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
       i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024),
// returned to every thread.
__device__ float BlockSum(float v) {
  __shared__ float partial[32];
  __syncthreads();  // `partial` may still be read by a previous call
  v = WarpSum(v);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
    total += partial[w];
  }
  return total;
}

__global__ void EmbedKernel(DeviceWeight table, const int32_t* tokens,
                            float* out) {
  const int64_t i = blockIdx.x;
  const int32_t token = tokens[i];
  for (int64_t c = threadIdx.x; c < table.cols; c += blockDim.x) {
    out[i * table.cols + c] = WeightAt(table, token, c);
  }
}

__global__ void AddBiasKernel(float* y, int64_t rows, int64_t cols,
                              const float* bias) {
  FOR_EACH_INDEX(i, rows * cols) { y[i] += bias[i % cols]; }
}

__global__ void AddKernel(float* y, const float* x, int64_t n) {
  FOR_EACH_INDEX(i, n) { y[i] += x[i]; }
}

__global__ void ClampKernel(float* y, int64_t n, float limit) {
  FOR_EACH_INDEX(i, n) { y[i] = fminf(fmaxf(y[i], -limit), limit); }
}

__global__ void GatedActivationKernel(const float* gate, const float* up,
                                      int64_t stride, int64_t count,
                                      GatedActivationParams act, float* out) {
  FOR_EACH_INDEX(j, count) {
    out[j] = GatedActivation(gate[j * stride], up[j * stride], act);
  }
}

// The tensors of one LaunchRotary, each a range of work items: one per
// row, vector and pair.
struct RotaryTensors {
  RotaryTensor tensors[kMaxRotaryTensors];
  LaunchRanges<kMaxRotaryTensors> items;
};

// The parameters are read in place (grid constant): picking a tensor by
// the item's index copies nothing to local memory.
__global__ void RotaryKernel(const __grid_constant__ RotaryTensors p,
                             int64_t dim, bool interleaved, const float* cos,
                             const float* sin) {
  const int64_t half = dim / 2;
  FOR_EACH_INDEX(item, p.items.total()) {
    const int k = p.items.Find(item);
    const RotaryTensor& t = p.tensors[k];
    const int64_t idx = item - p.items.first[k];
    const int64_t i = idx / (t.count * half);
    const int64_t h = idx / half % t.count;
    const int64_t j = idx % half;
    float* v = t.d_x + i * t.x_cols + t.offset + h * t.stride;
    float* first = interleaved ? v + 2 * j : v + j;
    float* second = interleaved ? v + 2 * j + 1 : v + j + half;
    const float c = cos[i * half + j], s = sin[i * half + j];
    const float a = *first, b = *second;
    *first = a * c - b * s;
    *second = b * c + a * s;
  }
}

// The writes of one LaunchWriteRows, each a range of blocks: one per row.
struct RowWriteList {
  RowWrites writes[kMaxRowWrites];
  LaunchRanges<kMaxRowWrites> blocks;
};

__global__ void WriteRowsKernel(const __grid_constant__ RowWriteList p) {
  const int k = p.blocks.Find(blockIdx.x);
  const RowWrites& w = p.writes[k];
  const int64_t i = blockIdx.x - p.blocks.first[k];
  float* const dst = w.d_dst[i];
  const float* const src = w.d_src + i * w.cols;
  for (int64_t c = threadIdx.x; c < w.cols; c += blockDim.x) dst[c] = src[c];
}

__global__ void GatherRowsKernel(const float* x, int64_t cols,
                                 const int32_t* rows, float* out) {
  const int64_t i = blockIdx.x;
  const float* from = x + static_cast<int64_t>(rows[i]) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    out[i * cols + c] = from[c];
  }
}

// The better of two (value, index) candidates: the larger value, the lower
// index on ties. Values are never NaN (GreedyTokensKernel skips them).
struct Candidate {
  float value;
  int32_t index;
};
__device__ __forceinline__ Candidate Better(Candidate a, Candidate b) {
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b
                                                                          : a;
}

// One block per row, kernels::GreedyToken's rule: each thread keeps its
// columns' first maximum, then the warps and the block reduce by Better
// (associative, so the reduction's order cannot change the winner).
__global__ void GreedyTokensKernel(const float* logits, int64_t cols,
                                   int32_t* tokens) {
  constexpr int32_t kNone = INT32_MAX;
  __shared__ Candidate warp_best[32];
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * cols;
  Candidate best{-INFINITY, kNone};
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    // +inf ties FLT_MAX; NaN fails both comparisons and never wins (fminf
    // would turn it into FLT_MAX).
    const float value = row[c] > FLT_MAX ? FLT_MAX : row[c];
    if (value > best.value) best = {value, static_cast<int32_t>(c)};
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    best = Better(best, {__shfl_xor_sync(0xffffffffu, best.value, offset),
                         __shfl_xor_sync(0xffffffffu, best.index, offset)});
  }
  if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) {
    best = Better(best, warp_best[w]);
  }
  tokens[blockIdx.x] = best.index == kNone ? -1 : best.index;
}

// One thread per column walks the rows in order, so repeated destination
// rows add up in the order the contract fixes.
__global__ void AddScaledRowsKernel(const float* src, int64_t cols,
                                    const int32_t* rows, const float* scales,
                                    int64_t n, float* y) {
  FOR_EACH_INDEX(c, cols) {
    for (int64_t i = 0; i < n; ++i) {
      y[static_cast<int64_t>(rows[i]) * cols + c] +=
          scales[i] * src[i * cols + c];
    }
  }
}

__global__ void AddSigmoidGatedKernel(const float* src, const float* x,
                                      const float* gate, int64_t x_cols,
                                      int64_t cols, float* y) {
  const int64_t t = blockIdx.x;
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < x_cols; c += blockDim.x) {
    dot += x[t * x_cols + c] * gate[c];
  }
  const float g = 1.f / (1.f + expf(-BlockSum(dot)));
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    y[t * cols + c] += g * src[t * cols + c];
  }
}

constexpr int kAttentionWarps = 4;

// One block per (token, head). Each warp walks every kAttentionWarps-th
// position with an online softmax, lanes splitting the head's dimensions
// (kPerLane each); the warps' partial sums are merged at the end, the sink
// (if any) joining the denominator. Shared memory: the scaled query, each
// warp's running maximum and sum, and its accumulator.
template <int kPerLane>
__global__ void AttentionKernel(AttentionParams p) {
  extern __shared__ float shared[];
  const int64_t hd = p.head_dim;
  float* q = shared;
  float* warp_max = q + hd;
  float* warp_sum = warp_max + kAttentionWarps;
  float* warp_acc = warp_sum + kAttentionWarps;
  const int64_t i = blockIdx.x, h = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    q[d] = p.d_q[(i * p.heads + h) * hd + d] * p.scale;
  }
  __syncthreads();
  const int64_t position = p.d_position_of[i];
  const int64_t first =
      p.window > 0 ? max(int64_t{0}, position + 1 - p.window) : 0;
  const int64_t kv_head = h / (p.heads / p.kv_heads);
  const int64_t row = p.kv_heads * hd;
  const int64_t table = p.d_table_offset[p.d_sequence_of[i]];
  const float* const* k_blocks = p.d_k_blocks + table;
  const float* const* v_blocks = p.d_v_blocks + table;
  float running_max = -INFINITY, running_sum = 0.f;
  float acc[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) acc[j] = 0.f;
  for (int64_t t = first + warp; t <= position; t += kAttentionWarps) {
    const int64_t offset = (t % p.block_size) * row + kv_head * hd;
    const float* k = k_blocks[t / p.block_size] + offset;
    float dot = 0.f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < hd) dot += q[d] * k[d];
    }
    dot = WarpSum(dot);
    const float new_max = fmaxf(running_max, dot);
    const float correction = expf(running_max - new_max);
    const float e = expf(dot - new_max);
    running_sum = running_sum * correction + e;
    const float* v = v_blocks[t / p.block_size] + offset;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int64_t d = lane + 32 * j;
      if (d < hd) acc[j] = acc[j] * correction + e * v[d];
    }
    running_max = new_max;
  }
  if (lane == 0) {
    warp_max[warp] = running_max;
    warp_sum[warp] = running_sum;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int64_t d = lane + 32 * j;
    if (d < hd) warp_acc[warp * hd + d] = acc[j];
  }
  __syncthreads();
  float top = -INFINITY;
  for (int w = 0; w < kAttentionWarps; ++w) top = fmaxf(top, warp_max[w]);
  float weight[kAttentionWarps];
  float total = 0.f;
  for (int w = 0; w < kAttentionWarps; ++w) {
    weight[w] = warp_sum[w] > 0.f ? expf(warp_max[w] - top) : 0.f;
    total += warp_sum[w] * weight[w];
  }
  if (p.d_sinks != nullptr) total += expf(p.d_sinks[h] - top);
  float* out = p.d_out + (i * p.heads + h) * hd;
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.f;
    for (int w = 0; w < kAttentionWarps; ++w) {
      o += warp_acc[w * hd + d] * weight[w];
    }
    out[d] = o / total;
  }
}

constexpr int kMlaTokens = 8;

// Block (head, 128 latent columns, 8 tokens): thread c sums the head's
// nope query dimensions against column c of its kv_b rows.
__global__ void AbsorbMlaQueriesKernel(const float* q, int64_t n,
                                       DeviceWeight kv_b, int64_t heads,
                                       int64_t nope, int64_t qk, int64_t v_dim,
                                       int64_t lora, float* absorbed) {
  const int64_t h = blockIdx.x;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  const int64_t t0 = static_cast<int64_t>(blockIdx.z) * kMlaTokens;
  const int64_t tokens = min(int64_t{kMlaTokens}, n - t0);
  const int64_t row = lora + qk - nope;
  if (c < lora) {
    float acc[kMlaTokens] = {};
    for (int64_t d = 0; d < nope; ++d) {
      const float w = WeightAt(kv_b, h * (nope + v_dim) + d, c);
#pragma unroll
      for (int t = 0; t < kMlaTokens; ++t) {
        if (t < tokens) acc[t] += q[((t0 + t) * heads + h) * qk + d] * w;
      }
    }
    for (int t = 0; t < tokens; ++t) {
      absorbed[((t0 + t) * heads + h) * row + c] = acc[t];
    }
  } else if (c < row) {
    for (int t = 0; t < tokens; ++t) {
      absorbed[((t0 + t) * heads + h) * row + c] =
          q[((t0 + t) * heads + h) * qk + nope + (c - lora)];
    }
  }
}

// One warp per (head, value dimension) and 8 tokens, lanes over the latent.
__global__ void ExpandMlaValuesKernel(const float* attended, int64_t n,
                                      DeviceWeight kv_b, int64_t heads,
                                      int64_t nope, int64_t v_dim, int64_t lora,
                                      int64_t row, float* values) {
  const int lane = threadIdx.x & 31;
  const int64_t out =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (out >= heads * v_dim) return;
  const int64_t h = out / v_dim, e = out % v_dim;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kMlaTokens;
  const int64_t tokens = min(int64_t{kMlaTokens}, n - t0);
  float acc[kMlaTokens] = {};
  for (int64_t c = lane; c < lora; c += 32) {
    const float w = WeightAt(kv_b, h * (nope + v_dim) + nope + e, c);
#pragma unroll
    for (int t = 0; t < kMlaTokens; ++t) {
      if (t < tokens) acc[t] += attended[((t0 + t) * heads + h) * row + c] * w;
    }
  }
#pragma unroll
  for (int t = 0; t < kMlaTokens; ++t) {
    const float sum = WarpSum(acc[t]);
    if (lane == 0 && t < tokens)
      values[((t0 + t) * heads + h) * v_dim + e] = sum;
  }
}

template <int kPerLane>
cudaError_t LaunchAttentionWith(const AttentionParams& p, cudaStream_t stream) {
  const size_t shared =
      (p.head_dim * (1 + kAttentionWarps) + 2 * kAttentionWarps) *
      sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.n), static_cast<unsigned>(p.heads));
  AttentionKernel<kPerLane><<<grid, kAttentionWarps * 32, shared, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchEmbed(const DeviceWeight& table, const int32_t* d_tokens,
                        int64_t n, float* d_out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  EmbedKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      table, d_tokens, d_out);
  return cudaGetLastError();
}

cudaError_t LaunchAddBias(float* d_y, int64_t rows, int64_t cols,
                          const float* d_bias, cudaStream_t stream) {
  if (rows * cols <= 0) return cudaSuccess;
  AddBiasKernel<<<GridFor(rows * cols), kThreads, 0, stream>>>(d_y, rows, cols,
                                                               d_bias);
  return cudaGetLastError();
}

cudaError_t LaunchAdd(float* d_y, const float* d_x, int64_t n,
                      cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  AddKernel<<<GridFor(n), kThreads, 0, stream>>>(d_y, d_x, n);
  return cudaGetLastError();
}

cudaError_t LaunchClamp(float* d_y, int64_t n, float limit,
                        cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  ClampKernel<<<GridFor(n), kThreads, 0, stream>>>(d_y, n, limit);
  return cudaGetLastError();
}

cudaError_t LaunchGatedActivation(const float* d_gate, const float* d_up,
                                  int64_t stride, int64_t count,
                                  const GatedActivationParams& act,
                                  float* d_out, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  GatedActivationKernel<<<GridFor(count), kThreads, 0, stream>>>(
      d_gate, d_up, stride, count, act, d_out);
  return cudaGetLastError();
}

cudaError_t LaunchRotary(const RotaryTensor* tensors, int count, int64_t rows,
                         int64_t dim, bool interleaved, const float* d_cos,
                         const float* d_sin, cudaStream_t stream) {
  if (count < 1 || count > kMaxRotaryTensors) return cudaErrorInvalidValue;
  RotaryTensors p;
  for (int k = 0; k < count; ++k) {
    p.tensors[k] = tensors[k];
    p.items.Append(dim / 2 > 0 ? rows * tensors[k].count * (dim / 2) : 0);
  }
  const int64_t work = p.items.total();
  if (work <= 0) return cudaSuccess;
  RotaryKernel<<<GridFor(work), kThreads, 0, stream>>>(p, dim, interleaved,
                                                       d_cos, d_sin);
  return cudaGetLastError();
}

cudaError_t LaunchWriteRows(const RowWrites* writes, int count,
                            cudaStream_t stream) {
  if (count < 1 || count > kMaxRowWrites) return cudaErrorInvalidValue;
  RowWriteList p;
  for (int k = 0; k < count; ++k) {
    p.writes[k] = writes[k];
    p.blocks.Append(writes[k].cols > 0 ? writes[k].rows : 0);
  }
  const int64_t blocks = p.blocks.total();
  if (blocks <= 0) return cudaSuccess;
  WriteRowsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

cudaError_t LaunchGatherRows(const float* d_x, int64_t cols,
                             const int32_t* d_rows, int64_t n, float* d_out,
                             cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  GatherRowsKernel<<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
      d_x, cols, d_rows, d_out);
  return cudaGetLastError();
}

cudaError_t LaunchGreedyTokens(const float* d_logits, int64_t rows,
                               int64_t cols, int32_t* d_tokens,
                               cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  GreedyTokensKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      d_logits, cols, d_tokens);
  return cudaGetLastError();
}

cudaError_t LaunchAddScaledRows(const float* d_src, int64_t cols,
                                const int32_t* d_rows, const float* d_scales,
                                int64_t n, float* d_y, cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return cudaSuccess;
  AddScaledRowsKernel<<<GridFor(cols), kThreads, 0, stream>>>(
      d_src, cols, d_rows, d_scales, n, d_y);
  return cudaGetLastError();
}

cudaError_t LaunchAddSigmoidGated(const float* d_src, const float* d_x,
                                  const float* d_gate, int64_t rows,
                                  int64_t x_cols, int64_t cols, float* d_y,
                                  cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  AddSigmoidGatedKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      d_src, d_x, d_gate, x_cols, cols, d_y);
  return cudaGetLastError();
}

cudaError_t LaunchAttention(const AttentionParams& p, cudaStream_t stream) {
  if (p.n <= 0 || p.heads <= 0) return cudaSuccess;
  if (p.head_dim <= 0 || p.head_dim > kMaxHeadDim || p.kv_heads <= 0 ||
      p.heads % p.kv_heads != 0 || p.block_size <= 0) {
    return cudaErrorInvalidValue;
  }
  if (p.head_dim <= 128) return LaunchAttentionWith<4>(p, stream);
  if (p.head_dim <= 256) return LaunchAttentionWith<8>(p, stream);
  if (p.head_dim <= 640) return LaunchAttentionWith<20>(p, stream);
  return LaunchAttentionWith<kMaxHeadDim / 32>(p, stream);
}

cudaError_t LaunchAbsorbMlaQueries(const float* d_q, int64_t n,
                                   const DeviceWeight& kv_b, int64_t heads,
                                   int64_t nope, int64_t qk, int64_t v_dim,
                                   int64_t lora, float* d_absorbed,
                                   cudaStream_t stream) {
  if (n <= 0 || heads <= 0) return cudaSuccess;
  const int64_t row = lora + qk - nope;
  const dim3 grid(static_cast<unsigned>(heads),
                  static_cast<unsigned>((row + 127) / 128),
                  static_cast<unsigned>((n + kMlaTokens - 1) / kMlaTokens));
  AbsorbMlaQueriesKernel<<<grid, 128, 0, stream>>>(d_q, n, kv_b, heads, nope,
                                                   qk, v_dim, lora, d_absorbed);
  return cudaGetLastError();
}

cudaError_t LaunchExpandMlaValues(const float* d_attended, int64_t n,
                                  const DeviceWeight& kv_b, int64_t heads,
                                  int64_t nope, int64_t v_dim, int64_t lora,
                                  int64_t row, float* d_values,
                                  cudaStream_t stream) {
  if (n <= 0 || heads <= 0) return cudaSuccess;
  constexpr int kWarps = 8;
  const dim3 grid(static_cast<unsigned>((heads * v_dim + kWarps - 1) / kWarps),
                  static_cast<unsigned>((n + kMlaTokens - 1) / kMlaTokens));
  ExpandMlaValuesKernel<<<grid, kWarps * 32, 0, stream>>>(
      d_attended, n, kv_b, heads, nope, v_dim, lora, row, d_values);
  return cudaGetLastError();
}

}  // namespace ringmoe::cuda

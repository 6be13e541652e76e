#include <algorithm>
#include <cfloat>

#include "kernels/cuda/ops.h"

namespace ringmoe::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void SiluMulKernel(const float* __restrict__ gate,
                              const float* __restrict__ up, int64_t n,
                              float* __restrict__ out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.f + __expf(-g)) * up[i];
  }
}

__global__ void RotaryHalfKernel(float* x, int heads, int head_dim,
                                 const int32_t* positions,
                                 const float* inv_freq,
                                 float attention_factor) {
  const int t = blockIdx.x;
  const int half = head_dim / 2;
  const float pos = static_cast<float>(positions[t]);
  for (int i = threadIdx.x; i < heads * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    float s, c;
    sincosf(pos * inv_freq[j], &s, &c);
    c *= attention_factor;
    s *= attention_factor;
    float* v = x + (int64_t(t) * heads + h) * head_dim;
    const float a = v[j], b = v[j + half];
    v[j] = a * c - b * s;
    v[j + half] = b * c + a * s;
  }
}

// One warp per token: the logits sit in registers (experts <= 256 = 8 per
// lane), the softmax uses warp reductions, and top-k repeats an argmax.
__global__ void RouterTopKKernel(const float* __restrict__ logits, int tokens,
                                 int experts, int k, bool renormalize,
                                 int32_t* chosen, float* weights) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= tokens) return;
  float v[8];
  float max_v = -FLT_MAX;
  for (int j = 0; j < 8; ++j) {
    const int e = lane + 32 * j;
    v[j] = e < experts ? logits[int64_t(warp) * experts + e] : -FLT_MAX;
    max_v = fmaxf(max_v, v[j]);
  }
  for (int o = 16; o > 0; o >>= 1)
    max_v = fmaxf(max_v, __shfl_xor_sync(0xffffffffu, max_v, o));
  float sum = 0.f;
  for (int j = 0; j < 8; ++j) {
    const int e = lane + 32 * j;
    v[j] = e < experts ? __expf(v[j] - max_v) : -1.f;
    if (e < experts) sum += v[j];
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  float picked_sum = 0.f;
  for (int r = 0; r < k; ++r) {
    float best = -1.f;
    int best_e = experts;
    for (int j = 0; j < 8; ++j) {
      const int e = lane + 32 * j;
      if (v[j] > best || (v[j] == best && e < best_e)) {
        best = v[j];
        best_e = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) {
        best = ob;
        best_e = oe;
      }
    }
    if (lane == 0) {
      chosen[int64_t(warp) * k + r] = best_e;
      weights[int64_t(warp) * k + r] = best / sum;
    }
    picked_sum += best / sum;
    if ((best_e % 32) == lane) v[best_e / 32] = -1.f;
  }
  if (renormalize && lane == 0) {
    for (int r = 0; r < k; ++r) weights[int64_t(warp) * k + r] /= picked_sum;
  }
}

// One block per (sequence, head); threads split the positions, keep an
// online softmax each, and merge through shared memory (log-sum-exp).
__global__ void PagedAttentionDecodeKernel(
    const float* __restrict__ q, const float* __restrict__ k_cache,
    const float* __restrict__ v_cache, const int32_t* __restrict__ block_table,
    const int32_t* __restrict__ lengths, int heads, int kv_heads, int head_dim,
    int block_size, int max_blocks, int64_t block_stride, float scale,
    float* __restrict__ out) {
  extern __shared__ float
      shared[];  // [head_dim] q, then per-thread max/sum, then acc
  const int s = blockIdx.x / heads, h = blockIdx.x % heads;
  const int kvh = h / (heads / kv_heads);
  const int length = lengths[s];
  float* sq = shared;
  float* smax = sq + head_dim;
  float* ssum = smax + blockDim.x;
  float* sacc = ssum + blockDim.x;  // [blockDim.x, head_dim]
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    sq[d] = q[(int64_t(s) * heads + h) * head_dim + d];
  }
  __syncthreads();
  float m = -FLT_MAX, l = 0.f;
  float* acc = sacc + threadIdx.x * head_dim;
  for (int d = 0; d < head_dim; ++d) acc[d] = 0.f;
  const int64_t row = int64_t(kv_heads) * head_dim;
  for (int p = threadIdx.x; p < length; p += blockDim.x) {
    const int64_t base =
        int64_t(block_table[int64_t(s) * max_blocks + p / block_size]) *
            block_stride +
        (p % block_size) * row + int64_t(kvh) * head_dim;
    float dot = 0.f;
    for (int d = 0; d < head_dim; ++d) dot += sq[d] * k_cache[base + d];
    dot *= scale;
    const float m_new = fmaxf(m, dot);
    const float correction = __expf(m - m_new), w = __expf(dot - m_new);
    l = l * correction + w;
    for (int d = 0; d < head_dim; ++d)
      acc[d] = acc[d] * correction + w * v_cache[base + d];
    m = m_new;
  }
  smax[threadIdx.x] = m;
  ssum[threadIdx.x] = l;
  __syncthreads();
  float gm = -FLT_MAX;
  for (int t = 0; t < blockDim.x; ++t) gm = fmaxf(gm, smax[t]);
  float gl = 0.f;
  for (int t = 0; t < blockDim.x; ++t) {
    if (ssum[t] > 0.f) gl += ssum[t] * __expf(smax[t] - gm);
  }
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float o = 0.f;
    for (int t = 0; t < blockDim.x; ++t) {
      if (ssum[t] > 0.f) o += sacc[t * head_dim + d] * __expf(smax[t] - gm);
    }
    out[(int64_t(s) * heads + h) * head_dim + d] = o / gl;
  }
}

}  // namespace

cublasStatus_t MatMulBf16(cublasHandle_t handle, const __nv_bfloat16* x,
                          int64_t n, const __nv_bfloat16* w, int64_t rows,
                          int64_t cols, __nv_bfloat16* y) {
  // Row-major y = x wᵀ is column-major yᵀ = w xᵀ: A = w (cols x rows,
  // transposed), B = x (cols x n).
  const float alpha = 1.f, beta = 0.f;
  return cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows),
                      static_cast<int>(n), static_cast<int>(cols), &alpha, w,
                      CUDA_R_16BF, static_cast<int>(cols), x, CUDA_R_16BF,
                      static_cast<int>(cols), &beta, y, CUDA_R_16BF,
                      static_cast<int>(rows), CUBLAS_COMPUTE_32F,
                      CUBLAS_GEMM_DEFAULT);
}

cudaError_t LaunchSiluMulF32(const float* gate, const float* up, int64_t n,
                             float* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int blocks =
      static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096));
  SiluMulKernel<<<blocks, kThreads, 0, stream>>>(gate, up, n, out);
  return cudaGetLastError();
}

cudaError_t LaunchRotaryHalfF32(float* x, int tokens, int heads, int head_dim,
                                const int32_t* positions, const float* inv_freq,
                                float attention_factor, cudaStream_t stream) {
  if (tokens <= 0) return cudaSuccess;
  RotaryHalfKernel<<<tokens, 128, 0, stream>>>(x, heads, head_dim, positions,
                                               inv_freq, attention_factor);
  return cudaGetLastError();
}

cudaError_t LaunchRouterTopK(const float* logits, int tokens, int experts,
                             int k, bool renormalize, int32_t* chosen,
                             float* weights, cudaStream_t stream) {
  if (experts > 256 || k > experts || k <= 0) return cudaErrorInvalidValue;
  if (tokens <= 0) return cudaSuccess;
  const int warps_per_block = kThreads / 32;
  RouterTopKKernel<<<(tokens + warps_per_block - 1) / warps_per_block, kThreads,
                     0, stream>>>(logits, tokens, experts, k, renormalize,
                                  chosen, weights);
  return cudaGetLastError();
}

cudaError_t LaunchPagedAttentionDecode(
    const float* q, const float* k_cache, const float* v_cache,
    const int32_t* block_table, const int32_t* lengths, int seqs, int heads,
    int kv_heads, int head_dim, int block_size, int max_blocks,
    int64_t block_stride, float scale, float* out, cudaStream_t stream) {
  if (seqs <= 0) return cudaSuccess;
  if (heads % kv_heads != 0) return cudaErrorInvalidValue;
  const int threads = 64;
  const size_t shared =
      sizeof(float) * (head_dim + 2 * threads + threads * head_dim);
  PagedAttentionDecodeKernel<<<seqs * heads, threads, shared, stream>>>(
      q, k_cache, v_cache, block_table, lengths, heads, kv_heads, head_dim,
      block_size, max_blocks, block_stride, scale, out);
  return cudaGetLastError();
}

}  // namespace ringmoe::cuda

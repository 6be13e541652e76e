// CUDA kernels of the forward pass (the CUDA backend's counterpart of
// kernels/cpu/ops.h). bf16 weights and activations where marked, float32
// accumulation throughout. Every launch is enqueued on the given stream with
// no host synchronisation and returns the launch's error.
#ifndef RINGMOE_KERNELS_CUDA_OPS_H_
#define RINGMOE_KERNELS_CUDA_OPS_H_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ringmoe::cuda {

// y[n, rows] = x[n, cols] · wᵀ with w [rows, cols] bf16 (PyTorch layout),
// x and y bf16, float32 accumulation, through cuBLAS.
cublasStatus_t MatMulBf16(cublasHandle_t handle, const __nv_bfloat16* x,
                          int64_t n, const __nv_bfloat16* w, int64_t rows,
                          int64_t cols, __nv_bfloat16* y);

// out = silu(gate) * up over n float32 values.
cudaError_t LaunchSiluMulF32(const float* gate, const float* up, int64_t n,
                             float* out, cudaStream_t stream);

// Rotate-half RoPE in place on x [tokens, heads, head_dim]; token t uses
// position positions[t] and inv_freq [head_dim / 2].
cudaError_t LaunchRotaryHalfF32(float* x, int tokens, int heads, int head_dim,
                                const int32_t* positions, const float* inv_freq,
                                float attention_factor, cudaStream_t stream);

// Router: softmax over `experts` logits per token, top-k (ties to the lower
// index), weights renormalised when `renormalize`. experts <= 256, k <= 16.
cudaError_t LaunchRouterTopK(const float* logits, int tokens, int experts,
                             int k, bool renormalize, int32_t* chosen,
                             float* weights, cudaStream_t stream);

// Decode attention over a paged KV cache. q [seqs, heads, head_dim]; for
// sequence s, positions [0, lengths[s]) live in blocks
// block_table[s * max_blocks + p / block_size], row p % block_size, each row
// kv_heads * head_dim floats of k_cache (v_cache) at block * block_stride.
cudaError_t LaunchPagedAttentionDecode(
    const float* q, const float* k_cache, const float* v_cache,
    const int32_t* block_table, const int32_t* lengths, int seqs, int heads,
    int kv_heads, int head_dim, int block_size, int max_blocks,
    int64_t block_stride, float scale, float* out, cudaStream_t stream);

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_OPS_H_

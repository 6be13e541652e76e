// Entry points the dispatching code in ops.cc chooses between: the AVX2
// implementations (avx2.cc, built with -mavx2 -mfma -mf16c) and the scalar
// ones. Not part of the public API.
#ifndef RINGMOE_KERNELS_CPU_INTERNAL_H_
#define RINGMOE_KERNELS_CPU_INTERNAL_H_

#include <cstdint>

#include "kernels/cpu/matrix.h"

namespace ringmoe::kernels::internal {

// Columns [row_begin, row_end) of y[n, w.rows] = x[n, w.cols] · wᵀ.
void MatMulRowsScalar(const float* x, int64_t n, const Matrix& w,
                      int64_t row_begin, int64_t row_end, float* y);
void MatMulRowsAvx2(const float* x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y);

// Σ a[i] * b[i].
float DotAvx2(const float* a, const float* b, int64_t n);
// y[i] += alpha * x[i].
void AxpyAvx2(float alpha, const float* x, int64_t n, float* y);

// AttendOneQueryPartial (ops.h) over a KvBlocks given as its three fields.
void AttendPartialAvx2(const float* q, int64_t num_heads, int64_t num_kv_heads,
                       int64_t head_dim, const float* const* k_blocks,
                       const float* const* v_blocks, int64_t block_size,
                       int64_t first_position, int64_t end_position,
                       float scale, float* out, float* log_sum_exp);
// out = silu(gate) * up (out may alias either input).
void SiluMulAvx2(const float* gate, const float* up, int64_t n, float* out);

// Sum of n floats read with 256-bit loads (the bandwidth probe's loop).
float SumAvx2(const float* data, int64_t n);
// `iterations` rounds of 12 independent 8-wide FMA chains: 192 FLOPs each.
float FmaLoopAvx2(int64_t iterations);

}  // namespace ringmoe::kernels::internal

#endif  // RINGMOE_KERNELS_CPU_INTERNAL_H_

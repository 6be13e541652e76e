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

// Sum of n floats read with 256-bit loads (the bandwidth probe's loop).
float SumAvx2(const float* data, int64_t n);
// `iterations` rounds of 12 independent 8-wide FMA chains: 192 FLOPs each.
float FmaLoopAvx2(int64_t iterations);

}  // namespace ringmoe::kernels::internal

#endif  // RINGMOE_KERNELS_CPU_INTERNAL_H_

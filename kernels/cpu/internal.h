// Entry points the dispatching code in ops.cc chooses between: the AVX2
// implementations (avx2.cc, built with -mavx2 -mfma -mf16c) and the scalar
// ones. Not part of the public API.
#ifndef RINGMOE_KERNELS_CPU_INTERNAL_H_
#define RINGMOE_KERNELS_CPU_INTERNAL_H_

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matrix.h"

namespace ringmoe::kernels::internal {

// Columns [row_begin, row_end) of y[n, w.rows] = x[n, w.cols] · wᵀ.
void MatMulRowsScalar(const float* x, int64_t n, const Matrix& w,
                      int64_t row_begin, int64_t row_end, float* y);
void MatMulRowsAvx2(const float* x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y);

// Rows [row_begin, row_end) of y[w.rows] = x[w.cols] · wᵀ for one
// activation row (avx512.cc, built with AVX-512 F/BW/VL/VNNI): int8 and
// int4 weights there, the other types on the AVX2 path. int8 and int4
// use the AVX2 path's quantized activations, so their integer dot products
// are the same; only the order of the float sums differs.
void MatMulRowAvx512(const float* x, const Matrix& w, int64_t row_begin,
                     int64_t row_end, float* y);

// One activation row against the rows of a weight matrix: when the row
// (as the kernel reads it: float32, int16 or int8 chunks) is at most
// StreamActivationBytes(), two thirds of the L1 data cache, it stays in L1
// while the weight rows stream past one after another (with a 48 KiB L1,
// streams beat tiles by 10-15% up to 28 KiB of activations). Longer, it
// would be read again from L2 for every weight row, so the kernels take
// rows four at a time and prefetch their four streams kLongRowPrefetchLines
// cache lines ahead.
inline int64_t StreamActivationBytes() { return L1DataCacheBytes() * 2 / 3; }

// Rows [rb, re) against one activation row of `activation_bytes`: one after
// another while it fits StreamActivationBytes(), in fours beyond (the last
// rows one at a time). `tile(r0, std::integral_constant<int, R>())`
// computes rows r0..r0 + R - 1.
template <typename TileFn>
void ForEachRowTile(int64_t activation_bytes, int64_t rb, int64_t re,
                    const TileFn& tile) {
  int64_t r = rb;
  if (activation_bytes > StreamActivationBytes()) {
    for (; r + 4 <= re; r += 4) tile(r, std::integral_constant<int, 4>());
  }
  for (; r < re; ++r) tile(r, std::integral_constant<int, 1>());
}
constexpr int kLongRowPrefetchLines = 32;

// The single-stream kernels (and the bandwidth probe) prefetch the line
// this many bytes ahead of each one they load, with the non-temporal hint
// (the weights are read once per step). The hardware prefetchers alone
// kept too few lines in flight: 15-20% below this at 1024x2048 and
// 14336x4096 bf16 in both of this VM's memory states (4 KiB and 8 KiB
// were best; 8 KiB ahead in the faster state).
constexpr int64_t kStreamPrefetchBytes = 8 << 10;
inline void PrefetchStream(const void* p,
                           int64_t ahead = kStreamPrefetchBytes) {
  __builtin_prefetch(static_cast<const char*>(p) + ahead, 0, 0);
}

// One 64-column chunk of an activation row quantized to int8 for int4
// weights, laid out to match 32 bytes of them: byte i holds columns 2i (low
// nibble) and 2i + 1 (high), so `even[i]` is column 2i and `odd[i]` column
// 2i + 1. The int32 lanes of the byte products cover bytes 4k..4k+3: lanes
// 0-3 the first block of 32 columns, lanes 4-7 the second. `offset` is 8 ×
// each lane's sum of activations (weights are stored as nibble = q + 8) and
// `scale` each lane's block scale.
struct alignas(32) Int8Chunk {
  int8_t even[32];
  int8_t odd[32];
  int32_t offset[8];
  float scale[8];
};

// Quantizes n rows of `cols` activations into `chunks` Int8Chunks per row
// (blocks of 32, scale max|x| / 127, round to nearest even).
void QuantizeActivationsInt8Avx2(const float* x, int64_t n, int64_t cols,
                                 int64_t chunks, Int8Chunk* out);
// Quantizes n rows of `cols` activations to int16 in blocks of 32 (scale
// max|x| / 32767, round to nearest even): q[n, blocks * 32] with the
// padding of the last block zero, scale[n, blocks], blocks = ceil(cols / 32).
void QuantizeActivationsInt16Avx2(const float* x, int64_t n, int64_t cols,
                                  int16_t* q, float* scale);

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
// AttendQueryBlock (ops.h) over a KvBlocks given as its three fields.
void AttendBlockAvx2(const float* q, int64_t count, int64_t num_heads,
                     int64_t num_kv_heads, int64_t head_dim,
                     const float* const* k_blocks, const float* const* v_blocks,
                     int64_t block_size, int64_t first_query, int64_t window,
                     float scale, float* out);
// y = x * scale * w elementwise (RmsNorm's second pass; y may alias x).
void ScaleMulAvx2(const float* x, float scale, const float* w, int64_t n,
                  float* y);
// Softmax (ops.h) with the vector exponential.
void SoftmaxAvx2(float* x, int64_t n);
// ApplyRotaryHalf (ops.h).
void RotaryHalfAvx2(float* x, int64_t num_heads, int64_t head_dim,
                    const float* cos, const float* sin);
// out = silu(gate) * up (out may alias either input).
void SiluMulAvx2(const float* gate, const float* up, int64_t n, float* out);

// Sum of n floats read with 256-bit loads (the bandwidth probe's loop),
// each line prefetched `prefetch_bytes` ahead with the non-temporal hint
// (0: none, the hardware prefetchers alone).
float SumAvx2(const float* data, int64_t n, int64_t prefetch_bytes);
// `iterations` rounds of 12 independent 8-wide FMA chains: 192 FLOPs each.
float FmaLoopAvx2(int64_t iterations);

}  // namespace ringmoe::kernels::internal

#endif  // RINGMOE_KERNELS_CPU_INTERNAL_H_

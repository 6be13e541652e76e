// The entry points of the instruction-set units that the dispatching code
// (ops.cc, probes.cc) chooses between: the avx2_*.cc files (built for AVX2,
// FMA and F16C), avx512.cc (AVX-512 F/BW/VL/VNNI) and avx512_bf16.cc (the
// same and AVX512-BF16). Not part of the public API.
//
// An instruction-set unit defines every function, type and template of its
// own inside its namespace (avx2::, avx512::, avx512bf16::) and instantiates
// nothing of the standard library: whatever it emits under a name that another
// translation unit also emits (an inline helper, std::vector<float>::resize)
// is merged by the linker, which may keep this unit's copy, built for its
// instruction set, for the whole program. Helpers the units share are
// compiled into each namespace from isa_unit-inl.h; working memory comes
// from ThreadScratch (scratch.h). //kernels/cpu:isa_symbols_test reads the
// units' symbols and fails on any outside their namespace.
#ifndef RINGMOE_KERNELS_CPU_ISA_H_
#define RINGMOE_KERNELS_CPU_ISA_H_

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/matrix.h"
#include "kernels/cpu/scratch.h"

namespace ringmoe::kernels {

namespace avx2 {

// AccumulateRowProducts (ops.h) for every type but int4.
void AccumulateRows(const float* c, int64_t ldc, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y, int64_t ldy);

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
void QuantizeActivationsInt8(const float* x, int64_t n, int64_t cols,
                             int64_t chunks, Int8Chunk* out);
// Quantizes n rows of `cols` activations to int16 in blocks of 32 (scale
// max|x| / 32767, round to nearest even): q[n, blocks * 32] with the
// padding of the last block zero, scale[n, blocks], blocks = ceil(cols / 32).
void QuantizeActivationsInt16(const float* x, int64_t n, int64_t cols,
                              int16_t* q, float* scale);
// The same to one int8 level (scale max|x| / 127) in column order, the
// layout int8 weights meet (QuantizeActivationsInt8 splits each 64 columns
// by parity for int4's nibbles; both give the same values).
void QuantizeActivationsInt8InOrder(const float* x, int64_t n, int64_t cols,
                                    int8_t* q, float* scale);

// mxfp4 products against one activation row run on it quantized in three
// int8 levels, so that the weights meet it as bytes (vpmaddubsw, vpdpbusd)
// rather than widened to float, as precisely: per block of 32 columns with
// s = max|x| / 127, x ≈ s * (q1 + q2 / 256 + q3 / 65536), each level the
// rounded remainder of the one before, an error of at most s / 2^17.
// (Two levels, int16's precision, kept the golden models' logits within
// 1.1-1.8e-4 of the reference, above the 1e-4 they are held to.) A span is
// four blocks laid out to match their 64 weight bytes: byte i holds columns
// 2i (low nibble) and 2i + 1 (high), so `even[l][i]` is level l of column
// 2i and `odd[l][i]` of column 2i + 1. Int32 lane k of the byte products
// covers bytes 4k..4k+3, columns 8k..8k+7, of block k / 4; `offset[k]` is
// kMxfp4WeightBias × that lane's Σ (65536 q1 + 256 q2 + q3), since the
// weights meet the activations as 2 * e2m1 + 12 (unsigned bytes 0..24).
// (Enumerators rather than constexpr variables: those would be emitted, at
// -O0, into every unit that uses them, outside its namespace.)
enum : int {
  kMxfp4Levels = 3,
  kMxfp4BlocksPerSpan = 4,
  kMxfp4WeightBias = 12,
};
struct alignas(64) Mxfp4Span {
  int8_t even[kMxfp4Levels][64];
  int8_t odd[kMxfp4Levels][64];
  int32_t offset[16];
};

// Quantizes `cols` activations (blocks = ceil(cols / 32)) into
// ceil(blocks / 4) Mxfp4Spans and writes each block's s / 2^17 (the weights
// are the integers 2 * e2m1) to `scales`, zero from block `blocks` up to a
// multiple of 16. With t = x / s in [-127, 127]: q1 = round(t), r = 256 *
// (t - q1) (exact in float), q2 = round(r) and q3 = round(256 * (r - q2))
// up to 127, each rounded to nearest even; where q2 rounds to 128 (only
// where q1 was rounded down, so q1 < 127), q1 + 1 and q2 - 256 stand for q1
// and q2, as int8 holds -128 but not 128. With `levels` 2 (rather than
// kMxfp4Levels) q1 and q2 are written, the offsets are kMxfp4WeightBias × Σ
// (256 q1 + q2) and the scales s / 2^9: x ≈ s * (q1 + q2 / 256), within s /
// 2^9 (finer than bf16 for every x above 2^-7 of its block's largest).
// With 1 only q1 is written, the offsets are kMxfp4WeightBias × Σ q1 and
// the scales s / 2: x ≈ s * q1, llama.cpp's Q8_0 precision.
void QuantizeMxfp4Activations(const float* x, int64_t cols, int64_t blocks,
                              int levels, Mxfp4Span* spans, float* scales);

// n activation rows of `cols` quantized by QuantizeMxfp4Activations: row
// j's spans at spans + j * num_spans, its block scales at scales + j *
// padded_blocks (blocks rounded up to 16) and, for the AVX2 kernels, the
// scales of each group of eight blocks in the order of avx2_mxfp4.cc's
// kArrangedLane, its block offsets (the sum of a block's span offsets, 0
// past the last block) likewise at offsets + j * padded_blocks. ops.cc
// quantizes a product's activations once, before its rows are shared out
// among the threads, and every piece of the product reads them, rather than
// each piece quantizing them again.
struct Mxfp4QuantizedRows {
  const Mxfp4Span* spans = nullptr;
  const float* scales = nullptr;
  const float* offsets = nullptr;  // the AVX2 kernels' only
  int64_t blocks = 0;
  int64_t num_spans = 0;
  int64_t padded_blocks = 0;  // a multiple of 16
};
// The layout of rows of `cols` (no storage).
Mxfp4QuantizedRows Mxfp4QuantizedLayout(int64_t cols);
// Quantizes n rows of `cols` into spans (n * num_spans) and scales (n *
// padded_blocks floats, 64-byte aligned) and, where `offsets` (as many
// floats) is not null, arranges them for the AVX2 kernels.
Mxfp4QuantizedRows QuantizeMxfp4Rows(const float* x, int64_t n, int64_t cols,
                                     int levels, Mxfp4Span* spans,
                                     float* scales, float* offsets);

// Columns [row_begin, row_end) of y[n, w.rows] = x[n, w.cols] · wᵀ, each
// weight read once from memory and widened in registers: for few
// activation rows of f32, bf16, f16 and fp8 weights (int8, int4 and mxfp4:
// MatMulRowsInt8, MatMulRowsInt4 and MatMulRowsMxfp4, on activations
// quantized once per product). `alone`: x's one row is the whole batch,
// read against the weights as streams; otherwise every row, one or
// several, goes in tiles, so each row's sum is formed alike whatever n is.
void MatMulRowsDirect(const float* x, int64_t n, const Matrix& w,
                      int64_t row_begin, int64_t row_end, float* y, bool alone);

// n activation rows quantized once per product (ops.cc) for the int8 and
// int4 products below, as ops.h's MatMulTransposed describes, in memory
// the caller owns: int4's as n * chunks Int8Chunks in `q` (chunks of 32
// weight bytes) and, for one row (only a row alone is read four chunks at
// a time), its four-chunk scales then corrections in `scales`;
// int8's as int16 in column order (n rows of blocks * 32 in `q`, one scale
// per block of 32 in `scales`), or where one_level (Q8_0 × Q8_0, for one
// activation row alone) as one int8 level in column order.
struct DirectActivations {
  const void* q = nullptr;
  const float* scales = nullptr;
  int64_t q_bytes = 0;
  int64_t scale_count = 0;
};
// The bytes of `q` and the floats of `scales` that n rows against w take.
DirectActivations DirectActivationLayout(const Matrix& w, int64_t n,
                                         bool one_level);
// Quantizes x's n rows for products against w (int8 or int4) into q and
// scales (both 32-byte aligned).
DirectActivations PrepareDirectActivations(const float* x, int64_t n,
                                           const Matrix& w, bool one_level,
                                           void* q, float* scales);
// MatMulRowsDirect for int8 weights and int4 weights, on x prepared by
// PrepareDirectActivations (with the same one_level).
void MatMulRowsInt8(const DirectActivations& x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y, bool alone,
                    bool one_level);
void MatMulRowsInt4(const DirectActivations& x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y, bool alone);
// The same for mxfp4 weights, on n activation rows quantized in `levels`
// (1 to kMxfp4Levels) int8 levels and arranged for these kernels
// (QuantizeMxfp4Rows with offsets).
void MatMulRowsMxfp4(const Mxfp4QuantizedRows& x, int64_t n, const Matrix& w,
                     int64_t row_begin, int64_t row_end, float* y, bool alone,
                     int levels);
// The same blocked for the caches, on float32 activations: for many
// activation rows of f32, bf16, f16, int8, fp8 and mxfp4 weights (int4's
// integer products beat blocked float ones at every count: ops.cc never
// sends it here).
void MatMulRowsBlocked(const float* x, int64_t n, const Matrix& w,
                       int64_t row_begin, int64_t row_end, float* y);

// The activations of an fp8 product for the weight rows of row block
// `row_block` (w.block_rows rows that share one scale per column block):
// scaled[j * w.cols + k] = x[j * w.cols + k] * kFp8ActivationUnit * that
// block's scale of column k, for j < n, so that the weights widen with no
// multiply (as Fp8TimesTwoToMinus120, isa_unit-inl.h).
void ScaleFp8Activations(const Matrix& w, int64_t row_block, const float* x,
                         int64_t n, float* scaled);
// Σ a[i] * b[i].
float Dot(const float* a, const float* b, int64_t n);
// y[i] += alpha * x[i].
void Axpy(float alpha, const float* x, int64_t n, float* y);

// AttendOneQueryPartial (ops.h) over a KvBlocks given as its three fields.
void AttendPartial(const float* q, int64_t num_heads, int64_t num_kv_heads,
                   int64_t head_dim, const float* const* k_blocks,
                   const float* const* v_blocks, int64_t block_size,
                   int64_t first_position, int64_t end_position, float scale,
                   float* out, float* log_sum_exp);
// AttendQueryBlock (ops.h) over a KvBlocks given as its three fields.
void AttendBlock(const float* q, int64_t count, int64_t num_heads,
                 int64_t num_kv_heads, int64_t head_dim,
                 const float* const* k_blocks, const float* const* v_blocks,
                 int64_t block_size, int64_t first_query, int64_t window,
                 float scale, const float* sinks, float* out);
// y = x * scale * w elementwise (RmsNorm's second pass; y may alias x).
void ScaleMul(const float* x, float scale, const float* w, int64_t n, float* y);
// Softmax (ops.h) with the vector exponential.
void Softmax(float* x, int64_t n);
// ApplyRotaryHalf (ops.h).
void RotaryHalf(float* x, int64_t num_heads, int64_t head_dim, const float* cos,
                const float* sin);
// out = silu(gate) * up (out may alias either input).
void SiluMul(const float* gate, const float* up, int64_t n, float* out);
// out[i] = RoundToLevel(x[i] * scale, lo, hi) (numeric.h), the weight
// quantizers' rounding, lane for lane.
void RoundToLevels(const float* x, int64_t n, float scale, float lo, float hi,
                   int8_t* out);
// The largest |x[i]|, i < n, NaN ignored (0 when there is none).
float MaxAbs(const float* x, int64_t n);

// Sum of n floats read with 256-bit loads (the bandwidth probe's loop) as
// `streams` (1 or 3) sequential streams at once, the thirds of the range
// (the rest after them alone), each line prefetched `prefetch_bytes` ahead
// with the non-temporal hint (0: none, the hardware prefetchers alone).
float Sum(const float* data, int64_t n, int64_t prefetch_bytes, int streams);
// `iterations` rounds of 12 independent 8-wide FMA chains: 192 FLOPs each.
float FmaLoop(int64_t iterations);

}  // namespace avx2

namespace avx512 {

// Rows [row_begin, row_end) of y[w.rows] = x[w.cols] · wᵀ for one
// activation row against fp8 weights, on the AVX2 path's scaled
// activations, so only the order of the float sums differs (other types:
// the AVX2 path's).
void MatMulRow(const float* x, const Matrix& w, int64_t row_begin,
               int64_t row_end, float* y);

// Rows [row_begin, row_end) of y[n, w.rows] = x[n, w.cols] · wᵀ for n
// activation rows (few: up to DirectProductRows(kMxfp4)) against mxfp4
// weights, on the AVX2 path's quantized activations in `levels` levels
// (QuantizeMxfp4Rows, no offsets needed), so the integer dot products are
// the AVX2 path's; only the order of the float sums differs. Each weight
// row is read from memory once for all n, and each output is formed alike
// whatever n.
void MatMulRowsMxfp4(const avx2::Mxfp4QuantizedRows& x, int64_t n,
                     const Matrix& w, int64_t row_begin, int64_t row_end,
                     float* y, int levels);

// n activation rows prepared once per product (ops.cc) for the int8 or
// int4 products below, in memory the caller owns: row a's quantized
// activations at rows + a * row_bytes (int8: their int16 split in two int8
// levels, or their one int8 level; int4: int8 chunks of 32 as the AVX2 path
// quantizes them, paired to meet 64 weight bytes), its block scales at
// scales + a * padded_blocks (a multiple of 16).
struct IntegerActivations {
  const void* rows = nullptr;
  int64_t row_bytes = 0;  // a multiple of 64
  const float* scales = nullptr;
  int64_t padded_blocks = 0;
};
// row_bytes and padded_blocks for activations against w (int8 or int4).
IntegerActivations IntegerActivationLayout(const Matrix& w);
// Quantizes x's n rows for products against w (int8: to one int8 level
// where activation_levels is 1, else to int16) into rows (n * row_bytes)
// and scales (n * padded_blocks floats), both 64-byte aligned.
IntegerActivations PrepareIntegerActivations(const float* x, int64_t n,
                                             const Matrix& w,
                                             int activation_levels, void* rows,
                                             float* scales);

// Rows [row_begin, row_end) of y[n, w.rows] = x[n, w.cols] · wᵀ for n
// activation rows (few: up to ops.cc's kAvx512IntegerRows) prepared by
// PrepareIntegerActivations against int4 weights, and against int8 weights
// (activation_levels 1: one int8 level per block of 32, Q8_0 × Q8_0, one
// vpdpbusd per 64 weights instead of two; else int16), each weight row read
// from memory once for all of them. The integer dot products are the AVX2
// path's; only the order of the float sums differs. Each output is formed
// alike whatever n.
void MatMulRowsInt4(const IntegerActivations& x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y);
void MatMulRowsInt8(const IntegerActivations& x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y,
                    int activation_levels);

// The same for n activation rows (2 to DirectProductRows(kBF16); one too,
// as a product of more) against bf16 weights, each weight widened once for
// up to eight of them. Each output's sum is formed alike whatever n.
void MatMulRowsBf16(const float* x, int64_t n, const Matrix& w,
                    int64_t row_begin, int64_t row_end, float* y);

}  // namespace avx512

namespace avx512bf16 {

// xb[i * ldx + k] = x[i * cols + k] rounded to bf16 as numeric.h's F32ToBf16
// rounds (to nearest even), for i < n and k < cols; zero for cols <= k <
// ldx (ldx a multiple of 16).
void RoundToBf16(const float* x, int64_t n, int64_t cols, int64_t ldx,
                 uint16_t* xb);

// Rows [row_begin, row_end) of y[n, w.rows] = xb[n, w.cols] · wᵀ for bf16
// weights `w` against bf16 activations `xb` (rows ldx apart, ldx a multiple
// of 32 >= w.cols, zero past w.cols): every product of two bf16 exact in
// float32, summed in float32 (with vdpbf16ps, which treats subnormal inputs
// and results as zero). The kernel is that of a product of `batch_rows`
// (>= n) rows, each row's sum formed alike whatever n (MatMulJob): up to 7
// rows stream the weight rows, more broadcast them.
void MatMulRows(const uint16_t* xb, int64_t ldx, int64_t n, const Matrix& w,
                int64_t row_begin, int64_t row_end, float* y,
                int64_t batch_rows);

// Rows [row_begin, row_end) of y = x · wᵀ for fp8 e4m3 weights `w` against
// one activation row x, each activation times its block scale rounded to
// bf16 (as numeric.h's F32ToBf16) and multiplied by the exact bf16 of the
// weight, summed in float32 (vdpbf16ps). Only where UseAvx512Bf16Vbmi().
void MatMulRowFp8(const float* x, const Matrix& w, int64_t row_begin,
                  int64_t row_end, float* y);

// `iterations` rounds of 12 independent 16-lane vdpbf16ps chains: 768
// FLOPs each.
float Bf16DotLoop(int64_t iterations);

}  // namespace avx512bf16

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_ISA_H_

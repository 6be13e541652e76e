// The CPU math the engine's forward pass is built from. Model-agnostic:
// shapes and layouts are explicit, nothing here knows about layers or
// architectures. Activations are float32; weights may be f32, bf16, f16,
// int8 or int4 and are widened as they are read (accumulation is always
// float32). Kernels dispatch at run time to AVX-512, AVX2/FMA/F16C or a
// portable scalar path, as the CPU allows (see cpu_features.h and the
// *Path functions below).
#ifndef RINGMOE_KERNELS_CPU_OPS_H_
#define RINGMOE_KERNELS_CPU_OPS_H_

#include <cstdint>

#include "absl/types/span.h"
#include "base/thread_pool.h"
#include "kernels/cpu/matrix.h"

namespace ringmoe::kernels {

// The instruction-set path a kernel takes.
enum class KernelPath { kScalar, kAvx2, kAvx512, kAvx512Bf16 };
// "scalar", "avx2", "avx512" or "avx512_bf16".
const char* KernelPathName(KernelPath path);

// The precision a product of bf16, fp8 or mxfp4 (kBf16, kInt8) or int8
// (kInt8) weights may multiply its activations in. Weights of every other type
// ignore it.
enum class ActivationPrecision {
  // float32 activations: every product is exact to float32 rounding (the
  // golden tests hold the models to 1e-4 of a float64 reference this way).
  kF32,
  // Products of bf16 weights, where the CPU multiplies bf16 pairs natively
  // (UseAvx512Bf16()), round the activations to bf16 (to nearest even)
  // first, as llama.cpp's CPU kernels and GPU servers do: each product of
  // two bf16 is exact and the sums are float32, so what is lost is the
  // activations' rounding (2^-9 relative at most), for twice the
  // multiply-adds per instruction (faster prefill and batched decode) and
  // no widening of the weights, with half the activations' bytes (decode
  // draws more of memory's bandwidth). So do products of fp8 weights
  // against one
  // activation row (decode) where the CPU also has AVX512-VBMI
  // (UseAvx512Bf16Vbmi()), each activation rounded after its block scale:
  // fp8 servers multiply in bf16 (DeepSeek's own inference rounds further,
  // to fp8), and there it halves the vector work per weight. Products of
  // mxfp4 weights against at most DirectProductRows(kMxfp4) activation
  // rows (the AVX2 and AVX-512 integer paths) quantize their activations
  // in two int8 levels per block of 32 instead of three (x ≈ s · (q1 + q2
  // / 256), s = max|x| / 127: within s / 2^9, finer than bf16's rounding
  // for every activation above 2^-7 of its block's largest), for a third
  // less integer work per weight.
  // Other products multiply float32.
  kBf16,
  // As kBf16, and products of mxfp4 weights against at most
  // DirectProductRows(kMxfp4) activation rows (the AVX2 and AVX-512
  // integer paths) quantize their activations to one int8 level per block
  // of 32 (scale max|x| / 127) instead of two or three, as llama.cpp multiplies
  // MXFP4 against Q8_0 activations: about a third of the integer work, for
  // an error of up to s / 2 per activation (2^-8 of its block's largest)
  // instead of s / 2^17. Products of int8 weights against one activation
  // row on the AVX2 path, and against up to 8 on the AVX-512 one, likewise
  // take one int8 level instead of int16 (Q8_0 × Q8_0): on AVX-512 one
  // vpdpbusd per 64 weights instead of two, on AVX2 one vpmaddubsw per 32
  // instead of two vpmaddwd.
  kInt8,
};

// "f32", "bf16" or "int8" (the engine's --activation_precision values).
const char* ActivationPrecisionName(ActivationPrecision precision);

// The path of a product of `n` activation rows against weights of `type` on
// this CPU (with the paths cpu_features.h forces): AVX512-BF16 for bf16
// weights when `precision` is kBf16 or kInt8 and UseAvx512Bf16(), and for
// fp8 weights at n == 1 under the same precisions where
// UseAvx512Bf16Vbmi(); AVX-512 where UseAvx512() for
// one row against fp8 weights, for up to 8 rows against int8 and int4 weights,
// for up to DirectProductRows(kMxfp4) rows against mxfp4 weights and for 2 to
// DirectProductRows(kBF16) rows against bf16
// weights (float32 activations: each weight widened once for up to 8
// rows); else AVX2 where UseAvx2(), else scalar. MatMulTransposed and
// MatMulBatch take it.
KernelPath ProductPath(
    WeightType type, int64_t n,
    ActivationPrecision precision = ActivationPrecision::kF32);
// The path of every other kernel here (attention, norms, softmax, rotary
// embedding, SiLU, dot and axpy): AVX2 where UseAvx2(), else scalar.
KernelPath VectorPath();

// Bytes of the whole matrix (data plus scales): what a product reads from
// memory.
int64_t MatrixBytes(const Matrix& w);
// Block scales of a kFp8E4M3 matrix (0 for every other type).
int64_t BlockScaleCount(const Matrix& w);

// Converts `src` (any type) to `type` (any but kFp8E4M3 and kMxfp4), writing
// QuantizedDataBytes bytes to `data` and QuantizedScaleCount f16 scales to
// `scales`; returns the view. int8 scales each group by its largest magnitude /
// 127; int4 maps each group's largest-magnitude value to -8. The scale is
// rounded to f16 first and the values quantized against the rounded one (round
// to nearest), so the f16 rounding costs no accuracy. A scale beyond the
// largest f16 (weights over 8.3e6 in magnitude for int8) saturates.
Matrix QuantizeMatrix(const Matrix& src, WeightType type, int32_t group_size,
                      void* data, uint16_t* scales);

// On the AVX2 path, products of at most this many activation rows read each
// weight once from memory and widen it in registers (int8, int4 and mxfp4:
// multiply it as an integer against quantized activations, see
// MatMulTransposed); products of more rows are blocked for the caches and
// use float32 activations. The counts are where the two measured equal
// (docs/PERFORMANCE.md): 32 rows for f32, bf16 and f16, 64 for int8, 8 for
// mxfp4; int4's integer products were faster at every count.
int64_t DirectProductRows(WeightType type);

// DirectProductRows(kMxfp4) where the CPU has AVX2, else 0: mxfp4 products
// of at most this many activation rows run on activations quantized to 24
// bits (see MatMulTransposed).
int64_t Mxfp4IntegerProductRows();

// y[n, w.rows] = x[n, w.cols] · wᵀ. On the AVX2 path, int8 and int4 products
// with at most DirectProductRows(type) activation rows first quantize the
// activations to
// L = 32767 (int8 weights) or L = 127 (int4 weights) levels, in blocks of 32
// columns: scale = max|x| / L (float), q = round-to-nearest-even(
// x · (L / max|x|)); the integer products are exact, so the result is
// Σ_blocks scale · Σ q · w to float rounding. mxfp4 products of at most
// Mxfp4IntegerProductRows() rows quantize each block of 32 in three int8
// levels, x ≈ s · (q1 + q2 / 256 + q3 / 65536) with s = max|x| / 127, each
// level the rounded remainder of the one before (QuantizeMxfp4Activations
// in isa.h: within s / 2^17 of x), and multiply exactly likewise; a
// MatMulJob's ActivationPrecision::kBf16 keeps q1 and q2, kInt8 q1 alone.
// Everything else is computed on float32 activations.
void MatMulTransposed(const float* x, int64_t n, const Matrix& w, float* y);

// MatMulTransposed for the columns [row_begin, row_end) of y[n, w.rows]
// only (weight rows [row_begin, row_end)); the other columns are untouched.
// `batch_rows`: MatMulJob's.
void MatMulTransposedRows(const float* x, int64_t n, const Matrix& w,
                          int64_t row_begin, int64_t row_end, float* y,
                          int64_t batch_rows = 0);

// The product with w untransposed over a range of its rows, accumulated:
// y[i * ldy + k] += Σ_{r in [row_begin, row_end)} c[i * ldc + r - row_begin]
// · w[r, k] for i < n, k < w.cols (MLA's absorbed key projection: a query
// taken into latent space). Each weight is read once per call for every i;
// AVX2 for every type but int4, which widens rows on the scalar path.
void AccumulateRowProducts(const float* c, int64_t ldc, int64_t n,
                           const Matrix& w, int64_t row_begin, int64_t row_end,
                           float* y, int64_t ldy);

// One product of a batch of independent products.
struct MatMulJob {
  const float* x = nullptr;  // [n, w.cols]
  int64_t n = 0;
  Matrix w;
  float* y = nullptr;  // [n, w.rows]
  ActivationPrecision precision = ActivationPrecision::kF32;
  // The rows of the whole batch that x's n rows are a share of (0: n;
  // else at least n). The path (ProductPath) and the kernel are those of a
  // product of batch_rows rows, and every kernel forms each row's sum alike
  // whatever its share, so a share computed apart (a rank's sequences
  // under data-parallel attention) gives the whole batch's rows bitwise.
  int64_t batch_rows = 0;
};

// The path MatMulBatch runs `job` on: ProductPath of its batch_rows (at
// least its n).
KernelPath ProductPath(const MatMulJob& job);

// Runs every job, splitting them over output rows into one parallel loop on
// `pool` (null: inline), so small products of different experts share the
// threads instead of each being split thinly.
void MatMulBatch(absl::Span<const MatMulJob> jobs, ThreadPool* pool);

// Widens (dequantizes) row `row` of `w` into `out[w.cols]`.
void ReadRow(const Matrix& w, int64_t row, float* out);

// Σ a[i] · b[i] over n values.
float Dot(const float* a, const float* b, int64_t n);

// y[i] += alpha · x[i] over n values.
void Axpy(float alpha, const float* x, int64_t n, float* y);

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

// Rotary embedding in the interleaved layout (DeepSeek's MLA): dimensions
// (2j, 2j + 1) of x[h * stride .. h * stride + dim) pair, for each h <
// count. cos and sin hold dim/2 values. Scalar on every path: it touches a
// few dozen values per token and head.
void ApplyRotaryInterleaved(float* x, int64_t count, int64_t stride,
                            int64_t dim, const float* cos, const float* sin);

// In-place numerically stable softmax over n values.
void Softmax(float* x, int64_t n);

// out = silu(gate) * up, elementwise (out may alias either input).
void SiluMul(const float* gate, const float* up, int64_t n, float* out);

// Indices of the k largest values, largest first; ties go to the lower index.
void TopK(const float* x, int64_t n, int k, int32_t* indices);

// Greedy decoding's token: the index of the largest of n logits, NaN
// counting as -inf and +inf as FLT_MAX (so they tie), the lowest index on
// ties; -1 when every value is -inf or NaN. The sampler's rule, which a
// device backend's ArgMaxRows reproduces.
int32_t GreedyToken(const float* x, int64_t n);

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

// AttendOneQuery over a slice of the positions, for splitting one query's
// keys across threads: `out` is the slice's own normalised output and
// `log_sum_exp[num_heads]` the log of its softmax denominator (in scaled
// score units), which MergeAttention uses to weight the slices.
void AttendOneQueryPartial(const float* q, int64_t num_heads,
                           int64_t num_kv_heads, int64_t head_dim,
                           const KvBlocks& kv, int64_t first_position,
                           int64_t end_position, float scale, float* out,
                           float* log_sum_exp);

// Causal attention of `count` consecutive query tokens of one sequence
// (prefill): token i, at position first_query + i, attends positions
// [first_query + i + 1 - window, first_query + i] clipped at 0 (window 0:
// from position 0). q and out are [count, num_heads * head_dim]. Keys are
// taken in blocks and each block is used by every query of the call
// (online softmax), so a key or value row is read once per call rather
// than once per query. `sinks`, when not null, is one logit per query head
// (gpt-oss's attention sinks) that joins every query's softmax denominator
// and attends to nothing: head h's output is scaled by Z / (Z + e^sinks[h]),
// Z its denominator over the keys (in scaled score units).
void AttendQueryBlock(const float* q, int64_t count, int64_t num_heads,
                      int64_t num_kv_heads, int64_t head_dim,
                      const KvBlocks& kv, int64_t first_query, int64_t window,
                      float scale, const float* sinks, float* out);

// Combines `num_parts` partial results ([num_parts, num_heads, head_dim]
// outputs and [num_parts, num_heads] log-sum-exps) into out.
void MergeAttention(int64_t num_parts, int64_t num_heads, int64_t head_dim,
                    const float* outs, const float* log_sum_exps, float* out);

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_OPS_H_

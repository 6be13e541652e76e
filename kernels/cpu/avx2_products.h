// Internal to the AVX2 products (avx2_direct.cc, avx2_blocked.cc,
// avx2_quantized.cc, avx2_mxfp4.cc): the weight loaders and what else they
// share.
//
// Products are computed as dot products of weight rows with activation rows
// in register tiles of R weight rows × N activation rows. Up to three
// activation rows, weights are widened in registers as they are read
// (decode: bound by memory bandwidth; with one activation row, one weight
// row after another, so the matrix is read as sequential streams: see
// ForEachOneRowTile), except int8 and int4, whose products run on quantized
// activations (see Int8Rows and Int8Chunk), and mxfp4 against up to three
// rows (three int8 levels of activations, Mxfp4Span). With more rows, a panel
// of four weight rows is widened to float32 once into a small buffer and reused
// for every activation row (prefill: bound by FMA throughput).
#ifndef RINGMOE_KERNELS_CPU_AVX2_PRODUCTS_H_
#define RINGMOE_KERNELS_CPU_AVX2_PRODUCTS_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx2_internal.h"
#include "kernels/cpu/isa.h"

namespace ringmoe::kernels::avx2 {

// Weight loaders: Load widens 8 weights at (row, k) when k + 8 <= cols;
// LoadTail the last `count` < 8 of a row, zero-filled.
template <typename Derived>
struct ScalarTail {
  // Whether the loader's whole chunks of 32 columns are read 32 at a time
  // in an interleaved order (LoadChunk: see Fp8InterleavedLoader) rather
  // than 8 at a time in natural order.
  static constexpr bool kInterleavedChunks = false;
  __m256 LoadTail(int64_t row, int64_t k, int64_t count) const {
    alignas(32) float buf[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const auto& self = static_cast<const Derived&>(*this);
    for (int64_t i = 0; i < count; ++i) buf[i] = self.Scalar(row, k + i);
    return _mm256_load_ps(buf);
  }
};

struct F32Loader : ScalarTail<F32Loader> {
  static constexpr WeightType kType = WeightType::kF32;
  static constexpr int64_t kPerLine = 16;
  const float* p;
  int64_t ld;
  const void* Address(int64_t r, int64_t k) const { return p + r * ld + k; }
  __m256 Load(int64_t r, int64_t k) const {
    return _mm256_loadu_ps(p + r * ld + k);
  }
  float Scalar(int64_t r, int64_t k) const { return p[r * ld + k]; }
};

struct Bf16Loader : ScalarTail<Bf16Loader> {
  static constexpr WeightType kType = WeightType::kBF16;
  static constexpr int64_t kPerLine = 32;
  const uint16_t* p;
  int64_t ld;
  const void* Address(int64_t r, int64_t k) const { return p + r * ld + k; }
  __m256 Load(int64_t r, int64_t k) const {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + r * ld + k));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  float Scalar(int64_t r, int64_t k) const {
    const uint32_t bits = static_cast<uint32_t>(p[r * ld + k]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
};

struct F16Loader : ScalarTail<F16Loader> {
  static constexpr WeightType kType = WeightType::kF16;
  static constexpr int64_t kPerLine = 32;
  const uint16_t* p;
  int64_t ld;
  const void* Address(int64_t r, int64_t k) const { return p + r * ld + k; }
  __m256 Load(int64_t r, int64_t k) const {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + r * ld + k)));
  }
  float Scalar(int64_t r, int64_t k) const { return _cvtsh_ss(p[r * ld + k]); }
};

// float8 e4m3fn weights: the sign, exponent and mantissa bits moved into
// an IEEE half make the fp8 value times 2^-8 exactly (subnormals included;
// NaN codes are not), so F16C widens them and the block scale times 2^8
// restores the value. Each byte lands in the high half of a 16-bit lane; an
// arithmetic shift right by one then puts the exponent and mantissa in
// place and a copy of the sign in bit 14, which the mask clears.
inline __m256 Fp8TimesTwoToMinus8(const uint8_t* p) {
  const __m128i high =
      _mm_unpacklo_epi8(_mm_setzero_si128(),
                        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtph_ps(_mm_and_si128(
      _mm_srai_epi16(high, 1), _mm_set1_epi16(static_cast<int16_t>(0xbf80))));
}

inline float Fp8TimesTwoToMinus8(uint8_t b) {
  return _cvtsh_ss(
      static_cast<uint16_t>(((b & 0x7f) << 7) | ((b & 0x80) << 8)));
}

// Weights with their block scales: the same product as fp8 * scale in
// float32. A block spans at least 8 columns, so 8 weights at a multiple of 8
// share a scale.
struct Fp8Loader : ScalarTail<Fp8Loader> {
  static constexpr WeightType kType = WeightType::kFp8E4M3;
  static constexpr int64_t kPerLine = 64;
  const uint8_t* p;
  int64_t ld;  // cols
  const float* scales;
  int64_t scales_per_row;
  int row_shift;  // log2(block_rows)
  int col_shift;  // log2(block_cols)
  const void* Address(int64_t r, int64_t k) const { return p + r * ld + k; }
  float Scale(int64_t r, int64_t k) const {
    return scales[(r >> row_shift) * scales_per_row + (k >> col_shift)] * 256.f;
  }
  __m256 Load(int64_t r, int64_t k) const {
    return _mm256_mul_ps(Fp8TimesTwoToMinus8(p + r * ld + k),
                         _mm256_set1_ps(Scale(r, k)));
  }
  float Scalar(int64_t r, int64_t k) const {
    return Fp8TimesTwoToMinus8(p[r * ld + k]) * Scale(r, k);
  }
};

// float8 e4m3fn weights as float32 bit patterns equal to the fp8 value
// times 2^-120, with no conversion instruction: sign-extended to 32 bits
// and shifted left by 20, a byte has its sign in bit 31 (and copies of it in
// bits 27-30, which the mask clears), its exponent in the low four bits of
// the float's and its mantissa at the top of the float's; an fp8 subnormal
// becomes the float subnormal of the same value times 2^-120. Two integer
// operations per 8 weights where F16C's widening costs four µops.
// (kFp8FloatBitsMask: isa_unit-inl.h.)
inline __m256 Fp8TimesTwoToMinus120(const uint8_t* p) {
  const __m256i words = _mm256_cvtepi8_epi32(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_and_si256(
      _mm256_slli_epi32(words, 20), _mm256_set1_epi32(kFp8FloatBitsMask)));
}
inline float Fp8TimesTwoToMinus120(uint8_t b) {
  const int32_t bits =
      (static_cast<int32_t>(static_cast<int8_t>(b)) * (1 << 20)) &
      kFp8FloatBitsMask;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// The weights alone (value times 2^-120), for the products whose
// activations carry the block scales (the decode products: see
// Fp8DirectRows), 32 at a time in interleaved column order: LoadChunk's
// out[t] holds columns k + 4d + t (d < 8), so the activations of every
// whole chunk of 32 columns are laid out in that order
// (InterleaveFp8Chunks); Load and LoadTail read the columns after the last
// whole chunk in natural order. As 16-bit words, the odd bytes of a chunk
// are already in the high halves and the even ones get there by one shift
// left; an arithmetic shift right by 4 then puts a byte's exponent and
// mantissa where a float's sit in the top 16 bits, with copies of its sign
// (and, for odd bytes, the even byte's top bits) masked off. Each word
// vector's high halves are then four floats' worth of columns by a mask,
// its low halves by a 32-bit shift: nine integer operations per 32 weights
// where Fp8TimesTwoToMinus120 takes twelve.
struct Fp8InterleavedLoader : ScalarTail<Fp8InterleavedLoader> {
  static constexpr WeightType kType = WeightType::kFp8E4M3;
  static constexpr int64_t kPerLine = 64;
  static constexpr bool kInterleavedChunks = true;
  const uint8_t* p;
  int64_t ld;
  const void* Address(int64_t r, int64_t k) const { return p + r * ld + k; }
  void LoadChunk(int64_t r, int64_t k, __m256 out[4]) const {
    const __m256i bytes =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + r * ld + k));
    const __m256i word_mask = _mm256_set1_epi16(static_cast<int16_t>(0x87f0));
    const __m256i high_half =
        _mm256_set1_epi32(static_cast<int32_t>(0xffff0000u));
    const __m256i odd =
        _mm256_and_si256(_mm256_srai_epi16(bytes, 4), word_mask);
    const __m256i even = _mm256_and_si256(
        _mm256_srai_epi16(_mm256_slli_epi16(bytes, 8), 4), word_mask);
    out[0] = _mm256_castsi256_ps(_mm256_slli_epi32(even, 16));
    out[1] = _mm256_castsi256_ps(_mm256_slli_epi32(odd, 16));
    out[2] = _mm256_castsi256_ps(_mm256_and_si256(even, high_half));
    out[3] = _mm256_castsi256_ps(_mm256_and_si256(odd, high_half));
  }
  __m256 Load(int64_t r, int64_t k) const {
    return Fp8TimesTwoToMinus120(p + r * ld + k);
  }
  float Scalar(int64_t r, int64_t k) const {
    return Fp8TimesTwoToMinus120(p[r * ld + k]);
  }
};

inline Fp8Loader MakeFp8Loader(const Matrix& w) {
  return {{},
          static_cast<const uint8_t*>(w.data),
          w.cols,
          w.block_scales,
          (w.cols + w.block_cols - 1) / w.block_cols,
          __builtin_ctz(static_cast<unsigned>(w.block_rows)),
          __builtin_ctz(static_cast<unsigned>(w.block_cols))};
}

// Rows are padded to whole groups, so a tail load stays inside the row and
// the padding (zero bytes) widens to zero.
struct Int8Loader {
  static constexpr WeightType kType = WeightType::kInt8;
  static constexpr int64_t kPerLine = 64;
  const int8_t* p;
  int64_t row_bytes;
  const uint16_t* scales;  // f16
  int64_t groups;          // per row
  int group_shift;         // log2(group_size)
  const void* Address(int64_t r, int64_t k) const {
    return p + r * row_bytes + k;
  }
  __m256 Load(int64_t r, int64_t k) const {
    const __m128i b = _mm_loadl_epi64(
        reinterpret_cast<const __m128i*>(p + r * row_bytes + k));
    const __m256 s =
        _mm256_set1_ps(_cvtsh_ss(scales[r * groups + (k >> group_shift)]));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)), s);
  }
  __m256 LoadTail(int64_t r, int64_t k, int64_t) const { return Load(r, k); }
};

// mxfp4 weights, exactly: each of 8 weights' nibble (from 4 bytes, each
// byte copied into two 32-bit lanes shifted by 0 and 4) picks its e2m1
// magnitude from a register table by its low three bits, bit 3 becomes
// the float's sign, and the block's e8m0 scale multiplies (exact: a power
// of two). Rows are whole blocks of 32, so a load stays inside the row;
// LoadTail leaves out the padding's nibbles.
struct Mxfp4Loader : ScalarTail<Mxfp4Loader> {
  static constexpr WeightType kType = WeightType::kMxfp4;
  static constexpr int64_t kPerLine = 128;
  const uint8_t* p;
  int64_t blocks;  // per row; a row is blocks * 16 bytes
  const uint8_t* exponents;
  const void* Address(int64_t r, int64_t k) const {
    return p + r * blocks * 16 + k / 2;
  }
  float Scale(int64_t r, int64_t k) const {
    return E8m0ToF32Exact(exponents[r * blocks + k / kMxfp4Block]);
  }
  __m256 Load(int64_t r, int64_t k) const {
    int32_t four;
    std::memcpy(&four, p + r * blocks * 16 + k / 2, sizeof(four));
    const __m128i bytes = _mm_cvtsi32_si128(four);
    const __m256i codes =
        _mm256_srlv_epi32(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(bytes, bytes)),
                          _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
    const __m256 magnitude = _mm256_permutevar8x32_ps(
        _mm256_setr_ps(0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f), codes);
    const __m256 sign = _mm256_castsi256_ps(
        _mm256_and_si256(_mm256_slli_epi32(codes, 28),
                         _mm256_set1_epi32(static_cast<int32_t>(0x80000000u))));
    return _mm256_mul_ps(_mm256_xor_ps(magnitude, sign),
                         _mm256_set1_ps(Scale(r, k)));
  }
  float Scalar(int64_t r, int64_t k) const {
    const uint8_t byte = p[r * blocks * 16 + k / 2];
    return E2m1ToF32(k & 1 ? byte >> 4 : byte) * Scale(r, k);
  }
};

// Calls fn with the loader of w's type: every type but int4, whose nibbles
// only the integer products read.
template <typename Fn>
void VisitLoader(const Matrix& w, Fn&& fn) {
  const int64_t cols = w.cols;
  switch (w.type) {
    case WeightType::kF32:
      return fn(F32Loader{{}, static_cast<const float*>(w.data), cols});
    case WeightType::kBF16:
      return fn(Bf16Loader{{}, static_cast<const uint16_t*>(w.data), cols});
    case WeightType::kF16:
      return fn(F16Loader{{}, static_cast<const uint16_t*>(w.data), cols});
    case WeightType::kInt8: {
      const int64_t groups = (cols + w.group_size - 1) / w.group_size;
      return fn(Int8Loader{static_cast<const int8_t*>(w.data),
                           groups * w.group_size, w.scales, groups,
                           __builtin_ctz(static_cast<unsigned>(w.group_size))});
    }
    case WeightType::kFp8E4M3:
      return fn(MakeFp8Loader(w));
    case WeightType::kMxfp4:
      return fn(Mxfp4Loader{{},
                            static_cast<const uint8_t*>(w.data),
                            (cols + kMxfp4Block - 1) / kMxfp4Block,
                            w.exponents});
    case WeightType::kInt4:
      return;
  }
}

// How many cache lines ahead of the loads the weight rows of a tile against
// a few activation rows are prefetched (see DirectRows).
constexpr int kPrefetchLines = 8;

}  // namespace ringmoe::kernels::avx2

#endif  // RINGMOE_KERNELS_CPU_AVX2_PRODUCTS_H_

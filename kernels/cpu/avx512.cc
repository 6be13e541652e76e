// AVX-512 products for one activation row (batch-1 decode). This
// translation unit alone is compiled with -mavx512f -mavx512bw -mavx512vl
// -mavx512vnni; ops.cc calls into it only when UseAvx512() holds.
//
// int8 and int4 only: at one activation row their AVX2 kernels do several
// vector µops per 8 weight bytes, and 512-bit vectors (with VNNI for int4)
// halve that, on activations quantized exactly as the AVX2 path does. bf16
// was tried (32 weights per load, shift and mask, two FMAs) and was no
// faster than the AVX2 path, slower on weights not 64-byte aligned
// (docs/PERFORMANCE.md). Rows are read one after another, one sequential
// stream per thread (see StreamRows in avx2.cc), with two accumulators to
// keep FMA latency off the critical path.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/internal.h"

namespace ringmoe::kernels::internal {
namespace {

// int8 against int16 activations (QuantizeActivationsInt16Avx2): one block
// of 32 weights is one vpmovsxbw and one vpmaddwd into 16 exact int32
// lanes, then one convert and one FMA with the product of the two block
// scales (the same float product as the AVX2 path's).
template <int G>
void Int8Rows(const int8_t* w, int64_t row_bytes, const float* scales,
              int64_t groups, const int16_t* q, const float* q_scale,
              int64_t blocks, int64_t rb, int64_t re, float* y) {
  constexpr int kBlocksPerGroup = G / 32;
  for (int64_t r = rb; r < re; ++r) {
    const int8_t* row = w + r * row_bytes;
    const float* ws = scales + r * groups;
    const auto block = [&](int64_t b, __m512 acc) {
      const __m512i dot = _mm512_madd_epi16(
          _mm512_cvtepi8_epi16(_mm256_loadu_si256(
              reinterpret_cast<const __m256i*>(row + 32 * b))),
          _mm512_loadu_si512(q + 32 * b));
      return _mm512_fmadd_ps(
          _mm512_cvtepi32_ps(dot),
          _mm512_set1_ps(ws[b / kBlocksPerGroup] * q_scale[b]), acc);
    };
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= blocks; b += 2) {
      acc0 = block(b, acc0);
      acc1 = block(b + 1, acc1);
    }
    if (b < blocks) acc0 = block(b, acc0);
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }
}

// Two consecutive Int8Chunks with each field joined, so that 64 bytes of
// int4 weights meet their activations in single 512-bit loads.
struct alignas(64) Int8ChunkPair {
  int8_t even[64];
  int8_t odd[64];
  int32_t offset[16];
  float scale[16];
};

// Joins `count` chunks into (count + 1) / 2 pairs; an odd last chunk is
// paired with zeros (whose products, offsets and scales are zero).
void PairChunks(const Int8Chunk* chunks, int64_t count, Int8ChunkPair* out) {
  const Int8Chunk zero{};
  for (int64_t p = 0; p < (count + 1) / 2; ++p) {
    for (int h = 0; h < 2; ++h) {
      const Int8Chunk& c = 2 * p + h < count ? chunks[2 * p + h] : zero;
      std::copy_n(c.even, 32, out[p].even + 32 * h);
      std::copy_n(c.odd, 32, out[p].odd + 32 * h);
      std::copy_n(c.offset, 8, out[p].offset + 8 * h);
      std::copy_n(c.scale, 8, out[p].scale + 8 * h);
    }
  }
}

// int4 against int8 activations: 64 weight bytes are split into nibbles
// and multiplied as bytes by two vpdpbusd (each int32 lane sums the same
// four bytes' products as the AVX2 path's vpmaddubsw + vpmaddwd, so the
// integers are identical), then offset, converted and scaled per lane.
template <int G>
void Int4Rows(const uint8_t* w, int64_t row_bytes, const float* scales,
              int64_t groups, const Int8ChunkPair* x, int64_t rb, int64_t re,
              float* y) {
  constexpr int kGroupsPerPair = 128 / G;
  const int64_t full = row_bytes / 64;
  const __mmask64 tail_bytes =
      _cvtu64_mask64((uint64_t{1} << (row_bytes % 64)) - 1);
  const __mmask16 tail_groups =
      _cvtu32_mask16((1u << (groups - full * kGroupsPerPair)) - 1);
  // Int32 lane l covers bytes 4l..4l+3, columns 8l..8l+7: group 8l / G.
  const __m512i scale_lane =
      G == 32
          ? _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3)
          : _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  for (int64_t r = rb; r < re; ++r) {
    const uint8_t* row = w + r * row_bytes;
    const float* ws = scales + r * groups;
    // `pair_scales` holds pair p's kGroupsPerPair weight scales first.
    const auto pair = [&](int64_t p, __m512i wv, __m512 pair_scales,
                          __m512 acc) {
      const Int8ChunkPair& xp = x[p];
      const __m512i lo = _mm512_and_si512(wv, nibble);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wv, 4), nibble);
      __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo,
                                        _mm512_load_si512(xp.even));
      dot = _mm512_dpbusd_epi32(dot, hi, _mm512_load_si512(xp.odd));
      dot = _mm512_sub_epi32(dot, _mm512_load_si512(xp.offset));
      const __m512 s = _mm512_permutexvar_ps(scale_lane, pair_scales);
      return _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot),
                             _mm512_mul_ps(s, _mm512_load_ps(xp.scale)), acc);
    };
    // Masked loads of every pair's scales ran at three quarters of the
    // speed of these plain ones; only the row's last, partial pair needs
    // one.
    const auto full_pair = [&](int64_t p, __m512 acc) {
      const float* s = ws + kGroupsPerPair * p;
      const __m128 pair_scales =
          G == 32 ? _mm_loadu_ps(s)
                  : _mm_castsi128_ps(
                        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s)));
      return pair(p, _mm512_loadu_si512(row + 64 * p),
                  _mm512_castps128_ps512(pair_scales), acc);
    };
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p + 2 <= full; p += 2) {
      acc0 = full_pair(p, acc0);
      acc1 = full_pair(p + 1, acc1);
    }
    if (p < full) acc0 = full_pair(p, acc0);
    if (row_bytes % 64 != 0) {
      acc1 = pair(
          full, _mm512_maskz_loadu_epi8(tail_bytes, row + 64 * full),
          _mm512_maskz_loadu_ps(tail_groups, ws + kGroupsPerPair * full), acc1);
    }
    y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }
}

}  // namespace

void MatMulRowAvx512(const float* x, const Matrix& w, int64_t row_begin,
                     int64_t row_end, float* y) {
  const int64_t cols = w.cols;
  const int64_t groups =
      w.group_size > 0 ? (cols + w.group_size - 1) / w.group_size : 0;
  switch (w.type) {
    case WeightType::kInt8: {
      const int64_t blocks = (cols + 31) / 32;
      thread_local std::vector<int16_t> q;
      thread_local std::vector<float> q_scale;
      q.resize(blocks * 32);
      q_scale.resize(blocks);
      QuantizeActivationsInt16Avx2(x, 1, cols, q.data(), q_scale.data());
      const auto* data = static_cast<const int8_t*>(w.data);
      const int64_t row_bytes = groups * w.group_size;
      if (w.group_size == 64) {
        Int8Rows<64>(data, row_bytes, w.scales, groups, q.data(),
                     q_scale.data(), blocks, row_begin, row_end, y);
      } else {
        Int8Rows<32>(data, row_bytes, w.scales, groups, q.data(),
                     q_scale.data(), blocks, row_begin, row_end, y);
      }
      break;
    }
    case WeightType::kInt4: {
      const int64_t row_bytes = groups * w.group_size / 2;
      const int64_t chunks = (row_bytes + 31) / 32;
      thread_local std::vector<Int8Chunk> xq;
      thread_local std::vector<Int8ChunkPair> pairs;
      xq.resize(chunks);
      pairs.resize((chunks + 1) / 2);
      QuantizeActivationsInt8Avx2(x, 1, cols, chunks, xq.data());
      PairChunks(xq.data(), chunks, pairs.data());
      const auto* data = static_cast<const uint8_t*>(w.data);
      if (w.group_size == 64) {
        Int4Rows<64>(data, row_bytes, w.scales, groups, pairs.data(), row_begin,
                     row_end, y);
      } else {
        Int4Rows<32>(data, row_bytes, w.scales, groups, pairs.data(), row_begin,
                     row_end, y);
      }
      break;
    }
    default:
      MatMulRowsAvx2(x, 1, w, row_begin, row_end, y);
      break;
  }
}

}  // namespace ringmoe::kernels::internal

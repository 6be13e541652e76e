// Scalar conversions between float32 and the 16-bit float formats weights
// are stored in.
#ifndef RINGMOE_KERNELS_CPU_NUMERIC_H_
#define RINGMOE_KERNELS_CPU_NUMERIC_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ringmoe::kernels {

// BF16 is the high half of an IEEE float32, so widening is exact.
inline float Bf16ToF32(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Round to nearest even; NaN stays NaN.
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// IEEE half precision to float32, exact for every input (subnormals too).
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal: normalise the mantissa.
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// An e2m1 nibble (kMxfp4's values) times two: an integer in [-12, 12].
inline int E2m1TimesTwo(uint8_t nibble) {
  static constexpr int kMagnitude[8] = {0, 1, 2, 3, 4, 6, 8, 12};
  return (nibble & 8) ? -kMagnitude[nibble & 7] : kMagnitude[nibble & 7];
}

// 2^(e - 127), an e8m0 scale (e = 255, NaN in the OCP format, is taken as
// 2^128 = inf; it does not occur in real checkpoints).
inline float E8m0ToF32(uint8_t e) { return std::ldexp(1.f, int{e} - 127); }

// float8 e4m3fn (see matrix.h) to float32, exact; 0x7f and 0xff are NaN.
inline float Fp8E4M3ToF32(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exponent = (v >> 3) & 0xfu;
  const uint32_t mantissa = v & 0x7u;
  uint32_t bits;
  if ((v & 0x7fu) == 0x7fu) {
    bits = sign | 0x7fc00000u;
  } else if (exponent != 0) {
    bits = sign | ((exponent + 120) << 23) | (mantissa << 20);
  } else {
    // Subnormal: mantissa * 2^-9, exact in float32.
    const float f = static_cast<float>(mantissa) * (1.f / 512.f);
    std::memcpy(&bits, &f, sizeof(bits));
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// float32 to IEEE half, round to nearest even, overflow to infinity.
uint16_t F32ToF16(float f);

// v clamped to [lo, hi] (integers; NaN becomes lo) and rounded to the
// nearest integer, halves away from zero, as std::lround rounds: the weight
// quantizers' levels (QuantizeMatrix; avx2::RoundToLevels computes the same
// lane for lane).
inline int RoundToLevel(float v, float lo, float hi) {
  v = std::isnan(v) ? lo : std::min(std::max(v, lo), hi);
  float t = std::trunc(v);
  if (std::abs(v - t) >= 0.5f) t += std::copysign(1.f, v);
  return static_cast<int>(t);
}

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_NUMERIC_H_

// Scalar conversions between float32 and the 16-bit float formats weights
// are stored in.
#ifndef RINGMOE_KERNELS_CPU_NUMERIC_H_
#define RINGMOE_KERNELS_CPU_NUMERIC_H_

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

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_NUMERIC_H_

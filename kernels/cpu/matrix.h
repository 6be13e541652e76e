// Weight storage formats and the Matrix view the CPU kernels read.
#ifndef RINGMOE_KERNELS_CPU_MATRIX_H_
#define RINGMOE_KERNELS_CPU_MATRIX_H_

#include <cstdint>

namespace ringmoe::kernels {

// Quantized types pad each row with zeros to whole groups of `group_size`
// (32 or 64) columns and carry one scale per group, an IEEE half (the
// rounding of which quantization absorbs, see QuantizeMatrix):
// kInt8: one value per byte, w = q * scale (q in [-127, 127]).
// kInt4: two values per byte (element 2i in the low nibble of byte i),
// w = (nibble - 8) * scale.
enum class WeightType : uint8_t { kF32, kBF16, kF16, kInt8, kInt4 };

// A row-major weight matrix [rows, cols] in PyTorch's [out, in] order.
// Quantized types carry their scales beside the data:
// [rows, ceil(cols / group_size)].
struct Matrix {
  const void* data = nullptr;
  WeightType type = WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint16_t* scales = nullptr;  // f16 bits
  int32_t group_size = 0;  // int8 and int4 only
};

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_MATRIX_H_

// Weight storage formats and the Matrix view the CPU kernels read.
#ifndef RINGMOE_KERNELS_CPU_MATRIX_H_
#define RINGMOE_KERNELS_CPU_MATRIX_H_

#include <cstdint>

namespace ringmoe::kernels {

// kInt8: one float scale per row, w = q * scale.
// kInt4: two values per byte (element 2i in the low nibble of byte i), each
// row padded with zeros to whole groups of `group_size` (32 or 64) columns;
// one float scale per group, w = (nibble - 8) * scale.
enum class WeightType : uint8_t { kF32, kBF16, kF16, kInt8, kInt4 };

// A row-major weight matrix [rows, cols] in PyTorch's [out, in] order.
// Quantized types carry their scales beside the data: [rows] for int8,
// [rows, ceil(cols / group_size)] for int4.
struct Matrix {
  const void* data = nullptr;
  WeightType type = WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const float* scales = nullptr;
  int32_t group_size = 0;  // int4 only
};

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_MATRIX_H_

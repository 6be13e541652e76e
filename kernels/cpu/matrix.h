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
// kFp8E4M3: one float8 e4m3fn per byte (sign, 4 exponent bits of bias 7, 3
// mantissa bits, subnormals, no infinities, 0x7f/0xff NaN), scaled per
// block of block_rows x block_cols weights as DeepSeek-V3 ships it: w[i, j] =
// fp8(q[i, j]) * block_scales[(i / block_rows) * ceil(cols / block_cols) +
// j / block_cols] (float32, the checkpoint's `weight_scale_inv`). Block
// sizes are powers of two, block_cols at least 8; edge blocks may be
// partial. A product kernel reads it directly; nothing converts it.
enum class WeightType : uint8_t { kF32, kBF16, kF16, kInt8, kInt4, kFp8E4M3 };

// A row-major weight matrix [rows, cols] in PyTorch's [out, in] order.
// int8 and int4 carry their scales beside the data:
// [rows, ceil(cols / group_size)]; fp8 its block scales wherever they lie.
struct Matrix {
  const void* data = nullptr;
  WeightType type = WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint16_t* scales = nullptr;  // f16 bits
  int32_t group_size = 0;            // int8 and int4 only
  // kFp8E4M3 only: [ceil(rows / block_rows), ceil(cols / block_cols)].
  const float* block_scales = nullptr;
  int32_t block_rows = 0;
  int32_t block_cols = 0;
};

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_MATRIX_H_

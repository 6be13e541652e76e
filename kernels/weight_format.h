// The formats weights are stored in, wherever they live (host memory, a
// GPU, a ring slot, a checkpoint file): what the bytes mean and how many
// there are. Both the CPU and the CUDA kernels read these formats; the
// engine's weights (engine/backend/weight.h) carry them.
#ifndef RINGMOE_KERNELS_WEIGHT_FORMAT_H_
#define RINGMOE_KERNELS_WEIGHT_FORMAT_H_

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
// kMxfp4: the OCP microscaling format as gpt-oss ships its experts: two
// e2m1 values per byte (element 2i in the low nibble of byte i; sign, 2
// exponent bits of bias 1, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6) and
// one e8m0 exponent byte E per 32 consecutive values of a row, w = e2m1 ·
// 2^(E - 127). Rows are padded to whole blocks of 32.
enum class WeightType : uint8_t {
  kF32,
  kBF16,
  kF16,
  kInt8,
  kInt4,
  kFp8E4M3,
  kMxfp4
};

// Values per kMxfp4 exponent.
inline constexpr int64_t kMxfp4Block = 32;

// "f32", "bf16", "f16", "int8", "int4", "fp8_e4m3" or "mxfp4".
const char* WeightTypeName(WeightType type);

// Bytes of one row's data, padding included.
int64_t RowBytes(WeightType type, int64_t cols, int32_t group_size);
// Bytes of the data of a [rows, cols] matrix and the number of its f16
// group scales (int8 and int4; 0 for the other types).
int64_t QuantizedDataBytes(WeightType type, int64_t rows, int64_t cols,
                           int32_t group_size);
int64_t QuantizedScaleCount(WeightType type, int64_t rows, int64_t cols,
                            int32_t group_size);
// Exponent bytes of a kMxfp4 [rows, cols] matrix (0 for every other type).
int64_t BlockExponentCount(WeightType type, int64_t rows, int64_t cols);
// Float32 block scales of a kFp8E4M3 [rows, cols] matrix in blocks of
// block_rows x block_cols (0 for every other type).
int64_t BlockScaleCount(WeightType type, int64_t rows, int64_t cols,
                        int32_t block_rows, int32_t block_cols);

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_WEIGHT_FORMAT_H_

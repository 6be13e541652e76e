#include "kernels/weight_format.h"

namespace ringmoe::kernels {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

const char* WeightTypeName(WeightType type) {
  switch (type) {
    case WeightType::kF32:
      return "f32";
    case WeightType::kBF16:
      return "bf16";
    case WeightType::kF16:
      return "f16";
    case WeightType::kInt8:
      return "int8";
    case WeightType::kInt4:
      return "int4";
    case WeightType::kFp8E4M3:
      return "fp8_e4m3";
    case WeightType::kMxfp4:
      return "mxfp4";
  }
  return "?";
}

int64_t RowBytes(WeightType type, int64_t cols, int32_t group_size) {
  switch (type) {
    case WeightType::kF32:
      return cols * 4;
    case WeightType::kBF16:
    case WeightType::kF16:
      return cols * 2;
    case WeightType::kInt8:
      return CeilDiv(cols, group_size) * group_size;
    case WeightType::kInt4:
      return CeilDiv(cols, group_size) * group_size / 2;
    case WeightType::kFp8E4M3:
      return cols;
    case WeightType::kMxfp4:
      return CeilDiv(cols, kMxfp4Block) * kMxfp4Block / 2;
  }
  return 0;
}

int64_t QuantizedDataBytes(WeightType type, int64_t rows, int64_t cols,
                           int32_t group_size) {
  return rows * RowBytes(type, cols, group_size);
}

int64_t QuantizedScaleCount(WeightType type, int64_t rows, int64_t cols,
                            int32_t group_size) {
  if (type == WeightType::kInt8 || type == WeightType::kInt4) {
    return rows * CeilDiv(cols, group_size);
  }
  return 0;
}

int64_t BlockExponentCount(WeightType type, int64_t rows, int64_t cols) {
  if (type != WeightType::kMxfp4) return 0;
  return rows * CeilDiv(cols, kMxfp4Block);
}

int64_t BlockScaleCount(WeightType type, int64_t rows, int64_t cols,
                        int32_t block_rows, int32_t block_cols) {
  if (type != WeightType::kFp8E4M3) return 0;
  return CeilDiv(rows, block_rows) * CeilDiv(cols, block_cols);
}

}  // namespace ringmoe::kernels

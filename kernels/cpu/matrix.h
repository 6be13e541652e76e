// The Matrix view of a weight (kernels/weight_format.h) the CPU kernels
// read.
#ifndef RINGMOE_KERNELS_CPU_MATRIX_H_
#define RINGMOE_KERNELS_CPU_MATRIX_H_

#include <cstdint>

#include "kernels/weight_format.h"

namespace ringmoe::kernels {

// A row-major weight matrix [rows, cols] in PyTorch's [out, in] order.
// int8 and int4 carry their scales beside the data:
// [rows, ceil(cols / group_size)]; fp8 its block scales and mxfp4 its
// exponents wherever they lie.
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
  // kMxfp4 only: [rows, ceil(cols / 32)] e8m0 exponents.
  const uint8_t* exponents = nullptr;
};

}  // namespace ringmoe::kernels

#endif  // RINGMOE_KERNELS_CPU_MATRIX_H_

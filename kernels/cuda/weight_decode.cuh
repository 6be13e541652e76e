// Device-side decoding of stored weights (kernels/weight_format.h) to
// float32: one value, or eight consecutive values of a row that share a
// scale (group, block and mxfp4 sizes are multiples of eight).
#ifndef RINGMOE_KERNELS_CUDA_WEIGHT_DECODE_CUH_
#define RINGMOE_KERNELS_CUDA_WEIGHT_DECODE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/ops.h"

namespace ringmoe::cuda {

using kernels::WeightType;

__device__ __forceinline__ float Bf16Bits(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ float F16Bits(uint16_t bits) {
  return __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ float Fp8E4m3Bits(uint8_t bits) {
  __nv_fp8_e4m3 v;
  v.__x = bits;
  return static_cast<float>(v);
}

// e2m1 codes 0..15: sign, two exponent bits of bias 1, one mantissa bit.
__device__ __forceinline__ float E2m1(uint32_t code) {
  // Arithmetic rather than a table: a table indexed at run time would live
  // in local memory.
  const uint32_t e = (code >> 1) & 3, m = code & 1;
  const float magnitude =
      e == 0 ? 0.5f * m : __int_as_float((e + 126) << 23) * (1.f + 0.5f * m);
  return (code & 8) ? -magnitude : magnitude;
}

// 2^(e - 127) for an e8m0 byte (255 is NaN).
__device__ __forceinline__ float E8m0(uint8_t e) {
  if (e == 255) return __int_as_float(0x7fc00000);
  if (e == 0) return __int_as_float(0x00400000);  // 2^-127, subnormal
  return __int_as_float(static_cast<int32_t>(e) << 23);
}

// The scale shared by the values of row r from column c on (int8, int4,
// fp8, mxfp4), 1 for the unscaled types.
__device__ __forceinline__ float ScaleAt(const DeviceWeight& w, int64_t r,
                                         int64_t c) {
  switch (w.type) {
    case WeightType::kInt8:
    case WeightType::kInt4: {
      const int64_t groups = (w.cols + w.group_size - 1) / w.group_size;
      return F16Bits(w.scales[r * groups + c / w.group_size]);
    }
    case WeightType::kFp8E4M3: {
      const int64_t blocks = (w.cols + w.block_cols - 1) / w.block_cols;
      return w.block_scales[(r / w.block_rows) * blocks + c / w.block_cols];
    }
    case WeightType::kMxfp4: {
      const int64_t blocks =
          (w.cols + kernels::kMxfp4Block - 1) / kernels::kMxfp4Block;
      return E8m0(w.exponents[r * blocks + c / kernels::kMxfp4Block]);
    }
    default:
      return 1.f;
  }
}

// w[r, c] as float32.
__device__ __forceinline__ float WeightAt(const DeviceWeight& w, int64_t r,
                                          int64_t c) {
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
  switch (w.type) {
    case WeightType::kF32:
      return reinterpret_cast<const float*>(row)[c];
    case WeightType::kBF16:
      return Bf16Bits(reinterpret_cast<const uint16_t*>(row)[c]);
    case WeightType::kF16:
      return F16Bits(reinterpret_cast<const uint16_t*>(row)[c]);
    case WeightType::kInt8:
      return static_cast<float>(static_cast<int8_t>(row[c])) * ScaleAt(w, r, c);
    case WeightType::kInt4: {
      const uint32_t nibble = (row[c / 2] >> ((c & 1) * 4)) & 15;
      return static_cast<float>(static_cast<int32_t>(nibble) - 8) *
             ScaleAt(w, r, c);
    }
    case WeightType::kFp8E4M3:
      return Fp8E4m3Bits(row[c]) * ScaleAt(w, r, c);
    case WeightType::kMxfp4:
      return E2m1((row[c / 2] >> ((c & 1) * 4)) & 15) * ScaleAt(w, r, c);
  }
  return 0.f;
}

// launch(std::integral_constant<WeightType, type>{}): a kernel launcher
// templated on the stored type, called with `type` as a constant;
// cudaErrorInvalidValue for a type it does not know.
template <typename Launch>
cudaError_t WithWeightType(WeightType type, Launch&& launch) {
  switch (type) {
    case WeightType::kF32:
      return launch(std::integral_constant<WeightType, WeightType::kF32>{});
    case WeightType::kBF16:
      return launch(std::integral_constant<WeightType, WeightType::kBF16>{});
    case WeightType::kF16:
      return launch(std::integral_constant<WeightType, WeightType::kF16>{});
    case WeightType::kInt8:
      return launch(std::integral_constant<WeightType, WeightType::kInt8>{});
    case WeightType::kInt4:
      return launch(std::integral_constant<WeightType, WeightType::kInt4>{});
    case WeightType::kFp8E4M3:
      return launch(std::integral_constant<WeightType, WeightType::kFp8E4M3>{});
    case WeightType::kMxfp4:
      return launch(std::integral_constant<WeightType, WeightType::kMxfp4>{});
  }
  return cudaErrorInvalidValue;
}

// Whether Decode8 may read row r's columns [c, c + 8) for every c that is
// a multiple of eight below cols: rows start on 16-byte boundaries (for
// the widest load) and hold whole groups of eight.
__host__ __device__ inline bool CanDecode8(const DeviceWeight& w) {
  return w.cols % 8 == 0 && w.row_bytes % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

// v[0..8) = w[r, c..c+8) for c a multiple of eight (CanDecode8(w)).
template <WeightType kType>
__device__ __forceinline__ void Decode8(const DeviceWeight& w, int64_t r,
                                        int64_t c, float v[8]) {
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + r * w.row_bytes;
  if constexpr (kType == WeightType::kF32) {
    const float4* p = reinterpret_cast<const float4*>(row + c * 4);
    const float4 a = __ldg(p), b = __ldg(p + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else if constexpr (kType == WeightType::kBF16 ||
                       kType == WeightType::kF16) {
    const uint4 q = __ldg(reinterpret_cast<const uint4*>(row + c * 2));
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t lo = words[i] & 0xffff, hi = words[i] >> 16;
      if constexpr (kType == WeightType::kBF16) {
        v[2 * i] = Bf16Bits(lo), v[2 * i + 1] = Bf16Bits(hi);
      } else {
        v[2 * i] = F16Bits(lo), v[2 * i + 1] = F16Bits(hi);
      }
    }
  } else if constexpr (kType == WeightType::kInt8 ||
                       kType == WeightType::kFp8E4M3) {
    const uint2 q = __ldg(reinterpret_cast<const uint2*>(row + c));
    const float s = ScaleAt(w, r, c);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint8_t byte = ((i < 4 ? q.x : q.y) >> ((i & 3) * 8)) & 0xff;
      if constexpr (kType == WeightType::kInt8) {
        v[i] = static_cast<float>(static_cast<int8_t>(byte)) * s;
      } else {
        v[i] = Fp8E4m3Bits(byte) * s;
      }
    }
  } else {  // kInt4, kMxfp4: eight nibbles, low first
    const uint32_t q = __ldg(reinterpret_cast<const uint32_t*>(row + c / 2));
    const float s = ScaleAt(w, r, c);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t nibble = (q >> (4 * i)) & 15;
      if constexpr (kType == WeightType::kInt4) {
        v[i] = static_cast<float>(static_cast<int32_t>(nibble) - 8) * s;
      } else {
        v[i] = E2m1(nibble) * s;
      }
    }
  }
}

}  // namespace ringmoe::cuda

#endif  // RINGMOE_KERNELS_CUDA_WEIGHT_DECODE_CUH_

// Element types of safetensors tensors.
#ifndef RINGMOE_ENGINE_CHECKPOINT_DTYPE_H_
#define RINGMOE_ENGINE_CHECKPOINT_DTYPE_H_

#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringmoe::checkpoint {

// Every byte-addressable dtype the safetensors format defines. Sub-byte types
// (F4, F6_*) are absent: their tensors cannot be viewed as whole elements.
enum class DType {
  kBool,
  kU8,
  kI8,
  kF8E4M3,  // "F8_E4M3" (DeepSeek-V3 weights)
  kF8E5M2,  // "F8_E5M2"
  kU16,
  kI16,
  kF16,
  kBF16,
  kU32,
  kI32,
  kF32,
  kU64,
  kI64,
  kF64,
};

// Parses a safetensors dtype name ("BF16", "F32", "I32", ...); names are
// case-sensitive, as in the format.
absl::StatusOr<DType> ParseDType(absl::string_view name);

// The safetensors name of `dtype`, e.g. "BF16".
absl::string_view DTypeName(DType dtype);

// Bytes per element.
size_t DTypeSize(DType dtype);

}  // namespace ringmoe::checkpoint

#endif  // RINGMOE_ENGINE_CHECKPOINT_DTYPE_H_

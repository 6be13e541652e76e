#include "engine/checkpoint/dtype.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace ringmoe::checkpoint {
namespace {

struct DTypeInfo {
  DType dtype;
  absl::string_view name;
  size_t size;
};

// One table drives parsing, printing and sizes so they cannot disagree.
constexpr DTypeInfo kDTypes[] = {
    {DType::kBool, "BOOL", 1},      {DType::kU8, "U8", 1},
    {DType::kI8, "I8", 1},          {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1}, {DType::kU16, "U16", 2},
    {DType::kI16, "I16", 2},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},      {DType::kU32, "U32", 4},
    {DType::kI32, "I32", 4},        {DType::kF32, "F32", 4},
    {DType::kU64, "U64", 8},        {DType::kI64, "I64", 8},
    {DType::kF64, "F64", 8},
};

const DTypeInfo& Info(DType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  // Only reachable through a cast of an out-of-range integer.
  static constexpr DTypeInfo kInvalid = {DType::kU8, "INVALID", 0};
  return kInvalid;
}

}  // namespace

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown safetensors dtype \"", name, "\""));
}

absl::string_view DTypeName(DType dtype) { return Info(dtype).name; }

size_t DTypeSize(DType dtype) { return Info(dtype).size; }

}  // namespace ringmoe::checkpoint

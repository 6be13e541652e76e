#include "engine/backend/weight.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ringmoe::backend {

int64_t DataBytes(const Weight& w) {
  return kernels::QuantizedDataBytes(w.type, w.rows, w.cols, w.group_size);
}

int64_t GroupScaleBytes(const Weight& w) {
  return kernels::QuantizedScaleCount(w.type, w.rows, w.cols, w.group_size) *
         static_cast<int64_t>(sizeof(uint16_t));
}

int64_t BlockScaleBytes(const Weight& w) {
  return kernels::BlockScaleCount(w.type, w.rows, w.cols, w.block_rows,
                                  w.block_cols) *
         static_cast<int64_t>(sizeof(float));
}

int64_t ExponentBytes(const Weight& w) {
  return kernels::BlockExponentCount(w.type, w.rows, w.cols);
}

int64_t StoredBytes(const Weight& w) {
  return DataBytes(w) + GroupScaleBytes(w) + BlockScaleBytes(w) +
         ExponentBytes(w);
}

namespace {

absl::Status FromHost(MemorySpace memory, absl::string_view target) {
  if (memory == MemorySpace::kHost) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(target, ": uploads come from host memory"));
}

// One part through `part`; null for a part without bytes.
absl::StatusOr<const void*> Upload(const void* host, int64_t bytes,
                                   const char* what, absl::string_view target,
                                   UploadPart part) {
  if (bytes == 0) return nullptr;
  if (host == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(target, ": ", what, " of ", bytes, " bytes has no data"));
  }
  return part(host, bytes, what);
}

}  // namespace

absl::StatusOr<Weight> UploadWeight(const Weight& host,
                                    absl::string_view target, UploadPart part) {
  RETURN_IF_ERROR(FromHost(host.memory, target));
  Weight device = host;
  device.memory = MemorySpace::kDevice;
  ASSIGN_OR_RETURN(device.data,
                   Upload(host.data, DataBytes(host), "data", target, part));
  ASSIGN_OR_RETURN(
      const void* scales,
      Upload(host.scales, GroupScaleBytes(host), "group scales", target, part));
  device.scales = static_cast<const uint16_t*>(scales);
  ASSIGN_OR_RETURN(const void* block_scales,
                   Upload(host.block_scales, BlockScaleBytes(host),
                          "block scales", target, part));
  device.block_scales = static_cast<const float*>(block_scales);
  ASSIGN_OR_RETURN(
      const void* exponents,
      Upload(host.exponents, ExponentBytes(host), "exponents", target, part));
  device.exponents = static_cast<const uint8_t*>(exponents);
  return device;
}

absl::StatusOr<Vector> UploadVector(const Vector& host,
                                    absl::string_view target, UploadPart part) {
  RETURN_IF_ERROR(FromHost(host.memory, target));
  ASSIGN_OR_RETURN(
      const void* data,
      Upload(host.data, host.size * sizeof(float), "vector", target, part));
  return Vector{static_cast<const float*>(data), host.size,
                MemorySpace::kDevice};
}

}  // namespace ringmoe::backend

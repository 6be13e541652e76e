#include "engine/backend/stand_in_device.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "memory_ring/copy_engine_tier.h"

namespace ringmoe::backend {
namespace {

// The pool outlives the CpuBackend base that points at it: made first.
std::unique_ptr<ThreadPool> MakePool(int threads) {
  return threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
}

}  // namespace

StandInDevice::StandInDevice(const StandInOptions& options)
    : CpuBackend(nullptr),
      own_pool_(MakePool(options.threads)),
      copy_bytes_per_second_(options.copy_bytes_per_second),
      budget_("standin", options.memory_budget) {
  set_pool(own_pool_.get());
}

absl::StatusOr<const void*> StandInDevice::Copy(const void* host, int64_t bytes,
                                                const char* what) {
  if (bytes == 0) return nullptr;
  if (host == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": ", what, " of ", bytes, " bytes has no data"));
  }
  RETURN_IF_ERROR(budget_.Take(bytes, what));
  uploads_.push_back(std::make_unique<uint8_t[]>(bytes));
  std::memcpy(uploads_.back().get(), host, bytes);
  return uploads_.back().get();
}

absl::StatusOr<Weight> StandInDevice::Upload(const Weight& host) {
  if (host.memory != MemorySpace::kHost) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": uploads come from host memory"));
  }
  Weight device = host;
  device.memory = MemorySpace::kDevice;
  ASSIGN_OR_RETURN(device.data, Copy(host.data, DataBytes(host), "data"));
  ASSIGN_OR_RETURN(const void* scales,
                   Copy(host.scales, GroupScaleBytes(host), "group scales"));
  device.scales = static_cast<const uint16_t*>(scales);
  ASSIGN_OR_RETURN(
      const void* block_scales,
      Copy(host.block_scales, BlockScaleBytes(host), "block scales"));
  device.block_scales = static_cast<const float*>(block_scales);
  ASSIGN_OR_RETURN(const void* exponents,
                   Copy(host.exponents, ExponentBytes(host), "exponents"));
  device.exponents = static_cast<const uint8_t*>(exponents);
  return device;
}

absl::StatusOr<Vector> StandInDevice::Upload(const Vector& host) {
  if (host.memory != MemorySpace::kHost) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), ": uploads come from host memory"));
  }
  ASSIGN_OR_RETURN(const void* data,
                   Copy(host.data, host.size * sizeof(float), "vector"));
  return Vector{static_cast<const float*>(data), host.size,
                MemorySpace::kDevice};
}

absl::StatusOr<std::unique_ptr<memory_ring::TierBuffer>>
StandInDevice::AllocateStreamingSource(size_t bytes) {
  return memory_ring::NewHostBuffer(bytes);
}

absl::StatusOr<std::unique_ptr<memory_ring::Tier>>
StandInDevice::CreateStreamingTier(
    std::vector<memory_ring::TierBuffer*> sources) {
  return memory_ring::WithBudget(
      memory_ring::CreateCopyEngineTier(std::move(sources),
                                        copy_bytes_per_second_),
      &budget_);
}

}  // namespace ringmoe::backend

#include "engine/backend/stand_in_device.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "memory_ring/copy_engine_tier.h"
#include "memory_ring/host_buffer.h"

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
  RETURN_IF_ERROR(budget_.Take(bytes, what));
  uploads_.push_back(std::make_unique<uint8_t[]>(bytes));
  std::memcpy(uploads_.back().get(), host, bytes);
  return uploads_.back().get();
}

absl::StatusOr<Weight> StandInDevice::Upload(const Weight& host) {
  return UploadWeight(host, name(),
                      [this](const void* h, int64_t bytes, const char* what) {
                        return Copy(h, bytes, what);
                      });
}

absl::StatusOr<Vector> StandInDevice::Upload(const Vector& host) {
  return UploadVector(host, name(),
                      [this](const void* h, int64_t bytes, const char* what) {
                        return Copy(h, bytes, what);
                      });
}

absl::StatusOr<std::unique_ptr<memory_ring::TierBuffer>>
StandInDevice::AllocateStreamingSource(size_t bytes) {
  std::unique_ptr<memory_ring::TierBuffer> buffer =
      memory_ring::NewHostBuffer(bytes);
  if (buffer == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        name(), ": cannot allocate ", bytes, " bytes of streaming source"));
  }
  return buffer;
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

// StandInDevice: a CPU-backed stand-in for a GPU, so that the device paths
// above the backend seam (uploads within a budget, weights apart from the
// host's, streaming over "PCIe" through the ring with its fences, hybrid
// expert placement) run in the test suite on machines without one. It
// computes with the CPU kernels on a thread pool of its own, as a GPU has
// its own cores beside the host's, so its results are bitwise the CPU
// backend's; its weights live in memory of its own drawn from a budget;
// weights stream in through a copy engine (memory_ring/copy_engine_tier.h)
// at an optional bandwidth.
#ifndef RINGMOE_ENGINE_BACKEND_STAND_IN_DEVICE_H_
#define RINGMOE_ENGINE_BACKEND_STAND_IN_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "engine/backend/cpu_backend.h"
#include "memory_ring/memory_budget.h"

namespace ringmoe::backend {

struct StandInOptions {
  // Bytes of weights (uploads, ring slots, cache) it holds; 0: no limit.
  uint64_t memory_budget = 0;
  // Host-to-device copies no faster than this; 0: as fast as memcpy.
  double copy_bytes_per_second = 0;
  int threads = 1;  // its compute threads
};

class StandInDevice : public CpuBackend {
 public:
  explicit StandInDevice(const StandInOptions& options);

  std::string name() const override { return "standin"; }
  MemorySpace weight_memory() const override { return MemorySpace::kDevice; }

  absl::StatusOr<Weight> Upload(const Weight& host) override;
  absl::StatusOr<Vector> Upload(const Vector& host) override;
  absl::StatusOr<std::unique_ptr<memory_ring::TierBuffer>>
  AllocateStreamingSource(size_t bytes) override;
  absl::StatusOr<std::unique_ptr<memory_ring::Tier>> CreateStreamingTier(
      std::vector<memory_ring::TierBuffer*> sources) override;

  uint64_t weight_memory_used() const override { return budget_.used(); }
  const memory_ring::MemoryBudget& memory() const { return budget_; }

 private:
  // A copy of `bytes` (> 0) host bytes in the device's memory.
  absl::StatusOr<const void*> Copy(const void* host, int64_t bytes,
                                   const char* what);

  std::unique_ptr<ThreadPool> own_pool_;
  const double copy_bytes_per_second_;
  memory_ring::MemoryBudget budget_;
  std::vector<std::unique_ptr<uint8_t[]>> uploads_;
};

}  // namespace ringmoe::backend

#endif  // RINGMOE_ENGINE_BACKEND_STAND_IN_DEVICE_H_

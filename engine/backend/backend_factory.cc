#include "engine/backend/backend_factory.h"

#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/backend/cpu_backend.h"
#include "engine/backend/stand_in_device.h"
#ifdef RINGMOE_CUDA
#include "engine/backend/cuda_backend.h"
#include "engine/parallel/nccl_communicator.h"
#endif

namespace ringmoe::backend {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    absl::string_view device, ThreadPool* pool, int64_t device_weight_budget,
    kernels::ActivationPrecision cpu_precision) {
  if (device == "cpu") return std::make_unique<CpuBackend>(pool, cpu_precision);
  if (device == "standin") {
    StandInOptions options;
    options.memory_budget = static_cast<uint64_t>(device_weight_budget);
    // As many threads as the host's: kernels that split a product by
    // thread count then sum as the CPU backend does, bit for bit.
    options.threads = pool != nullptr ? pool->num_threads() : 1;
    return std::make_unique<StandInDevice>(options);
  }
  int index = -1;
  if (!absl::StartsWith(device, "cuda:") ||
      !absl::SimpleAtoi(device.substr(5), &index) || index < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device \"", device, "\": expected cpu, cuda:N or standin"));
  }
#ifdef RINGMOE_CUDA
  return CudaBackend::Create(index, device_weight_budget);
#else
  (void)device_weight_budget;
  return absl::UnimplementedError(
      absl::StrCat(device,
                   ": this build has no CUDA support (built with --config=cpu "
                   "or without a CUDA toolkit)"));
#endif
}

absl::StatusOr<RowTransport> RowTransportFor(Backend& backend,
                                             parallel::Communicator* job) {
  RowTransport transport;
  if (backend.weight_memory() == MemorySpace::kHost ||
      dynamic_cast<StandInDevice*>(&backend) != nullptr) {
    transport.communicator = job;
    return transport;
  }
#ifdef RINGMOE_CUDA
  if (auto* cuda = dynamic_cast<CudaBackend*>(&backend); cuda != nullptr) {
    ASSIGN_OR_RETURN(const bool own_devices,
                     parallel::NcclCommunicator::EachRankHasItsOwnDevice(
                         *job, cuda->device()));
    if (!own_devices) {
      if (job->rank() == 0) {
        std::fprintf(stderr,
                     "ringmoe: ranks share a GPU, which NCCL refuses: expert "
                     "rows are staged through host memory\n");
      }
      return transport;
    }
    ASSIGN_OR_RETURN(transport.owned,
                     parallel::NcclCommunicator::Create(*job, cuda->device(),
                                                        job->timeout()));
    transport.communicator = transport.owned.get();
  }
#endif
  return transport;
}

}  // namespace ringmoe::backend

// The backend a device name selects: the CPU, a CUDA device in builds that
// include CUDA, or the CPU-backed stand-in for one (tests).
#ifndef RINGMOE_ENGINE_BACKEND_BACKEND_FACTORY_H_
#define RINGMOE_ENGINE_BACKEND_BACKEND_FACTORY_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/thread_pool.h"
#include "engine/backend/backend.h"
#include "engine/parallel/communicator.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::backend {

// "cpu": the CPU backend on `pool` (must outlive it), its products of bf16
// weights in `cpu_precision` (kernels::ActivationPrecision); "cuda:N": CUDA
// device N, its uploaded weights within `device_weight_budget` bytes (0: no
// limit); "standin": a StandInDevice of that budget with threads of its own,
// as many as `pool` has (stand_in_device.h).
// INVALID_ARGUMENT for any other name, UNIMPLEMENTED for cuda:N in
// a build without CUDA, and the device's error when it cannot be used.
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    absl::string_view device, ThreadPool* pool,
    int64_t device_weight_budget = 0,
    kernels::ActivationPrecision cpu_precision =
        kernels::ActivationPrecision::kF32);

// How activations in a backend's memory travel between the ranks of an
// expert-parallel job.
struct RowTransport {
  // A communicator of its own over the backend's memory, where one was
  // made (NCCL over a CUDA device's).
  std::unique_ptr<parallel::Communicator> owned;
  // What moves them: `owned`; the job's communicator where it reaches the
  // backend's memory (the CPU backend's and the stand-in device's are the
  // host's); or null where nothing does (ranks sharing a GPU, which NCCL
  // refuses): rows are then staged through host memory.
  parallel::Communicator* communicator = nullptr;
};

// The transport for `backend`'s rows between the ranks of `job` (a host
// communicator, which must outlive what is returned). A collective over
// `job` for a CUDA backend; fails as NcclCommunicator::Create does (the
// caller must then end the job).
absl::StatusOr<RowTransport> RowTransportFor(Backend& backend,
                                             parallel::Communicator* job);

}  // namespace ringmoe::backend

#endif  // RINGMOE_ENGINE_BACKEND_BACKEND_FACTORY_H_

#include "engine/parallel/nccl_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/parallel/collective_args.h"

namespace ringmoe::parallel {
namespace {

absl::Status CudaError(absl::string_view where, cudaError_t error) {
  return absl::InternalError(
      absl::StrCat(where, ": CUDA: ", cudaGetErrorString(error)));
}

absl::Status NcclError(absl::string_view where, ncclResult_t result,
                       ncclComm_t comm) {
  const std::string detail = absl::StrCat(
      where, ": NCCL: ", ncclGetErrorString(result), " (",
      comm ? ncclGetLastError(comm) : ncclGetLastError(nullptr), ")");
  switch (result) {
    case ncclRemoteError:
    case ncclSystemError:
      return absl::UnavailableError(detail);
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(detail);
    default:
      return absl::InternalError(detail);
  }
}

// Gives the CPU away at once, and sleeps once the wait is clearly not short.
void Pause(int polls) {
  if (polls < 2000) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    Communicator& bootstrap, int device, absl::Duration timeout) {
  std::unique_ptr<NcclCommunicator> comm(
      new NcclCommunicator(bootstrap, device, timeout));
  const std::string where = comm->Where("NcclCommunicator::Create");
  cudaError_t error = cudaSetDevice(device);
  if (error != cudaSuccess) return CudaError(where, error);
  ncclUniqueId id = {};
  if (comm->rank_ == 0) {
    const ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) return NcclError(where, result, nullptr);
  }
  RETURN_IF_ERROR(
      bootstrap.Broadcast(0, AsWritableBytes(absl::MakeSpan(&id, 1))));
  error = cudaStreamCreateWithFlags(&comm->stream_, cudaStreamNonBlocking);
  if (error != cudaSuccess) return CudaError(where, error);
  error = cudaMalloc(reinterpret_cast<void**>(&comm->barrier_word_),
                     sizeof(int32_t));
  if (error != cudaSuccess) return CudaError(where, error);
  error = cudaMemset(comm->barrier_word_, 0, sizeof(int32_t));
  if (error != cudaSuccess) return CudaError(where, error);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t result = ncclCommInitRankConfig(&comm->comm_, comm->size_,
                                                     id, comm->rank_, &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    return comm->Fail(NcclError(where, result, comm->comm_));
  }
  RETURN_IF_ERROR(comm->WaitUntilIdle("NcclCommunicator::Create"));
  return comm;
}

absl::StatusOr<bool> NcclCommunicator::EachRankHasItsOwnDevice(
    Communicator& bootstrap, int device) {
  // Bus ids are "dddd:bb:dd.f" and shorter than this; unused bytes are 0.
  constexpr int kIdBytes = 32;
  std::vector<char> ids(static_cast<size_t>(bootstrap.size()) * kIdBytes, 0);
  std::vector<char> mine(kIdBytes, 0);
  if (cudaError_t error = cudaDeviceGetPCIBusId(mine.data(), kIdBytes, device);
      error != cudaSuccess) {
    return CudaError(absl::StrCat("rank ", bootstrap.rank(),
                                  ": the PCI bus id of cuda:", device),
                     error);
  }
  RETURN_IF_ERROR(bootstrap.AllGather(AsBytes(mine), AsWritableBytes(ids)));
  std::vector<std::string> seen;
  for (int p = 0; p < bootstrap.size(); ++p) {
    const char* id = ids.data() + static_cast<size_t>(p) * kIdBytes;
    seen.emplace_back(id, strnlen(id, kIdBytes));
  }
  std::sort(seen.begin(), seen.end());
  return std::adjacent_find(seen.begin(), seen.end()) == seen.end();
}

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, int device,
                                   absl::Duration timeout)
    : bootstrap_(bootstrap),
      device_(device),
      rank_(bootstrap.rank()),
      size_(bootstrap.size()),
      timeout_(timeout) {}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(device_);
  if (comm_ != nullptr && !aborted_) {
    // Finalising flushes what peers may still read; if that does not end
    // in time, aborting frees the communicator regardless.
    const ncclResult_t result = ncclCommFinalize(comm_);
    if ((result == ncclSuccess || result == ncclInProgress) &&
        WaitUntilIdle("NcclCommunicator::~NcclCommunicator").ok()) {
      ncclCommDestroy(comm_);
    } else if (!aborted_) {
      ncclCommAbort(comm_);
    }
  }
  if (barrier_word_ != nullptr) cudaFree(barrier_word_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string NcclCommunicator::Where(absl::string_view collective) const {
  return absl::StrCat(collective, " on rank ", rank_, " of ", size_,
                      " (cuda:", device_, ")");
}

absl::Status NcclCommunicator::Refuse(absl::Status status) {
  if (failure_.ok()) failure_ = status;
  return status;
}

absl::Status NcclCommunicator::Fail(absl::Status status) {
  if (status.ok()) return status;
  if (comm_ != nullptr && !aborted_) {
    ncclCommAbort(comm_);
    aborted_ = true;
  }
  return Refuse(status);
}

absl::Status NcclCommunicator::Begin(absl::string_view collective) {
  if (!failure_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Where(collective), ": the communicator failed earlier (",
                     failure_.ToString(), "); the job must be aborted"));
  }
  const cudaError_t error = cudaSetDevice(device_);
  return error == cudaSuccess ? absl::OkStatus()
                              : Fail(CudaError(Where(collective), error));
}

absl::Status NcclCommunicator::Enqueued(absl::string_view collective,
                                        ncclResult_t result) {
  if (result == ncclSuccess || result == ncclInProgress) {
    return absl::OkStatus();
  }
  return Fail(NcclError(Where(collective), result, comm_));
}

absl::Status NcclCommunicator::WaitUntilIdle(absl::string_view what) {
  const absl::Time deadline = absl::Now() + timeout_;
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) {
      return Fail(NcclError(Where(what), result, comm_));
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) {
      return Fail(NcclError(Where(what), state, comm_));
    }
    if (absl::Now() >= deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          Where(what), ": not complete after ", absl::FormatDuration(timeout_),
          ": some rank did not join")));
    }
    Pause(polls);
  }
}

absl::Status NcclCommunicator::Wait(absl::string_view collective) {
  const absl::Time deadline = absl::Now() + timeout_;
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
    if (result != ncclSuccess) {
      return Fail(NcclError(Where(collective), result, comm_));
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      return Fail(NcclError(Where(collective), state, comm_));
    }
    // While the group is still being enqueued (ncclInProgress) the stream
    // may look idle.
    if (state == ncclSuccess) {
      const cudaError_t error = cudaStreamQuery(stream_);
      if (error == cudaSuccess) return absl::OkStatus();
      if (error != cudaErrorNotReady) {
        return Fail(CudaError(Where(collective), error));
      }
    }
    if (absl::Now() >= deadline) {
      return Fail(absl::DeadlineExceededError(absl::StrCat(
          Where(collective), ": not complete after ",
          absl::FormatDuration(timeout_), ": some rank did not join")));
    }
    Pause(polls);
  }
}

absl::Status NcclCommunicator::AllToAll(absl::Span<const uint8_t> send,
                                        absl::Span<uint8_t> recv) {
  RETURN_IF_ERROR(Begin("AllToAll"));
  if (absl::Status s = CheckAllToAll(size_, send, recv); !s.ok()) {
    return Refuse(s);
  }
  const std::vector<uint64_t> counts(size_, send.size() / size_);
  return Exchange("AllToAll", send, counts, BlockOffsets(counts), recv, counts);
}

absl::Status NcclCommunicator::AllToAllV(
    absl::Span<const uint8_t> send, absl::Span<const uint64_t> send_counts,
    absl::Span<uint8_t> recv, absl::Span<const uint64_t> recv_counts) {
  RETURN_IF_ERROR(Begin("AllToAllV"));
  absl::Status args =
      CheckAllToAllV(size_, rank_, send, send_counts, recv, recv_counts);
  if (!args.ok()) return Refuse(args);
  return Exchange("AllToAllV", send, send_counts, BlockOffsets(send_counts),
                  recv, recv_counts);
}

absl::Status NcclCommunicator::Exchange(
    absl::string_view collective, absl::Span<const uint8_t> send,
    absl::Span<const uint64_t> send_counts,
    absl::Span<const uint64_t> send_offsets, absl::Span<uint8_t> recv,
    absl::Span<const uint64_t> recv_counts) {
  const std::vector<uint64_t> recv_offsets = BlockOffsets(recv_counts);
  if (send_counts[rank_] > 0) {
    const cudaError_t error = cudaMemcpyAsync(
        recv.data() + recv_offsets[rank_], send.data() + send_offsets[rank_],
        send_counts[rank_], cudaMemcpyDeviceToDevice, stream_);
    if (error != cudaSuccess) return Fail(CudaError(Where(collective), error));
  }
  // One group: NCCL schedules the sends and receives together, so no pair
  // of ranks waits on the other's order.
  RETURN_IF_ERROR(Enqueued(collective, ncclGroupStart()));
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (send_counts[p] > 0) {
      RETURN_IF_ERROR(Enqueued(
          collective, ncclSend(send.data() + send_offsets[p], send_counts[p],
                               ncclUint8, p, comm_, stream_)));
    }
    if (recv_counts[p] > 0) {
      RETURN_IF_ERROR(Enqueued(
          collective, ncclRecv(recv.data() + recv_offsets[p], recv_counts[p],
                               ncclUint8, p, comm_, stream_)));
    }
  }
  RETURN_IF_ERROR(Enqueued(collective, ncclGroupEnd()));
  return Wait(collective);
}

absl::Status NcclCommunicator::Broadcast(int root, absl::Span<uint8_t> buffer) {
  RETURN_IF_ERROR(Begin("Broadcast"));
  if (absl::Status s = CheckBroadcast(size_, root); !s.ok()) return Refuse(s);
  RETURN_IF_ERROR(Enqueued(
      "Broadcast", ncclBroadcast(buffer.data(), buffer.data(), buffer.size(),
                                 ncclUint8, root, comm_, stream_)));
  return Wait(absl::StrCat("Broadcast from rank ", root));
}

absl::Status NcclCommunicator::AllGather(absl::Span<const uint8_t> send,
                                         absl::Span<uint8_t> recv) {
  RETURN_IF_ERROR(Begin("AllGather"));
  if (absl::Status s = CheckAllGather(size_, send, recv); !s.ok()) {
    return Refuse(s);
  }
  RETURN_IF_ERROR(
      Enqueued("AllGather", ncclAllGather(send.data(), recv.data(), send.size(),
                                          ncclUint8, comm_, stream_)));
  return Wait("AllGather");
}

absl::Status NcclCommunicator::AllGatherV(
    absl::Span<const uint8_t> send, absl::Span<uint8_t> recv,
    absl::Span<const uint64_t> recv_counts) {
  RETURN_IF_ERROR(Begin("AllGatherV"));
  absl::Status args = CheckAllGatherV(size_, rank_, send, recv, recv_counts);
  if (!args.ok()) return Refuse(args);
  // NCCL has no ragged all-gather: the same bytes sent to every peer in
  // one group.
  const std::vector<uint64_t> send_counts(size_, send.size());
  const std::vector<uint64_t> send_offsets(size_, 0);
  return Exchange("AllGatherV", send, send_counts, send_offsets, recv,
                  recv_counts);
}

absl::Status NcclCommunicator::Barrier() {
  RETURN_IF_ERROR(Begin("Barrier"));
  RETURN_IF_ERROR(
      Enqueued("Barrier", ncclAllReduce(barrier_word_, barrier_word_, 1,
                                        ncclInt32, ncclMax, comm_, stream_)));
  return Wait("Barrier");
}

void NcclCommunicator::Abort(const absl::Status& status) {
  if (comm_ != nullptr && !aborted_) {
    ncclCommAbort(comm_);
    aborted_ = true;
  }
  bootstrap_.Abort(status);
  // Not reached: GCC does not apply [[noreturn]] to a virtual call.
  std::_Exit(1);
}

}  // namespace ringmoe::parallel

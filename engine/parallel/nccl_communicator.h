// NcclCommunicator: one rank per GPU, collectives on device memory through
// NCCL. The job's ranks and their order are those of a host communicator
// (MpiCommunicator under mpirun, SingleRankCommunicator alone), which
// carries rank 0's NCCL unique id to every rank.
//
// Every collective is enqueued on stream() and the call returns once it has
// completed there; buffers must be ready when the call is made (work that
// writes them is complete, or ordered before it on stream()).
//
// Timeouts: the communicator is non-blocking (ncclConfig_t::blocking = 0),
// so no NCCL call blocks the host; a collective is polled with
// cudaStreamQuery and ncclCommGetAsyncError until it completes, NCCL
// reports an error (UNAVAILABLE for a peer's or the network's failure), or
// timeout() passes (DEADLINE_EXCEEDED; NCCL does not say which peer is
// missing). On either failure the communicator is aborted
// (ncclCommAbort), so no kernel of this rank keeps waiting on the GPU, and
// the caller must end the job with Abort().
#ifndef RINGMOE_ENGINE_PARALLEL_NCCL_COMMUNICATOR_H_
#define RINGMOE_ENGINE_PARALLEL_NCCL_COMMUNICATOR_H_

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/parallel/communicator.h"

namespace ringmoe::parallel {

class NcclCommunicator : public Communicator {
 public:
  // The rank of `bootstrap` on GPU `device` (a CUDA device index of this
  // process). A collective: every rank of `bootstrap` calls it, and each
  // step, NCCL's initialisation included, is bounded by `timeout`.
  // `bootstrap` must outlive the communicator (Abort ends the job through
  // it). On failure the caller must end the job (bootstrap.Abort).
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      Communicator& bootstrap, int device, absl::Duration timeout);

  ~NcclCommunicator() override;

  // Whether no two ranks of `bootstrap`'s job use the same GPU (by PCI bus
  // id), as NCCL requires of a communicator's ranks: this rank's is GPU
  // `device`. A collective over `bootstrap`.
  static absl::StatusOr<bool> EachRankHasItsOwnDevice(Communicator& bootstrap,
                                                      int device);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Duration timeout() const override { return timeout_; }

  // The GPU and the stream the collectives run on.
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  absl::Status AllToAll(absl::Span<const uint8_t> send,
                        absl::Span<uint8_t> recv) override;
  absl::Status AllToAllV(absl::Span<const uint8_t> send,
                         absl::Span<const uint64_t> send_counts,
                         absl::Span<uint8_t> recv,
                         absl::Span<const uint64_t> recv_counts) override;
  absl::Status Broadcast(int root, absl::Span<uint8_t> buffer) override;
  absl::Status AllGather(absl::Span<const uint8_t> send,
                         absl::Span<uint8_t> recv) override;
  absl::Status AllGatherV(absl::Span<const uint8_t> send,
                          absl::Span<uint8_t> recv,
                          absl::Span<const uint64_t> recv_counts) override;
  // An all-reduce (maximum) of one word: every rank must contribute before
  // any gets the result.
  absl::Status Barrier() override;

  // Aborts the NCCL communicator, then the job through the bootstrap
  // communicator.
  [[noreturn]] void Abort(const absl::Status& status) override;

 private:
  NcclCommunicator(Communicator& bootstrap, int device, absl::Duration timeout);

  // OK when a collective may start: nothing failed before. Makes device()
  // current on this thread.
  absl::Status Begin(absl::string_view collective);

  // The status of an NCCL call that enqueues work: OK while it completes or
  // is still in progress (non-blocking), else the failure, recorded.
  absl::Status Enqueued(absl::string_view collective, ncclResult_t result);

  // Polls until what was enqueued on stream() completes, NCCL fails or
  // timeout() passes; a failure aborts the NCCL communicator.
  absl::Status Wait(absl::string_view collective);

  // Polls ncclCommGetAsyncError until the communicator leaves ncclInProgress
  // (initialisation, finalisation) or timeout() passes.
  absl::Status WaitUntilIdle(absl::string_view what);

  // The sends and receives of AllToAll(V) and AllGatherV, after their
  // arguments were checked: send_counts[p] bytes from send_offsets[p] in
  // `send` to rank p (AllGatherV sends the same bytes to every rank),
  // recv_counts[p] from rank p in rank order into `recv`.
  absl::Status Exchange(absl::string_view collective,
                        absl::Span<const uint8_t> send,
                        absl::Span<const uint64_t> send_counts,
                        absl::Span<const uint64_t> send_offsets,
                        absl::Span<uint8_t> recv,
                        absl::Span<const uint64_t> recv_counts);

  // Records the status of a call refused before it communicated (bad
  // arguments) and returns it.
  absl::Status Refuse(absl::Status status);
  // Records a failed communication's status, aborting the NCCL communicator
  // (once), and returns it.
  absl::Status Fail(absl::Status status);

  std::string Where(absl::string_view collective) const;

  Communicator& bootstrap_;
  const int device_;
  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  cudaStream_t stream_ = nullptr;
  // The device word Barrier() reduces (always 0).
  int32_t* barrier_word_ = nullptr;
  ncclComm_t comm_ = nullptr;
  bool aborted_ = false;
  absl::Status failure_;
};

}  // namespace ringmoe::parallel

#endif  // RINGMOE_ENGINE_PARALLEL_NCCL_COMMUNICATOR_H_

// MpiCommunicator: the ranks of a job started by mpirun (Open MPI), in host
// memory. It also bootstraps the GPU communicator (NCCL's unique id travels
// by its Broadcast).
//
// Threads: MPI is initialised asking for MPI_THREAD_MULTIPLE (Debian's
// Open MPI provides it); where a library grants less than
// MPI_THREAD_SERIALIZED, calls must come from the thread that initialised
// MPI and others are refused with FAILED_PRECONDITION.
//
// Timeouts: every collective is started non-blocking (point-to-point
// MPI_Isend/MPI_Irecv for the all-to-alls, which tells which peers are
// missing; MPI_Ibcast, MPI_Iallgather, MPI_Ibarrier) and polled with
// MPI_Test until it completes or timeout() passes. Errors come back as
// return codes (MPI_ERRORS_RETURN), never as MPI's default abort.
//
// Failure: MPI cannot cancel a started collective, so after a failed call
// the process must not go on with MPI. Abort() ends the whole job
// (MPI_Abort). A process that returns from main after a failure instead
// exits without MPI_Finalize (it is skipped at exit once anything failed),
// and mpirun then ends the job too. A peer that dies is normally seen by
// mpirun first, which kills every rank and exits non-zero naming it; if the
// transport reports the loss first, the collective returns UNAVAILABLE.
#ifndef RINGMOE_ENGINE_PARALLEL_MPI_COMMUNICATOR_H_
#define RINGMOE_ENGINE_PARALLEL_MPI_COMMUNICATOR_H_

#include <mpi.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/parallel/communicator.h"
#include "engine/parallel/node_grouping.h"

namespace ringmoe::parallel {

class MpiCommunicator : public Communicator {
 public:
  // Joins the job of the launcher that started this process. The first call
  // initialises MPI (MPI_Init_thread, bounded by mpirun, which ends the job
  // when a rank does not start) and finalises it at exit; each call returns
  // a communicator of its own over every rank (a duplicate of
  // MPI_COMM_WORLD, so the traffic of two never mixes) and is itself a
  // collective: every rank makes the same calls. UNAVAILABLE when MPI cannot
  // start, DEADLINE_EXCEEDED when the peers do not all arrive within
  // `timeout`; the process must then exit non-zero.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(
      absl::Duration timeout);

  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Duration timeout() const override { return timeout_; }

  // AllToAll and AllToAllV: at most 2^31 - 1 bytes to or from one peer.
  absl::Status AllToAll(absl::Span<const uint8_t> send,
                        absl::Span<uint8_t> recv) override;
  absl::Status AllToAllV(absl::Span<const uint8_t> send,
                         absl::Span<const uint64_t> send_counts,
                         absl::Span<uint8_t> recv,
                         absl::Span<const uint64_t> recv_counts) override;
  // Broadcast, AllGather and AllGatherV: at most 2^31 - 1 bytes per block.
  absl::Status Broadcast(int root, absl::Span<uint8_t> buffer) override;
  absl::Status AllGather(absl::Span<const uint8_t> send,
                         absl::Span<uint8_t> recv) override;
  absl::Status AllGatherV(absl::Span<const uint8_t> send,
                          absl::Span<uint8_t> recv,
                          absl::Span<const uint64_t> recv_counts) override;
  absl::Status Barrier() override;

  // MPI_Abort on every rank of the job, after printing `status`.
  [[noreturn]] void Abort(const absl::Status& status) override;

  // The job's nodes as MPI sees them: ranks that can share memory
  // (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED) are on one node. A
  // collective, made like the others by every rank; a failure makes the
  // communicator unusable. MPI_Comm_split_type has no non-blocking form,
  // so unlike the collectives above its first step waits for every rank
  // without timeout(): call it at startup, right after Create, where mpirun
  // bounds a rank that does not start. The labels are then exchanged by
  // AllGather, within timeout().
  absl::StatusOr<NodeGrouping> SharedMemoryNodes();

 private:
  MpiCommunicator(MPI_Comm comm, int rank, int size, absl::Duration timeout,
                  bool main_thread_only);

  // OK when a collective may start now: nothing failed before, and this is
  // a thread allowed to call MPI.
  absl::Status CheckUsable(absl::string_view collective) const;

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

  // Waits for every request, each exchanged with peers[i] (-1: the whole
  // communicator). A failure is recorded: later calls refuse to run.
  absl::Status Wait(absl::string_view collective,
                    std::vector<MPI_Request>& requests,
                    const std::vector<int>& peers);

  // Records the status of a call refused before it communicated (bad
  // arguments) and returns it.
  absl::Status Refuse(absl::Status status);
  // Records a failed communication's status (MPI is then not finalised at
  // exit) and returns it; OK passes through.
  absl::Status Fail(absl::Status status);

  MPI_Comm comm_;
  const int rank_;
  const int size_;
  const absl::Duration timeout_;
  const bool main_thread_only_;
  absl::Status failure_;
};

// True when a launcher (mpirun, or one speaking PMIx or PMI) started this
// process as a rank of an MPI job.
bool LaunchedAsMpiRank();

// The communicator of this process's job: an MpiCommunicator under a
// launcher, else a SingleRankCommunicator, so a process started alone never
// initialises MPI.
absl::StatusOr<std::unique_ptr<Communicator>> CreateJobCommunicator(
    absl::Duration timeout);

}  // namespace ringmoe::parallel

#endif  // RINGMOE_ENGINE_PARALLEL_MPI_COMMUNICATOR_H_

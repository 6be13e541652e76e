// SingleRankCommunicator: the job of one process, in host memory. Every
// collective is a copy (or nothing), so a server that runs alone never
// starts MPI; CreateJobCommunicator returns one when no launcher started
// the process.
#ifndef RINGMOE_ENGINE_PARALLEL_SINGLE_RANK_COMMUNICATOR_H_
#define RINGMOE_ENGINE_PARALLEL_SINGLE_RANK_COMMUNICATOR_H_

#include "engine/parallel/communicator.h"

namespace ringmoe::parallel {

class SingleRankCommunicator : public Communicator {
 public:
  // `timeout` is only reported: nothing here waits for a peer.
  explicit SingleRankCommunicator(absl::Duration timeout) : timeout_(timeout) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Duration timeout() const override { return timeout_; }

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
  absl::Status Barrier() override;

  // Prints `status` and exits the process with status 1.
  [[noreturn]] void Abort(const absl::Status& status) override;

 private:
  // Records a failed call's status: later calls refuse to run, as on every
  // communicator.
  absl::Status Fail(absl::Status status);
  absl::Status CheckUsable(absl::string_view collective) const;

  const absl::Duration timeout_;
  absl::Status failure_;
};

}  // namespace ringmoe::parallel

#endif  // RINGMOE_ENGINE_PARALLEL_SINGLE_RANK_COMMUNICATOR_H_

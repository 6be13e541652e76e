#include "engine/parallel/single_rank_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/parallel/collective_args.h"

namespace ringmoe::parallel {
namespace {

void Copy(absl::Span<uint8_t> dst, absl::Span<const uint8_t> src) {
  // memcpy of a null pointer is undefined even for 0 bytes.
  if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
}

}  // namespace

absl::Status SingleRankCommunicator::Fail(absl::Status status) {
  if (!status.ok() && failure_.ok()) failure_ = status;
  return status;
}

absl::Status SingleRankCommunicator::CheckUsable(
    absl::string_view collective) const {
  if (failure_.ok()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(collective, ": the communicator failed earlier (",
                   failure_.ToString(), "); the job must be aborted"));
}

absl::Status SingleRankCommunicator::AllToAll(absl::Span<const uint8_t> send,
                                              absl::Span<uint8_t> recv) {
  if (absl::Status s = CheckUsable("AllToAll"); !s.ok()) return s;
  if (absl::Status s = CheckAllToAll(1, send, recv); !s.ok()) return Fail(s);
  Copy(recv, send);
  return absl::OkStatus();
}

absl::Status SingleRankCommunicator::AllToAllV(
    absl::Span<const uint8_t> send, absl::Span<const uint64_t> send_counts,
    absl::Span<uint8_t> recv, absl::Span<const uint64_t> recv_counts) {
  if (absl::Status s = CheckUsable("AllToAllV"); !s.ok()) return s;
  absl::Status args =
      CheckAllToAllV(1, 0, send, send_counts, recv, recv_counts);
  if (!args.ok()) return Fail(args);
  Copy(recv, send);
  return absl::OkStatus();
}

absl::Status SingleRankCommunicator::Broadcast(int root,
                                               absl::Span<uint8_t> buffer) {
  if (absl::Status s = CheckUsable("Broadcast"); !s.ok()) return s;
  return Fail(CheckBroadcast(1, root));
}

absl::Status SingleRankCommunicator::AllGather(absl::Span<const uint8_t> send,
                                               absl::Span<uint8_t> recv) {
  if (absl::Status s = CheckUsable("AllGather"); !s.ok()) return s;
  if (absl::Status s = CheckAllGather(1, send, recv); !s.ok()) return Fail(s);
  Copy(recv, send);
  return absl::OkStatus();
}

absl::Status SingleRankCommunicator::AllGatherV(
    absl::Span<const uint8_t> send, absl::Span<uint8_t> recv,
    absl::Span<const uint64_t> recv_counts) {
  if (absl::Status s = CheckUsable("AllGatherV"); !s.ok()) return s;
  if (absl::Status s = CheckAllGatherV(1, 0, send, recv, recv_counts);
      !s.ok()) {
    return Fail(s);
  }
  Copy(recv, send);
  return absl::OkStatus();
}

absl::Status SingleRankCommunicator::Barrier() {
  return CheckUsable("Barrier");
}

void SingleRankCommunicator::Abort(const absl::Status& status) {
  std::fprintf(stderr, "rank 0 of 1: aborting: %s\n",
               status.ToString().c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace ringmoe::parallel

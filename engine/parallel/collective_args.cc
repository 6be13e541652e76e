#include "engine/parallel/collective_args.h"

#include "absl/strings/str_cat.h"

namespace ringmoe::parallel {
namespace {

// The sum of `collective`'s `counts`, or an error naming `what` when it
// overflows.
absl::Status SumCounts(absl::string_view collective, absl::string_view what,
                       absl::Span<const uint64_t> counts, uint64_t* sum) {
  *sum = 0;
  for (uint64_t count : counts) {
    if (count > UINT64_MAX - *sum) {
      return absl::InvalidArgumentError(
          absl::StrCat(collective, ": ", what, " overflow 64 bits"));
    }
    *sum += count;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckAllToAll(int world_size, absl::Span<const uint8_t> send,
                           absl::Span<uint8_t> recv) {
  if (send.size() != recv.size() || send.size() % world_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllToAll: send and recv must have the same size, a multiple of the ",
        world_size, " ranks; got ", send.size(), " and ", recv.size(),
        " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckAllToAllV(int world_size, int rank,
                            absl::Span<const uint8_t> send,
                            absl::Span<const uint64_t> send_counts,
                            absl::Span<uint8_t> recv,
                            absl::Span<const uint64_t> recv_counts) {
  if (send_counts.size() != world_size || recv_counts.size() != world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllToAllV: one count per rank needed (", world_size, " ranks); got ",
        send_counts.size(), " send and ", recv_counts.size(), " recv counts"));
  }
  uint64_t send_total = 0;
  uint64_t recv_total = 0;
  absl::Status status =
      SumCounts("AllToAllV", "send counts", send_counts, &send_total);
  if (!status.ok()) return status;
  status = SumCounts("AllToAllV", "recv counts", recv_counts, &recv_total);
  if (!status.ok()) return status;
  if (send_total != send.size() || recv_total != recv.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllToAllV: counts must sum to the buffer sizes; send counts sum to ",
        send_total, " for ", send.size(), " bytes, recv counts to ", recv_total,
        " for ", recv.size(), " bytes"));
  }
  if (send_counts[rank] != recv_counts[rank]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllToAllV: rank ", rank, " sends itself ", send_counts[rank],
        " bytes but expects ", recv_counts[rank]));
  }
  return absl::OkStatus();
}

absl::Status CheckBroadcast(int world_size, int root) {
  if (root < 0 || root >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Broadcast: root ", root, " is not a rank of ", world_size));
  }
  return absl::OkStatus();
}

absl::Status CheckAllGather(int world_size, absl::Span<const uint8_t> send,
                            absl::Span<uint8_t> recv) {
  if (recv.size() != send.size() * world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllGather: recv must hold ", world_size, " blocks of ",
                     send.size(), " bytes; got ", recv.size(), " bytes"));
  }
  return absl::OkStatus();
}

absl::Status CheckAllGatherV(int world_size, int rank,
                             absl::Span<const uint8_t> send,
                             absl::Span<uint8_t> recv,
                             absl::Span<const uint64_t> recv_counts) {
  if (recv_counts.size() != static_cast<size_t>(world_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllGatherV: ", recv_counts.size(), " counts for ",
                     world_size, " ranks"));
  }
  uint64_t total = 0;
  if (absl::Status s =
          SumCounts("AllGatherV", "recv counts", recv_counts, &total);
      !s.ok()) {
    return s;
  }
  if (total != recv.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AllGatherV: the counts add up to ", total,
                     " bytes; recv holds ", recv.size()));
  }
  if (recv_counts[rank] != send.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllGatherV: rank ", rank, " sends ", send.size(),
        " bytes but its own block is counted as ", recv_counts[rank]));
  }
  return absl::OkStatus();
}

std::vector<uint64_t> BlockOffsets(absl::Span<const uint64_t> counts) {
  std::vector<uint64_t> offsets(counts.size());
  uint64_t offset = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    offsets[p] = offset;
    offset += counts[p];
  }
  return offsets;
}

}  // namespace ringmoe::parallel

#include "engine/parallel/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/parallel/collective_args.h"
#include "engine/parallel/single_rank_communicator.h"

namespace ringmoe::parallel {
namespace {

// The tag of the all-to-alls' point-to-point messages. Messages between two
// ranks with one tag arrive in the order sent, and every call completes all
// of its messages before it returns, so one tag serves every call.
constexpr int kAllToAllTag = 16;

// Set once anything failed: MPI_Finalize is then skipped at exit, since it
// could wait for peers stuck in a collective this process left.
std::atomic<bool> mpi_failed{false};

void FinalizeMpiAtExit() {
  if (mpi_failed.load()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return absl::StrCat("MPI error ", code);
  }
  return std::string(text, length);
}

std::string Where(absl::string_view collective, int rank, int size) {
  return absl::StrCat(collective, " on rank ", rank, " of ", size);
}

absl::Status MpiError(absl::string_view where, int peer, int code) {
  const std::string with =
      peer >= 0 ? absl::StrCat(" (with rank ", peer, ")") : "";
  int error_class = MPI_ERR_OTHER;
  MPI_Error_class(code, &error_class);
  if (error_class == MPI_ERR_TRUNCATE) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, with, ": a peer sent more bytes than expected ",
        "(counts disagree between ranks): ", MpiErrorString(code)));
  }
  return absl::UnavailableError(
      absl::StrCat(where, with, ": ", MpiErrorString(code)));
}

// Polls `requests` until each completes, one fails, or `timeout` passes.
absl::Status WaitForRequests(absl::string_view where, absl::Duration timeout,
                             std::vector<MPI_Request>& requests,
                             const std::vector<int>& peers) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<bool> done(requests.size(), false);
  for (int polls = 0;; ++polls) {
    bool all_done = true;
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      int flag = 0;
      const int code = MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE);
      if (code != MPI_SUCCESS) return MpiError(where, peers[i], code);
      done[i] = flag != 0;
      all_done = all_done && done[i];
    }
    if (all_done) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      std::vector<int> missing;
      for (size_t i = 0; i < requests.size(); ++i) {
        if (!done[i] && peers[i] >= 0) missing.push_back(peers[i]);
      }
      std::sort(missing.begin(), missing.end());
      missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
      return absl::DeadlineExceededError(absl::StrCat(
          where, ": not complete after ", absl::FormatDuration(timeout),
          missing.empty() ? std::string(": some rank did not join")
                          : absl::StrCat(": waiting for rank(s) ",
                                         absl::StrJoin(missing, ", "))));
    }
    // Ranks may outnumber cores (oversubscribed): give the CPU away at once,
    // and sleep once the wait is clearly not short.
    if (polls < 2000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

absl::Status CheckPerMessageBytes(absl::string_view where, uint64_t bytes) {
  if (bytes > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", bytes, " bytes in one message; at most ",
                     INT_MAX, " per peer or block"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(
    absl::Duration timeout) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    const int code =
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (code != MPI_SUCCESS) {
      return absl::UnavailableError(
          absl::StrCat("MPI_Init_thread: ", MpiErrorString(code)));
    }
    std::atexit(FinalizeMpiAtExit);
  } else {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) {
      return absl::FailedPreconditionError(
          "MpiCommunicator::Create: MPI was already finalised in this process");
    }
    MPI_Query_thread(&provided);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> requests(1);
  const std::string where = Where("MpiCommunicator::Create", rank, size);
  int code = MPI_Comm_idup(MPI_COMM_WORLD, &comm, &requests[0]);
  absl::Status status = code == MPI_SUCCESS
                            ? WaitForRequests(where, timeout, requests, {-1})
                            : MpiError(where, -1, code);
  if (status.ok()) {
    code = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    if (code != MPI_SUCCESS) status = MpiError(where, -1, code);
  }
  if (!status.ok()) {
    mpi_failed = true;
    return status;
  }
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(
      comm, rank, size, timeout, provided < MPI_THREAD_SERIALIZED));
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int rank, int size,
                                 absl::Duration timeout, bool main_thread_only)
    : comm_(comm),
      rank_(rank),
      size_(size),
      timeout_(timeout),
      main_thread_only_(main_thread_only) {}

MpiCommunicator::~MpiCommunicator() {
  // After a failed communication anywhere in the process, no more MPI.
  if (mpi_failed.load()) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

absl::Status MpiCommunicator::Refuse(absl::Status status) {
  if (failure_.ok()) failure_ = status;
  return status;
}

absl::Status MpiCommunicator::Fail(absl::Status status) {
  if (status.ok()) return status;
  mpi_failed = true;
  return Refuse(status);
}

absl::Status MpiCommunicator::CheckUsable(absl::string_view collective) const {
  if (!failure_.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        Where(collective, rank_, size_), ": the communicator failed earlier (",
        failure_.ToString(), "); the job must be aborted"));
  }
  if (main_thread_only_) {
    int is_main = 0;
    MPI_Is_thread_main(&is_main);
    if (!is_main) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(collective, rank_, size_),
          ": this MPI library serves only the thread that initialised it"));
    }
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Wait(absl::string_view collective,
                                   std::vector<MPI_Request>& requests,
                                   const std::vector<int>& peers) {
  return Fail(WaitForRequests(Where(collective, rank_, size_), timeout_,
                              requests, peers));
}

absl::Status MpiCommunicator::AllToAll(absl::Span<const uint8_t> send,
                                       absl::Span<uint8_t> recv) {
  if (absl::Status s = CheckUsable("AllToAll"); !s.ok()) return s;
  absl::Status args = CheckAllToAll(size_, send, recv);
  if (args.ok()) args = CheckPerMessageBytes("AllToAll", send.size() / size_);
  if (!args.ok()) return Refuse(args);
  const std::vector<uint64_t> counts(size_, send.size() / size_);
  return Exchange("AllToAll", send, counts, BlockOffsets(counts), recv, counts);
}

absl::Status MpiCommunicator::AllToAllV(
    absl::Span<const uint8_t> send, absl::Span<const uint64_t> send_counts,
    absl::Span<uint8_t> recv, absl::Span<const uint64_t> recv_counts) {
  if (absl::Status s = CheckUsable("AllToAllV"); !s.ok()) return s;
  absl::Status args =
      CheckAllToAllV(size_, rank_, send, send_counts, recv, recv_counts);
  for (int p = 0; p < size_ && args.ok(); ++p) {
    args = CheckPerMessageBytes("AllToAllV",
                                std::max(send_counts[p], recv_counts[p]));
  }
  if (!args.ok()) return Refuse(args);
  return Exchange("AllToAllV", send, send_counts, BlockOffsets(send_counts),
                  recv, recv_counts);
}

absl::Status MpiCommunicator::Exchange(absl::string_view collective,
                                       absl::Span<const uint8_t> send,
                                       absl::Span<const uint64_t> send_counts,
                                       absl::Span<const uint64_t> send_offsets,
                                       absl::Span<uint8_t> recv,
                                       absl::Span<const uint64_t> recv_counts) {
  const std::vector<uint64_t> recv_offsets = BlockOffsets(recv_counts);
  std::vector<MPI_Request> requests;
  std::vector<int> peers;
  // Receives first, so that most messages find their buffer posted; sends
  // start with the next rank, so that not every rank sends to rank 0 first.
  for (int step = 1; step < size_; ++step) {
    const int p = (rank_ + size_ - step) % size_;
    if (recv_counts[p] == 0) continue;
    requests.emplace_back();
    peers.push_back(p);
    const int code = MPI_Irecv(recv.data() + recv_offsets[p],
                               static_cast<int>(recv_counts[p]), MPI_BYTE, p,
                               kAllToAllTag, comm_, &requests.back());
    if (code != MPI_SUCCESS) {
      return Fail(MpiError(Where(collective, rank_, size_), p, code));
    }
  }
  for (int step = 1; step < size_; ++step) {
    const int p = (rank_ + step) % size_;
    if (send_counts[p] == 0) continue;
    requests.emplace_back();
    peers.push_back(p);
    const int code = MPI_Isend(send.data() + send_offsets[p],
                               static_cast<int>(send_counts[p]), MPI_BYTE, p,
                               kAllToAllTag, comm_, &requests.back());
    if (code != MPI_SUCCESS) {
      return Fail(MpiError(Where(collective, rank_, size_), p, code));
    }
  }
  if (send_counts[rank_] > 0) {
    std::memcpy(recv.data() + recv_offsets[rank_],
                send.data() + send_offsets[rank_], send_counts[rank_]);
  }
  return Wait(collective, requests, peers);
}

absl::Status MpiCommunicator::Broadcast(int root, absl::Span<uint8_t> buffer) {
  if (absl::Status s = CheckUsable("Broadcast"); !s.ok()) return s;
  absl::Status args = CheckBroadcast(size_, root);
  if (args.ok()) args = CheckPerMessageBytes("Broadcast", buffer.size());
  if (!args.ok()) return Refuse(args);
  std::vector<MPI_Request> requests(1);
  const int code = MPI_Ibcast(buffer.data(), static_cast<int>(buffer.size()),
                              MPI_BYTE, root, comm_, &requests[0]);
  if (code != MPI_SUCCESS) {
    return Fail(MpiError(Where("Broadcast", rank_, size_), -1, code));
  }
  return Wait(absl::StrCat("Broadcast from rank ", root), requests, {-1});
}

absl::Status MpiCommunicator::AllGather(absl::Span<const uint8_t> send,
                                        absl::Span<uint8_t> recv) {
  if (absl::Status s = CheckUsable("AllGather"); !s.ok()) return s;
  absl::Status args = CheckAllGather(size_, send, recv);
  if (args.ok()) args = CheckPerMessageBytes("AllGather", send.size());
  if (!args.ok()) return Refuse(args);
  std::vector<MPI_Request> requests(1);
  const int block = static_cast<int>(send.size());
  const int code = MPI_Iallgather(send.data(), block, MPI_BYTE, recv.data(),
                                  block, MPI_BYTE, comm_, &requests[0]);
  if (code != MPI_SUCCESS) {
    return Fail(MpiError(Where("AllGather", rank_, size_), -1, code));
  }
  return Wait("AllGather", requests, {-1});
}

absl::Status MpiCommunicator::AllGatherV(
    absl::Span<const uint8_t> send, absl::Span<uint8_t> recv,
    absl::Span<const uint64_t> recv_counts) {
  if (absl::Status s = CheckUsable("AllGatherV"); !s.ok()) return s;
  absl::Status args = CheckAllGatherV(size_, rank_, send, recv, recv_counts);
  if (args.ok()) args = CheckPerMessageBytes("AllGatherV", send.size());
  for (int p = 0; p < size_ && args.ok(); ++p) {
    args = CheckPerMessageBytes("AllGatherV", recv_counts[p]);
  }
  if (!args.ok()) return Refuse(args);
  // Point to point, as the all-to-alls: Open MPI's MPI_Iallgatherv may
  // route a block through other ranks, and each peer's failure is then
  // its own.
  const std::vector<uint64_t> send_counts(size_, send.size());
  const std::vector<uint64_t> send_offsets(size_, 0);
  return Exchange("AllGatherV", send, send_counts, send_offsets, recv,
                  recv_counts);
}

absl::Status MpiCommunicator::Barrier() {
  if (absl::Status s = CheckUsable("Barrier"); !s.ok()) return s;
  std::vector<MPI_Request> requests(1);
  const int code = MPI_Ibarrier(comm_, &requests[0]);
  if (code != MPI_SUCCESS) {
    return Fail(MpiError(Where("Barrier", rank_, size_), -1, code));
  }
  return Wait("Barrier", requests, {-1});
}

void MpiCommunicator::Abort(const absl::Status& status) {
  std::fprintf(stderr, "rank %d of %d: aborting the job: %s\n", rank_, size_,
               status.ToString().c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

absl::StatusOr<NodeGrouping> MpiCommunicator::SharedMemoryNodes() {
  if (absl::Status s = CheckUsable("SharedMemoryNodes"); !s.ok()) return s;
  const std::string where = Where("SharedMemoryNodes", rank_, size_);
  // Ordered by rank (the key), so rank 0 of the node's communicator is the
  // node's lowest rank: its label, the same on every rank of the node.
  MPI_Comm node_comm = MPI_COMM_NULL;
  int code = MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_,
                                 MPI_INFO_NULL, &node_comm);
  if (code != MPI_SUCCESS) return Fail(MpiError(where, -1, code));
  MPI_Group node_group = MPI_GROUP_NULL;
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Comm_group(node_comm, &node_group);
  MPI_Comm_group(comm_, &group);
  const int first = 0;
  int lowest = MPI_UNDEFINED;
  code = MPI_Group_translate_ranks(node_group, 1, &first, group, &lowest);
  MPI_Group_free(&node_group);
  MPI_Group_free(&group);
  MPI_Comm_free(&node_comm);
  if (code != MPI_SUCCESS) return Fail(MpiError(where, -1, code));

  const int64_t label = lowest;
  std::vector<int64_t> labels(size_);
  const absl::Status gathered = AllGather(
      AsBytes(absl::MakeConstSpan(&label, 1)), AsWritableBytes(labels));
  if (!gathered.ok()) return gathered;
  return NodeGrouping::FromLabels(labels);
}

bool LaunchedAsMpiRank() {
  for (const char* variable :
       {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateJobCommunicator(
    absl::Duration timeout) {
  if (!LaunchedAsMpiRank()) {
    return std::make_unique<SingleRankCommunicator>(timeout);
  }
  auto mpi = MpiCommunicator::Create(timeout);
  if (!mpi.ok()) return mpi.status();
  return std::unique_ptr<Communicator>(std::move(*mpi));
}

}  // namespace ringmoe::parallel

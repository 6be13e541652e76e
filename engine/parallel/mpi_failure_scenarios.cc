// A job that fails on purpose, run under mpirun by mpi_failure_test.sh:
//   skip_all_to_all_v, skip_barrier: rank 1 never enters the second
//     collective; the others report DEADLINE_EXCEEDED after the 2 s timeout
//     and abort the job.
//   kill_rank: rank 1 is killed (SIGKILL) in the middle of a run of
//     all-to-alls with a 30 s timeout; the job must still end at once.
// Each rank that sees a collective fail prints
//   rank R: COLLECTIVE failed after S s: STATUS
// on stdout before it aborts.
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "engine/parallel/mpi_communicator.h"

namespace ringmoe::parallel {
namespace {

// Runs `collective` and aborts the job when it fails, saying how long it
// took.
template <typename Collective>
void RunOrAbort(Communicator& comm, absl::string_view name,
                Collective collective) {
  const absl::Time start = absl::Now();
  const absl::Status status = collective();
  if (status.ok()) return;
  std::printf("rank %d: %s failed after %.2f s: %s\n", comm.rank(),
              std::string(name).c_str(),
              absl::ToDoubleSeconds(absl::Now() - start),
              status.ToString().c_str());
  std::fflush(stdout);
  // The other waiting ranks time out within moments of this one: give them
  // a second to report too before the abort ends the job (a slow rank,
  // under a sanitizer, was killed before it could).
  absl::SleepFor(absl::Seconds(1));
  comm.Abort(status);
}

// One all-to-all of 1000 bytes to every rank.
absl::Status ExchangeTokens(Communicator& comm) {
  const std::vector<uint64_t> counts(comm.size(), 1000);
  std::vector<uint8_t> send(1000 * comm.size(), 1);
  std::vector<uint8_t> recv(send.size());
  return comm.AllToAllV(send, counts, absl::MakeSpan(recv), counts);
}

int Run(absl::string_view scenario) {
  const bool kill = scenario == "kill_rank";
  auto comm =
      MpiCommunicator::Create(kill ? absl::Seconds(30) : absl::Seconds(2));
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  Communicator& job = **comm;
  // The first exchange connects every pair, outside the timed collective.
  RunOrAbort(job, "AllToAllV", [&] { return ExchangeTokens(job); });
  if (kill) {
    for (int step = 0; step < 1000; ++step) {
      if (step == 3 && job.rank() == 1) std::raise(SIGKILL);
      RunOrAbort(job, "AllToAllV", [&] { return ExchangeTokens(job); });
    }
    std::printf("rank %d: ran every step although rank 1 was killed\n",
                job.rank());
    return 1;
  }
  if (job.rank() == 1) {
    // Skips the collective and stays alive until the others abort the job.
    absl::SleepFor(absl::Seconds(60));
    std::printf("rank 1: nobody aborted the job\n");
    return 1;
  }
  if (scenario == "skip_barrier") {
    RunOrAbort(job, "Barrier", [&] { return job.Barrier(); });
  } else {
    RunOrAbort(job, "AllToAllV", [&] { return ExchangeTokens(job); });
  }
  std::printf("rank %d: the collective completed without rank 1\n", job.rank());
  return 1;
}

}  // namespace
}  // namespace ringmoe::parallel

int main(int argc, char** argv) {
  const absl::string_view scenario = argc > 1 ? argv[1] : "";
  if (scenario != "skip_all_to_all_v" && scenario != "skip_barrier" &&
      scenario != "kill_rank") {
    std::fprintf(stderr, "usage: %s skip_all_to_all_v|skip_barrier|kill_rank\n",
                 argv[0]);
    return 2;
  }
  return ringmoe::parallel::Run(scenario);
}

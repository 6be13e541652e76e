// The server under expert parallelism (ringmoe_server --expert_parallel
// under mpirun): rank 0 runs the front ends and the scheduler; every other
// rank (a follower) runs no front end and replays rank 0's steps on its
// own engine, so that every rank runs the same forward pass on the same
// tokens and the per-layer collectives of ExpertParallelExecutor match.
//
// Rank 0's scheduler runs on a BroadcastingStepRunner around its
// EngineStepRunner: before each step it broadcasts a StepMessage holding
// the KV-cache releases since the last step (finished, cancelled,
// preempted, recomputed sequences) and the step's chunks; the followers
// (RunStepFollower) apply the releases and run the same Step, discarding
// the logits and greedy tokens (sampling happens on rank 0 only). Their KV
// caches therefore hold exactly rank 0's sequences, block for block.
//
// Wire format (host byte order: the ranks of a job run one build on one
// architecture), two Broadcasts from rank 0 per message:
//   1. a fixed 32-byte StepHeader: magic "RMSP", kind (step, idle, stop),
//      number of releases, number of chunks, payload bytes;
//   2. when payload bytes > 0, the payload: the releases (int64 sequence
//      ids), then for each chunk its sequence id (int64), token count
//      (uint32), output (uint32: 0 the last token's logits, 1 all_logits,
//      2 greedy_token), home rank (int32, -1: none;
//      SequenceChunk::home), 4 zero bytes and tokens (int32 each).
// While the scheduler is idle rank 0 sends an `idle` header every
// heartbeat (at most a quarter of the communicator's timeout, at most a
// second), so that a follower waiting for the next step never times out and
// a dead follower is noticed while idle too. `stop` ends the followers'
// loop.
//
// Per-rank metrics: at most once a heartbeat, when steps ran since the
// last time (and once at start), rank 0 sends a `stats` message (releases
// like `idle`, no chunks) and every rank then joins one AllGather of its
// RankStats; rank 0 publishes the gathered records on a RankStatsBoard,
// which its /metrics reads. Between steps the records are at most a
// heartbeat old.
//
// Faults: any failed collective, and any failed step (a step that fails on
// one rank leaves the others inside a collective), ends the whole job. A
// follower returns the failure from its loop (its caller aborts the job).
// Rank 0 records it (failure()), fails that step and every later one with
// it, and sends nothing more; its caller then ends the job
// (Communicator::Abort) once the requests in flight got their errors. No
// rank hangs: a peer that stopped answering fails a collective at the
// communicator's timeout.
#ifndef RINGMOE_ENGINE_SERVING_STEP_BROADCAST_H_
#define RINGMOE_ENGINE_SERVING_STEP_BROADCAST_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/parallel/communicator.h"
#include "engine/runtime/kv_cache.h"
#include "engine/runtime/model_runner.h"
#include "engine/serving/step_runner.h"

namespace ringmoe::serving {

enum class StepKind : uint32_t { kStep = 1, kIdle = 2, kStop = 3, kStats = 4 };

struct StepHeader {
  uint32_t magic = 0;
  uint32_t kind = 0;
  uint64_t num_releases = 0;
  uint64_t num_chunks = 0;
  uint64_t payload_bytes = 0;
};
static_assert(sizeof(StepHeader) == 32, "StepHeader is 32 bytes on the wire");

inline constexpr uint32_t kStepMagic = 0x50534d52;  // "RMSP"

struct StepChunk {
  runtime::SequenceId sequence = 0;
  std::vector<int32_t> tokens;
  bool all_logits = false;
  int home = -1;
  bool greedy_token = false;
};

struct StepMessage {
  StepKind kind = StepKind::kStep;
  std::vector<runtime::SequenceId> releases;
  std::vector<StepChunk> chunks;

  // The chunks as the engine takes them (spans into `chunks`).
  std::vector<runtime::SequenceChunk> EngineChunks() const;
};

// One rank's counters as rank 0 gathers them (fixed-width fields, sent as
// bytes): the traffic of its engine's collectives (Engine::
// expert_parallel_stats), the expert replicas it holds per MoE layer, the
// rows it ran for experts another rank owns, the steps it ran, and its
// memory ring's weight bytes moved and stall time.
struct RankStats {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t collectives = 0;
  double collective_seconds = 0;
  uint64_t experts_held = 0;
  uint64_t replica_rows = 0;
  uint64_t steps = 0;
  uint64_t ring_bytes_moved = 0;
  double ring_stall_seconds = 0;
};
static_assert(sizeof(RankStats) == 72, "RankStats is 72 bytes on the wire");

// This rank's RankStats except `steps` (the step loop counts those).
using RankStatsSource = std::function<RankStats()>;

// The latest records of every rank, in rank order: written by rank 0's
// step thread, read by the metrics scrape.
class RankStatsBoard {
 public:
  void Publish(std::vector<RankStats> ranks);
  std::vector<RankStats> Snapshot() const;

 private:
  mutable std::mutex mu_;
  std::vector<RankStats> ranks_;  // guarded by mu_
};

// The header and payload of `message`.
StepHeader EncodeStepHeader(const StepMessage& message);
std::vector<uint8_t> EncodeStepPayload(const StepMessage& message);
// The message of `header` and `payload`; INVALID_ARGUMENT naming what does
// not add up (a wrong magic or kind, counts that disagree with the payload's
// size, a token count past the payload).
absl::StatusOr<StepMessage> DecodeStepMessage(
    const StepHeader& header, absl::Span<const uint8_t> payload);

// Sends one message from rank 0 (every rank calls it: on the others it
// receives). On rank 0 `message` is read; on the others it is written.
absl::Status BroadcastStepMessage(parallel::Communicator& communicator,
                                  StepMessage* message);

class BroadcastingStepRunner final : public StepRunner {
 public:
  // Rank 0 of `communicator`; `inner` (runs rank 0's own steps),
  // `communicator` and `board` (receives every rank's RankStats, rank 0's
  // from `stats`) must outlive the runner. Starts the heartbeat thread.
  BroadcastingStepRunner(StepRunner* inner,
                         parallel::Communicator* communicator,
                         RankStatsSource stats, RankStatsBoard* board);
  // Stops the heartbeat; sends `stop` unless Stop() ran.
  ~BroadcastingStepRunner() override;

  int64_t vocab_size() const override { return inner_.vocab_size(); }
  int64_t context_tokens() const override { return inner_.context_tokens(); }
  runtime::KvCache& kv_cache() override { return inner_.kv_cache(); }
  int num_kv_caches() const override { return inner_.num_kv_caches(); }
  runtime::KvCache& kv_cache_of(int cache) override {
    return inner_.kv_cache_of(cache);
  }
  const tokenizer::Tokenizer* tokenizer() const override {
    return inner_.tokenizer();
  }
  absl::Span<const int32_t> eos_token_ids() const override {
    return inner_.eos_token_ids();
  }
  // Releases on rank 0 now; the followers release with the next step.
  void Release(runtime::SequenceId id) override;
  // Broadcasts the step, then runs it; a failure of either is the job's
  // failure (returned, and kept in failure()). FAILED_PRECONDITION after
  // Stop() or a failure.
  absl::Status Step(absl::Span<const runtime::SequenceChunk> chunks,
                    std::vector<float>* logits,
                    std::vector<int32_t>* greedy_tokens) override;

  // Tells the followers to exit (their loop returns OK) unless the job
  // failed; later steps fail.
  void Stop();

  // The job's failure ("the expert-parallel job failed: ..."), OK while
  // there is none. Any thread may ask.
  absl::Status failure() const;

 private:
  void Heartbeat();
  // Records `status` as the job's failure (mu_ held) and returns it.
  absl::Status FailLocked(const absl::Status& status);
  // Broadcasts `message` (mu_ held); a failure is the job's.
  absl::Status SendLocked(StepMessage* message);
  // Whether the ranks' stats are due (mu_ held).
  bool StatsDueLocked() const;
  // Sends `stats` with the pending releases and gathers every rank's
  // RankStats onto the board (mu_ held); a failure is the job's.
  absl::Status GatherStatsLocked();

  StepRunner& inner_;
  parallel::Communicator& communicator_;
  const RankStatsSource stats_;
  RankStatsBoard& board_;
  const absl::Duration heartbeat_;

  std::mutex mu_;
  std::condition_variable wake_;
  bool stopped_ = false;
  bool failed_ = false;                                // guarded by mu_
  std::vector<runtime::SequenceId> pending_releases_;  // guarded by mu_
  absl::Time last_sent_;                               // guarded by mu_
  absl::Time last_stats_ = absl::InfinitePast();       // guarded by mu_
  uint64_t steps_ = 0;                                 // guarded by mu_
  bool steps_since_stats_ = true;                      // guarded by mu_
  std::thread heartbeat_thread_;
  mutable std::mutex failure_mu_;
  absl::Status failure_;  // guarded by failure_mu_
};

// A follower's loop: receives rank 0's messages and runs each step on
// `runner` until `stop` (returns OK), sending `stats` (with its step count)
// when rank 0 gathers them. Returns the first failure (a collective, a
// malformed message, a failed step): the caller must then end the job with
// Communicator::Abort.
absl::Status RunStepFollower(parallel::Communicator& communicator,
                             StepRunner& runner, const RankStatsSource& stats);

// Every rank's RankStats gathered (rank order) with one AllGather; `mine`
// is this rank's.
absl::StatusOr<std::vector<RankStats>> GatherRankStats(
    parallel::Communicator& communicator, const RankStats& mine);

}  // namespace ringmoe::serving

#endif  // RINGMOE_ENGINE_SERVING_STEP_BROADCAST_H_

#include "engine/serving/step_broadcast.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ringmoe::serving {
namespace {

template <typename T>
void Put(std::vector<uint8_t>& out, T value) {
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &value, sizeof(T));
}

// Reads from a payload, refusing to run past its end.
class Reader {
 public:
  explicit Reader(absl::Span<const uint8_t> data) : data_(data) {}
  template <typename T>
  bool Get(T* value) {
    if (data_.size() - at_ < sizeof(T)) return false;
    std::memcpy(value, data_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  bool GetInts(size_t n, std::vector<int32_t>* out) {
    if ((data_.size() - at_) / sizeof(int32_t) < n) return false;
    out->resize(n);
    if (n > 0)
      std::memcpy(out->data(), data_.data() + at_, n * sizeof(int32_t));
    at_ += n * sizeof(int32_t);
    return true;
  }
  size_t left() const { return data_.size() - at_; }

 private:
  absl::Span<const uint8_t> data_;
  size_t at_ = 0;
};

// A chunk's sequence id, token count, output, home and padding.
constexpr uint64_t kChunkHeaderBytes = 24;

// What a chunk asks the step for, on the wire.
enum ChunkOutput : uint32_t {
  kLastLogits = 0,
  kAllLogits = 1,
  kGreedyToken = 2,
};

absl::Span<uint8_t> Bytes(StepHeader& header) {
  return {reinterpret_cast<uint8_t*>(&header), sizeof(header)};
}

}  // namespace

std::vector<runtime::SequenceChunk> StepMessage::EngineChunks() const {
  std::vector<runtime::SequenceChunk> out;
  out.reserve(chunks.size());
  for (const StepChunk& c : chunks) {
    out.push_back({c.sequence, absl::MakeConstSpan(c.tokens), c.all_logits,
                   c.home, c.greedy_token});
  }
  return out;
}

StepHeader EncodeStepHeader(const StepMessage& message) {
  StepHeader header;
  header.magic = kStepMagic;
  header.kind = static_cast<uint32_t>(message.kind);
  header.num_releases = message.releases.size();
  header.num_chunks = message.chunks.size();
  uint64_t bytes = message.releases.size() * sizeof(int64_t);
  for (const StepChunk& c : message.chunks) {
    bytes += kChunkHeaderBytes + c.tokens.size() * sizeof(int32_t);
  }
  header.payload_bytes = bytes;
  return header;
}

std::vector<uint8_t> EncodeStepPayload(const StepMessage& message) {
  std::vector<uint8_t> out;
  out.reserve(EncodeStepHeader(message).payload_bytes);
  for (runtime::SequenceId id : message.releases) Put<int64_t>(out, id);
  for (const StepChunk& c : message.chunks) {
    Put<int64_t>(out, c.sequence);
    Put<uint32_t>(out, static_cast<uint32_t>(c.tokens.size()));
    Put<uint32_t>(out, c.greedy_token ? kGreedyToken
                       : c.all_logits ? kAllLogits
                                      : kLastLogits);
    Put<int32_t>(out, c.home);
    Put<uint32_t>(out, 0);
    const size_t at = out.size();
    out.resize(at + c.tokens.size() * sizeof(int32_t));
    if (!c.tokens.empty()) {
      std::memcpy(out.data() + at, c.tokens.data(),
                  c.tokens.size() * sizeof(int32_t));
    }
  }
  return out;
}

absl::StatusOr<StepMessage> DecodeStepMessage(
    const StepHeader& header, absl::Span<const uint8_t> payload) {
  if (header.magic != kStepMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("step message: bad magic ", header.magic));
  }
  if (header.kind < static_cast<uint32_t>(StepKind::kStep) ||
      header.kind > static_cast<uint32_t>(StepKind::kStats)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step message: unknown kind ", header.kind));
  }
  if (header.payload_bytes != payload.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step message: header says ", header.payload_bytes,
                     " payload bytes, got ", payload.size()));
  }
  // Each release takes 8 bytes and each chunk at least its header: counts
  // past that are refused before anything is allocated.
  if (header.num_releases > payload.size() / 8 ||
      header.num_chunks > payload.size() / kChunkHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step message: ", header.num_releases, " releases and ",
        header.num_chunks, " chunks cannot fit in ", payload.size(), " bytes"));
  }
  StepMessage message;
  message.kind = static_cast<StepKind>(header.kind);
  if (message.kind == StepKind::kStop && payload.size() != 0) {
    return absl::InvalidArgumentError("step message: stop with a payload");
  }
  if (message.kind != StepKind::kStep && header.num_chunks != 0) {
    return absl::InvalidArgumentError(
        "step message: chunks in a message that is no step");
  }
  Reader in(payload);
  message.releases.resize(header.num_releases);
  for (runtime::SequenceId& id : message.releases) in.Get(&id);
  message.chunks.resize(header.num_chunks);
  for (size_t i = 0; i < message.chunks.size(); ++i) {
    StepChunk& c = message.chunks[i];
    uint32_t n = 0, output = 0, zero = 0;
    int32_t home = 0;
    if (!in.Get(&c.sequence) || !in.Get(&n) || !in.Get(&output) ||
        !in.Get(&home) || !in.Get(&zero) || output > kGreedyToken ||
        home < -1 || zero != 0 || n == 0 || !in.GetInts(n, &c.tokens)) {
      return absl::InvalidArgumentError(
          absl::StrCat("step message: chunk ", i, " is malformed"));
    }
    c.all_logits = output == kAllLogits;
    c.greedy_token = output == kGreedyToken;
    c.home = home;
  }
  if (in.left() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step message: ", in.left(), " bytes left after the last chunk"));
  }
  return message;
}

absl::Status BroadcastStepMessage(parallel::Communicator& communicator,
                                  StepMessage* message) {
  const bool root = communicator.rank() == 0;
  StepHeader header;
  std::vector<uint8_t> payload;
  if (root) {
    header = EncodeStepHeader(*message);
    payload = EncodeStepPayload(*message);
  }
  if (absl::Status s = communicator.Broadcast(0, Bytes(header)); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("step header: ", s.message()));
  }
  if (!root) {
    // A header that is not one must not size a buffer.
    if (header.magic != kStepMagic) {
      return absl::InvalidArgumentError(
          absl::StrCat("step message: bad magic ", header.magic));
    }
    payload.resize(header.payload_bytes);
  }
  if (header.payload_bytes > 0) {
    if (absl::Status s = communicator.Broadcast(0, absl::MakeSpan(payload));
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("step payload: ", s.message()));
    }
  }
  if (root) return absl::OkStatus();
  absl::StatusOr<StepMessage> decoded = DecodeStepMessage(header, payload);
  if (!decoded.ok()) return decoded.status();
  *message = *std::move(decoded);
  return absl::OkStatus();
}

void RankStatsBoard::Publish(std::vector<RankStats> ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  ranks_ = std::move(ranks);
}

std::vector<RankStats> RankStatsBoard::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranks_;
}

absl::StatusOr<std::vector<RankStats>> GatherRankStats(
    parallel::Communicator& communicator, const RankStats& mine) {
  std::vector<RankStats> ranks(communicator.size());
  if (absl::Status s = communicator.AllGather(
          parallel::AsBytes(absl::MakeConstSpan(&mine, 1)),
          parallel::AsWritableBytes(ranks));
      !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("gathering the ranks' stats: ", s.message()));
  }
  return ranks;
}

BroadcastingStepRunner::BroadcastingStepRunner(
    StepRunner* inner, parallel::Communicator* communicator,
    RankStatsSource stats, RankStatsBoard* board)
    : inner_(*inner),
      communicator_(*communicator),
      stats_(std::move(stats)),
      board_(*board),
      heartbeat_(std::clamp(communicator->timeout() / 4, absl::Milliseconds(1),
                            absl::Seconds(1))),
      last_sent_(absl::Now()) {
  heartbeat_thread_ = std::thread([this] { Heartbeat(); });
}

BroadcastingStepRunner::~BroadcastingStepRunner() { Stop(); }

absl::Status BroadcastingStepRunner::FailLocked(const absl::Status& status) {
  failed_ = true;
  const absl::Status failure(
      status.code(),
      absl::StrCat("the expert-parallel job failed: ", status.message()));
  std::fprintf(stderr, "ringmoe: %s\n", failure.ToString().c_str());
  std::lock_guard<std::mutex> lock(failure_mu_);
  failure_ = failure;
  return failure;
}

absl::Status BroadcastingStepRunner::failure() const {
  std::lock_guard<std::mutex> lock(failure_mu_);
  return failure_;
}

absl::Status BroadcastingStepRunner::SendLocked(StepMessage* message) {
  if (absl::Status s = BroadcastStepMessage(communicator_, message); !s.ok()) {
    return FailLocked(absl::Status(
        s.code(), absl::StrCat("rank 0 could not send the next step to the "
                               "other ranks: ",
                               s.message())));
  }
  last_sent_ = absl::Now();
  return absl::OkStatus();
}

bool BroadcastingStepRunner::StatsDueLocked() const {
  return steps_since_stats_ && absl::Now() - last_stats_ >= heartbeat_;
}

absl::Status BroadcastingStepRunner::GatherStatsLocked() {
  StepMessage message;
  message.kind = StepKind::kStats;
  message.releases.swap(pending_releases_);
  RETURN_IF_ERROR(SendLocked(&message));
  RankStats mine = stats_();
  mine.steps = steps_;
  absl::StatusOr<std::vector<RankStats>> ranks =
      GatherRankStats(communicator_, mine);
  if (!ranks.ok()) {
    return FailLocked(
        absl::Status(ranks.status().code(),
                     absl::StrCat("rank 0: ", ranks.status().message())));
  }
  board_.Publish(*std::move(ranks));
  last_stats_ = absl::Now();
  steps_since_stats_ = false;
  return absl::OkStatus();
}

void BroadcastingStepRunner::Release(runtime::SequenceId id) {
  inner_.Release(id);
  std::lock_guard<std::mutex> lock(mu_);
  pending_releases_.push_back(id);
}

absl::Status BroadcastingStepRunner::Step(
    absl::Span<const runtime::SequenceChunk> chunks, std::vector<float>* logits,
    std::vector<int32_t>* greedy_tokens) {
  // One lock over the message and the step: a heartbeat between them would
  // put a Broadcast on rank 0 where the followers run the step's
  // collectives.
  std::lock_guard<std::mutex> lock(mu_);
  if (failed_) {
    return absl::FailedPreconditionError(failure().message());
  }
  if (stopped_) {
    return absl::FailedPreconditionError("the expert-parallel job was stopped");
  }
  if (StatsDueLocked()) RETURN_IF_ERROR(GatherStatsLocked());
  StepMessage message;
  message.kind = StepKind::kStep;
  message.releases.swap(pending_releases_);
  message.chunks.reserve(chunks.size());
  for (const runtime::SequenceChunk& c : chunks) {
    message.chunks.push_back(
        {c.sequence, std::vector<int32_t>(c.tokens.begin(), c.tokens.end()),
         c.all_logits, c.home, c.greedy_token});
  }
  RETURN_IF_ERROR(SendLocked(&message));
  absl::Status step = inner_.Step(chunks, logits, greedy_tokens);
  last_sent_ = absl::Now();
  ++steps_;
  steps_since_stats_ = true;
  if (!step.ok()) {
    // The other ranks may be inside a collective this rank left: the job
    // cannot go on.
    return FailLocked(absl::Status(
        step.code(),
        absl::StrCat("rank 0's engine step failed: ", step.message())));
  }
  return step;
}

void BroadcastingStepRunner::Heartbeat() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopped_ && !failed_) {
    if (StatsDueLocked()) {
      GatherStatsLocked().IgnoreError();  // failed_ ends the loop
      continue;
    }
    const absl::Time due = std::min(
        last_sent_ + heartbeat_,
        steps_since_stats_ ? last_stats_ + heartbeat_ : absl::InfiniteFuture());
    const absl::Time now = absl::Now();
    if (now < due) {
      wake_.wait_for(lock, absl::ToChronoMilliseconds(due - now) +
                               std::chrono::milliseconds(1));
      continue;
    }
    StepMessage idle;
    idle.kind = StepKind::kIdle;
    idle.releases.swap(pending_releases_);
    SendLocked(&idle).IgnoreError();  // failed_ ends the loop
  }
}

void BroadcastingStepRunner::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_ && !failed_) {
      StepMessage stop;
      stop.kind = StepKind::kStop;
      SendLocked(&stop).IgnoreError();  // failure() has it
    }
    stopped_ = true;
  }
  wake_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

absl::Status RunStepFollower(parallel::Communicator& communicator,
                             StepRunner& runner, const RankStatsSource& stats) {
  std::vector<float> logits;
  std::vector<int32_t> greedy_tokens;
  uint64_t steps = 0;
  while (true) {
    StepMessage message;
    if (absl::Status s = BroadcastStepMessage(communicator, &message);
        !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat("rank ", communicator.rank(),
                                 " waiting for the next step: ", s.message()));
    }
    if (message.kind == StepKind::kStop) return absl::OkStatus();
    for (runtime::SequenceId id : message.releases) runner.Release(id);
    if (message.kind == StepKind::kStats) {
      RankStats mine = stats();
      mine.steps = steps;
      absl::StatusOr<std::vector<RankStats>> gathered =
          GatherRankStats(communicator, mine);
      if (!gathered.ok()) {
        return absl::Status(gathered.status().code(),
                            absl::StrCat("rank ", communicator.rank(), ": ",
                                         gathered.status().message()));
      }
      continue;
    }
    if (message.kind != StepKind::kStep) continue;
    const std::vector<runtime::SequenceChunk> chunks = message.EngineChunks();
    if (absl::Status s = runner.Step(chunks, &logits, &greedy_tokens);
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("rank ", communicator.rank(),
                                       "'s engine step failed: ", s.message()));
    }
    ++steps;
  }
}

}  // namespace ringmoe::serving

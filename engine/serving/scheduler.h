// The continuous-batching scheduler: one engine thread runs Engine::Step in
// a loop; requests join the running batch between steps and leave it as soon
// as they finish, are cancelled or pass their deadline.
//
// Each step is built from
//   1. one decode token for every running sequence that has finished its
//      prompt (so streams keep flowing while long prompts are prefilled),
//   2. prompt chunks of sequences still prefilling, within the step's token
//      budget (max_batch_tokens),
//   3. new requests from the queue, admitted while there are sequence slots
//      and free KV-cache blocks for their whole prompt (the most its prefill
//      holds at once: sliding-window layers give blocks back as it goes).
// When a step of several sequences fails, its sequences are recomputed one
// at a time until each has produced a token again: a failure (a checkpoint
// part that no longer reads, say) fails only the sequences whose step fails
// alone, and the others go on.
//
// When a running sequence needs a KV block and none is free, the most
// recently admitted sequence is preempted: its blocks are released and it
// goes back to the front of the queue, to be recomputed (prompt plus the
// tokens generated so far) when blocks free up. Its sampler keeps its state,
// so a preempted sequence produces the same tokens as one that was not.
//
// Each iteration plans a step (Plan), has the StepRunner run it, and applies
// its outputs (Apply: sampling, stop criteria, detokenizing, delivery); it
// never runs the model itself, so it runs on any StepRunner, a test's
// included. Knows nothing of gRPC or HTTP: requests come in as Request,
// results go out through the request's callback, which runs on the engine
// thread and must not block.
#ifndef RINGMOE_ENGINE_SERVING_SCHEDULER_H_
#define RINGMOE_ENGINE_SERVING_SCHEDULER_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/sampler.h"
#include "engine/serving/serving_metrics.h"
#include "engine/serving/step_runner.h"

namespace ringmoe::serving {

struct SchedulerOptions {
  // Requests accepted but not yet running; one more is RESOURCE_EXHAUSTED.
  int max_queue = 256;
  // Sequences in the running batch at once.
  int max_running_sequences = 64;
  // Tokens (decode tokens plus prompt chunks) per engine step; a prompt
  // longer than this is prefilled over several steps.
  int max_batch_tokens = 512;
  // Request limits; 0 = the model's context length.
  int max_prompt_tokens = 0;
  int max_new_tokens = 0;
  // Applied when a request does not say max_tokens, cut to what the context
  // leaves after the prompt.
  int default_max_tokens = 256;
  // healthy() turns false after this many engine steps in a row failed, and
  // true again at the next step that succeeds.
  int unhealthy_after_failed_steps = 3;
};

// Why a request ended.
enum class FinishReason { kStop, kLength, kCancelled, kError };

// A token and its log-probability under the model's distribution.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

// Output of one step for one request; delivered in order on the engine
// thread. The last one has `finished` set.
struct RequestOutput {
  std::vector<int32_t> token_ids;  // tokens generated this step
  std::string text;                // text that became final
  std::vector<float> logprobs;     // per token, when asked for
  // Per token, when asked for: the most likely tokens at that position,
  // most likely first (ties: lower id first).
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  // Logits-only requests: the last prompt position's logits (vocab floats).
  std::vector<float> logits;

  bool finished = false;
  FinishReason finish_reason = FinishReason::kStop;
  // Set when an EOS or stop token ended the sequence: the last of
  // token_ids, which has no text.
  bool ended_by_stop_token = false;
  // OK for kStop/kLength/logits; CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE
  // (shutdown) for kCancelled; the engine's error for kError.
  absl::Status status;
  int prompt_tokens = 0;
  int completion_tokens = 0;
};

using OutputCallback = std::function<void(RequestOutput)>;

struct Request {
  std::string id;  // for error messages and logs
  std::vector<int32_t> prompt_ids;
  // New tokens at most; must be positive. Unset: default_max_tokens, cut
  // to the context left after the prompt. Overrides
  // sampling.max_new_tokens.
  std::optional<int32_t> max_tokens;
  runtime::SamplingParams sampling;
  bool logprobs = false;
  // With logprobs: this many alternatives per generated token.
  int top_logprobs = 0;
  // Keep special tokens in the text (formats that mark tool calls or
  // channels with them); they are left out by default.
  bool keep_special_tokens = false;
  // Prefill only and return the last position's logits (KServe input_ids).
  bool logits_only = false;
  absl::Time deadline = absl::InfiniteFuture();
  OutputCallback on_output;
};

// Lets the front end cancel a submitted request (client gone). Cheap and
// thread-safe; the scheduler notices before its next step.
class RequestHandle {
 public:
  void Cancel() { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

 private:
  std::atomic<bool> cancelled_{false};
};

class Scheduler {
 public:
  // Starts the engine thread. `runner` and `metrics` (may be null) must
  // outlive the scheduler.
  Scheduler(StepRunner* runner, const SchedulerOptions& options,
            ServingMetrics* metrics);
  // On the engine (through an EngineStepRunner of its own).
  Scheduler(runtime::Engine* engine, const SchedulerOptions& options,
            ServingMetrics* metrics);
  // Cancels whatever is left (status UNAVAILABLE) and joins the thread.
  ~Scheduler();

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Validates `request` against the model and the limits (INVALID_ARGUMENT
  // naming the field), then queues it (RESOURCE_EXHAUSTED when the queue is
  // full, UNAVAILABLE after StopAccepting). On success every later result,
  // including errors, comes through request.on_output, possibly before
  // Submit returns.
  absl::StatusOr<std::shared_ptr<RequestHandle>> Submit(Request request);

  // The effective limits (0s in the options resolved against the model).
  int max_prompt_tokens() const { return max_prompt_tokens_; }
  int max_new_tokens() const { return max_new_tokens_; }
  int context_tokens() const { return context_tokens_; }
  // The KV cache's shape, fixed at load (the cache itself belongs to the
  // engine thread): positions per block, and blocks, each of one layer.
  int64_t kv_block_size() const { return kv_block_size_; }
  int64_t kv_blocks() const { return kv_blocks_; }

  // Shutdown, in order: refuse new requests; wait until the accepted ones
  // finish (true) or `timeout` passes (false); cancel the rest.
  void StopAccepting();
  bool WaitUntilIdle(absl::Duration timeout);
  void CancelAll();

  // Requests queued or running.
  int64_t num_active() const;
  // False once StopAccepting() or CancelAll() ran.
  bool accepting() const;
  // False while the last unhealthy_after_failed_steps engine steps failed:
  // the instance cannot serve, and health checks should say so.
  bool healthy() const {
    return failed_steps_in_a_row_.load(std::memory_order_relaxed) <
           options_.unhealthy_after_failed_steps;
  }
  // Accepting and healthy: what readiness probes report.
  bool ready() const { return accepting() && healthy(); }

 private:
  struct Sequence;

  Scheduler(std::unique_ptr<StepRunner> owned, StepRunner* runner,
            const SchedulerOptions& options, ServingMetrics* metrics);

  // One step's work: the sequences in it, in row order, each with its
  // `planned` tokens, and their chunks.
  struct StepPlan {
    std::vector<Sequence*> sequences;
    std::vector<runtime::SequenceChunk> chunks;
    int64_t tokens = 0;
  };

  void Loop();
  // One iteration: Plan, run, Apply; false when nothing ran.
  bool Iterate();
  // Drops finished and cancelled sequences, then picks the step's work:
  // decode tokens, prompt chunks, new admissions, preempting when blocks
  // run out. Empty when nothing can run.
  StepPlan Plan();
  // After a failed step of several sequences: the next step of one of them,
  // alone; empty when none is waiting for it (or blocks are short).
  StepPlan PlanIsolated();
  // Applies the step's outcome to its sequences: on success each sequence
  // that finished its chunk samples a token and delivers it; a failure goes
  // to ApplyFailure.
  void Apply(const StepPlan& plan, const absl::Status& step, absl::Time end);
  // A failed step: fails its one sequence, or sends its sequences to be
  // recomputed one at a time.
  void ApplyFailure(const StepPlan& plan, const absl::Status& step);
  void DropFinishedOrCancelled(absl::Time now);
  void Preempt(Sequence* seq);
  void Finish(Sequence* seq, FinishReason reason, absl::Status status,
              RequestOutput out);
  void UpdateGauges();
  // Free blocks of each KV cache (StepRunner::kv_cache_of), and the cache
  // with the most (ties: the lowest): where a sequence is admitted.
  std::vector<int64_t> FreeBlocks() const;
  static int MostFree(const std::vector<int64_t>& free_blocks);
  // The chunk of `s`'s planned tokens; with several KV caches it names the
  // one holding `s` (SequenceChunk::home).
  runtime::SequenceChunk ChunkOf(const Sequence& s) const;

  std::unique_ptr<StepRunner> owned_runner_;  // the engine's, when given one
  StepRunner* const runner_;
  const SchedulerOptions options_;
  ServingMetrics* const metrics_;
  int context_tokens_ = 0;
  int max_prompt_tokens_ = 0;
  int max_new_tokens_ = 0;
  // Tokens per engine step: the most positions one Grow adds.
  int64_t max_step_tokens_ = 0;
  int64_t kv_block_size_ = 0;
  int64_t kv_blocks_ = 0;

  // std::mutex rather than absl::Mutex: Debian's Abseil is not built for
  // ThreadSanitizer, which then cannot see absl::Mutex's ordering (the
  // scheduler runs under TSan in tools/test.sh).
  mutable std::mutex mu_;
  std::condition_variable work_;     // a request came, or stop_
  std::condition_variable changed_;  // the queue or the running set changed
  // Guarded by mu_:
  std::deque<std::unique_ptr<Sequence>> waiting_;
  int64_t num_running_ = 0;
  bool accepting_ = true;
  bool cancel_all_ = false;
  bool stop_ = false;
  runtime::SequenceId next_sequence_id_ = 1;

  // Engine thread only.
  std::vector<std::unique_ptr<Sequence>> running_;  // in admission order
  std::vector<float> logits_;
  std::vector<int32_t> greedy_tokens_;
  std::atomic<int> failed_steps_in_a_row_{0};
  // Sequences waiting to be recomputed alone (Sequence::suspect).
  int num_suspects_ = 0;

  std::thread thread_;
};

}  // namespace ringmoe::serving

#endif  // RINGMOE_ENGINE_SERVING_SCHEDULER_H_

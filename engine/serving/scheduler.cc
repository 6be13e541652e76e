#include "engine/serving/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/runtime/stop_criteria.h"
#include "engine/tokenizer/stream_decoder.h"

namespace ringmoe::serving {

struct Scheduler::Sequence {
  Request request;
  std::shared_ptr<RequestHandle> handle;
  runtime::SequenceId id = 0;
  // Prompt followed by the generated tokens; positions [0, computed) are in
  // the KV cache. The next step feeds tokens[computed, ...).
  std::vector<int32_t> tokens;
  int64_t prompt_len = 0;
  int64_t computed = 0;
  std::optional<runtime::Sampler> sampler;
  std::unique_ptr<runtime::StopCriteria> stop;
  std::unique_ptr<tokenizer::StreamDecoder> decoder;
  absl::Time arrival;
  absl::Time last_token;
  bool admitted_once = false;
  // The KV cache holding it (StepRunner::kv_cache_of), chosen at each
  // admission: one per rank under data-parallel attention, else 0.
  int cache = 0;
  // Was in a failed step with other sequences: runs alone until it samples
  // a token again.
  bool suspect = false;
  // Set during one iteration.
  int64_t planned = 0;
  bool preempted = false;
  bool done = false;

  int64_t remaining() const {
    return static_cast<int64_t>(tokens.size()) - computed;
  }
  int64_t generated() const {
    return static_cast<int64_t>(tokens.size()) - prompt_len;
  }
  absl::Span<const int32_t> prompt() const {
    return absl::MakeConstSpan(tokens).subspan(0, prompt_len);
  }
  absl::Span<const int32_t> generated_ids() const {
    return absl::MakeConstSpan(tokens).subspan(prompt_len);
  }
};

namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// The `n` largest entries of log_softmax(logits), as the model produced
// them (before penalties and temperature, like SampledLogprobs::raw).
std::vector<TokenLogprob> TopLogprobs(absl::Span<const float> logits, int n) {
  float max = -std::numeric_limits<float>::infinity();
  for (float x : logits) max = std::max(max, x);
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max);
  const float log_sum = max + static_cast<float>(std::log(sum));
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = std::min(ids.size(), static_cast<size_t>(n));
  // NaN ranks last, so the order stays strict.
  auto value = [&](int32_t id) {
    return std::isnan(logits[id]) ? -std::numeric_limits<float>::infinity()
                                  : logits[id];
  };
  std::partial_sort(
      ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
        return value(a) > value(b) || (value(a) == value(b) && a < b);
      });
  std::vector<TokenLogprob> top(k);
  for (size_t i = 0; i < k; ++i) top[i] = {ids[i], value(ids[i]) - log_sum};
  return top;
}

}  // namespace

Scheduler::Scheduler(runtime::Engine* engine, const SchedulerOptions& options,
                     ServingMetrics* metrics)
    : Scheduler(std::make_unique<EngineStepRunner>(engine), nullptr, options,
                metrics) {}

Scheduler::Scheduler(StepRunner* runner, const SchedulerOptions& options,
                     ServingMetrics* metrics)
    : Scheduler(nullptr, runner, options, metrics) {}

Scheduler::Scheduler(std::unique_ptr<StepRunner> owned, StepRunner* runner,
                     const SchedulerOptions& options, ServingMetrics* metrics)
    : owned_runner_(std::move(owned)),
      runner_(runner != nullptr ? runner : owned_runner_.get()),
      options_(options),
      metrics_(metrics) {
  context_tokens_ = static_cast<int>(runner_->context_tokens());
  auto limit = [this](int requested) {
    const int most = std::max(1, context_tokens_ - 1);
    return requested > 0 ? std::min(requested, most) : most;
  };
  max_prompt_tokens_ = limit(options_.max_prompt_tokens);
  max_new_tokens_ = limit(options_.max_new_tokens);
  max_step_tokens_ = std::max(1, options_.max_batch_tokens);
  kv_block_size_ = runner_->kv_cache().block_size();
  kv_blocks_ = runner_->kv_cache().num_blocks();
  if (metrics_) {
    metrics_->SetKvCacheBlocks(0, runner_->num_kv_caches() * kv_blocks_);
    metrics_->SetQueueDepth(0);
    metrics_->SetRunningSequences(0);
  }
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() {
  CancelAll();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_.notify_all();
  thread_.join();
}

absl::StatusOr<std::shared_ptr<RequestHandle>> Scheduler::Submit(
    Request request) {
  const std::string who = absl::StrCat("request ", request.id, ": ");
  const int64_t prompt_len = static_cast<int64_t>(request.prompt_ids.size());
  if (!request.on_output) {
    return absl::InternalError(absl::StrCat(who, "no output callback"));
  }
  if (prompt_len == 0) {
    return absl::InvalidArgumentError(absl::StrCat(who, "the prompt is empty"));
  }
  for (int64_t i = 0; i < prompt_len; ++i) {
    const int32_t id = request.prompt_ids[i];
    if (id < 0 || id >= runner_->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, "input_ids[", i, "] = ", id, " is outside the vocabulary [0, ",
          runner_->vocab_size(), ")"));
    }
  }
  if (prompt_len > max_prompt_tokens_) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "the prompt has ", prompt_len,
                     " tokens, more than the limit of ", max_prompt_tokens_));
  }
  int64_t max_tokens = 0;
  if (!request.logits_only) {
    if (request.max_tokens.has_value()) {
      max_tokens = *request.max_tokens;
      if (max_tokens <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(who, "max_tokens must be positive, got ", max_tokens));
      }
      if (max_tokens > max_new_tokens_) {
        return absl::InvalidArgumentError(
            absl::StrCat(who, "max_tokens ", max_tokens,
                         " is above the server's limit of ", max_new_tokens_));
      }
      if (prompt_len + max_tokens > context_tokens_) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, "the prompt (", prompt_len, " tokens) plus max_tokens (",
            max_tokens, ") exceeds the model's context of ", context_tokens_,
            " tokens"));
      }
    } else {
      max_tokens =
          std::min<int64_t>({options_.default_max_tokens, max_new_tokens_,
                             context_tokens_ - prompt_len});
    }
    if (!request.sampling.stop_strings.empty() &&
        runner_->tokenizer() == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, "stop strings need a tokenizer, and the model has none"));
    }
  }
  // Sliding-window layers give blocks back as the sequence grows, so what
  // it holds at most depends on the step size as well as on its length.
  const int64_t blocks = runner_->kv_cache().MaxBlocksHeld(
      prompt_len + max_tokens, max_step_tokens_);
  if (blocks > kv_blocks_) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "the prompt plus max_tokens needs ", blocks,
                     " KV-cache blocks and the cache has only ", kv_blocks_));
  }

  auto seq = std::make_unique<Sequence>();
  request.sampling.max_new_tokens =
      static_cast<int32_t>(std::max<int64_t>(1, max_tokens));
  auto sampler = runtime::Sampler::Create(
      request.sampling, static_cast<int>(runner_->vocab_size()));
  if (!sampler.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, sampler.status().message()));
  }
  seq->sampler.emplace(std::move(*sampler));
  seq->stop = std::make_unique<runtime::StopCriteria>(request.sampling,
                                                      runner_->eos_token_ids());
  if (runner_->tokenizer() != nullptr) {
    seq->decoder = std::make_unique<tokenizer::StreamDecoder>(
        *runner_->tokenizer(),
        /*skip_special_tokens=*/!request.keep_special_tokens);
  }
  seq->tokens = request.prompt_ids;
  seq->prompt_len = prompt_len;
  seq->arrival = absl::Now();
  seq->handle = std::make_shared<RequestHandle>();
  seq->request = std::move(request);
  std::shared_ptr<RequestHandle> handle = seq->handle;

  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) {
    return absl::UnavailableError(absl::StrCat(
        who, "the server is shutting down and takes no new requests"));
  }
  if (static_cast<int64_t>(waiting_.size()) >= options_.max_queue) {
    return absl::ResourceExhaustedError(
        absl::StrCat(who, "the request queue is full (", waiting_.size(),
                     " requests waiting); retry later"));
  }
  seq->id = next_sequence_id_++;
  waiting_.push_back(std::move(seq));
  if (metrics_) metrics_->SetQueueDepth(static_cast<int64_t>(waiting_.size()));
  work_.notify_one();
  return handle;
}

void Scheduler::StopAccepting() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
}

bool Scheduler::WaitUntilIdle(absl::Duration timeout) {
  auto idle = [this] { return waiting_.empty() && num_running_ == 0; };
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout == absl::InfiniteDuration()) {
    changed_.wait(lock, idle);
    return true;
  }
  return changed_.wait_for(lock, absl::ToChronoNanoseconds(timeout), idle);
}

void Scheduler::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
  cancel_all_ = true;
}

int64_t Scheduler::num_active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(waiting_.size()) + num_running_;
}

bool Scheduler::accepting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepting_;
}

void Scheduler::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [this] {
        return stop_ || !waiting_.empty() || !running_.empty();
      });
      if (stop_ && waiting_.empty() && running_.empty()) return;
    }
    if (!Iterate()) {
      // Nothing could run (every candidate waits for blocks that a
      // cancellation or deadline will free); don't spin.
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
}

void Scheduler::Finish(Sequence* seq, FinishReason reason, absl::Status status,
                       RequestOutput out) {
  if (seq->suspect) {
    seq->suspect = false;
    --num_suspects_;
  }
  runner_->Release(seq->id);
  seq->done = true;
  out.finished = true;
  out.finish_reason = reason;
  out.status = std::move(status);
  out.prompt_tokens = static_cast<int>(seq->prompt_len);
  out.completion_tokens = static_cast<int>(seq->generated());
  if (metrics_)
    metrics_->ObserveEndToEndLatency(Seconds(absl::Now() - seq->arrival));
  seq->request.on_output(std::move(out));
}

void Scheduler::DropFinishedOrCancelled(absl::Time now) {
  // Why a sequence must stop now, or OK to keep it.
  auto verdict = [now](const Sequence& s, bool cancel_all) {
    if (cancel_all) {
      return absl::UnavailableError(
          absl::StrCat("request ", s.request.id,
                       ": the server shut down before it finished"));
    }
    if (s.handle->cancelled()) {
      return absl::CancelledError(
          absl::StrCat("request ", s.request.id, ": cancelled"));
    }
    if (now >= s.request.deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("request ", s.request.id, ": deadline exceeded after ",
                       s.generated(), " generated tokens"));
    }
    return absl::OkStatus();
  };
  std::vector<std::pair<std::unique_ptr<Sequence>, absl::Status>> dropped;
  bool cancel_all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_all = cancel_all_;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      absl::Status why = verdict(**it, cancel_all);
      if (why.ok()) {
        ++it;
        continue;
      }
      dropped.emplace_back(std::move(*it), std::move(why));
      it = waiting_.erase(it);
    }
  }
  for (auto& [seq, why] : dropped)
    Finish(seq.get(), FinishReason::kCancelled, why, {});
  for (auto& seq : running_) {
    absl::Status why = verdict(*seq, cancel_all);
    if (!why.ok()) Finish(seq.get(), FinishReason::kCancelled, why, {});
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const auto& s) { return s->done; }),
                 running_.end());
}

void Scheduler::Preempt(Sequence* seq) {
  runner_->Release(seq->id);
  seq->computed = 0;
  seq->preempted = true;
  if (metrics_) metrics_->CountPreemption();
}

bool Scheduler::Iterate() {
  StepPlan plan = Plan();
  if (plan.sequences.empty()) {
    UpdateGauges();
    return false;
  }
  const absl::Time start = absl::Now();
  const absl::Status step =
      runner_->Step(plan.chunks, &logits_, &greedy_tokens_);
  const absl::Time end = absl::Now();
  if (metrics_) {
    metrics_->ObserveStep(static_cast<int64_t>(plan.sequences.size()),
                          plan.tokens, Seconds(end - start));
  }
  Apply(plan, step, end);
  UpdateGauges();
  return true;
}

std::vector<int64_t> Scheduler::FreeBlocks() const {
  std::vector<int64_t> free_blocks(runner_->num_kv_caches());
  for (size_t c = 0; c < free_blocks.size(); ++c) {
    free_blocks[c] =
        runner_->kv_cache_of(static_cast<int>(c)).num_free_blocks();
  }
  return free_blocks;
}

int Scheduler::MostFree(const std::vector<int64_t>& free_blocks) {
  return static_cast<int>(
      std::max_element(free_blocks.begin(), free_blocks.end()) -
      free_blocks.begin());
}

runtime::SequenceChunk Scheduler::ChunkOf(const Sequence& s) const {
  runtime::SequenceChunk chunk{
      s.id, absl::MakeConstSpan(s.tokens).subspan(s.computed, s.planned)};
  chunk.home = runner_->num_kv_caches() > 1 ? s.cache : -1;
  // Only the token reaches the host where no one reads the logits: a chunk
  // with more of the prompt after it, or greedy decoding without penalties
  // or log-probabilities.
  chunk.greedy_token = s.planned < s.remaining() ||
                       (!s.request.logits_only && !s.request.logprobs &&
                        s.sampler->SamplesGreedyToken());
  return chunk;
}

Scheduler::StepPlan Scheduler::PlanIsolated() {
  StepPlan step;
  if (num_suspects_ == 0) return step;  // the usual case: no search
  Sequence* s = nullptr;
  for (auto& owned : running_) {
    if (owned->suspect) s = owned.get();
  }
  if (s == nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(waiting_.begin(), waiting_.end(),
                           [](const auto& w) { return w->suspect; });
    if (it == waiting_.end()) return step;
    const std::vector<int64_t> free_blocks = FreeBlocks();
    const int cache = MostFree(free_blocks);
    if (runner_->kv_cache().MaxBlocksHeld(
            static_cast<int64_t>((*it)->tokens.size()), max_step_tokens_) >
        free_blocks[cache]) {
      return step;
    }
    s = it->get();
    s->cache = cache;
    running_.push_back(std::move(*it));
    waiting_.erase(it);
  }
  s->planned = std::min(s->remaining(), max_step_tokens_);
  step.chunks.push_back(ChunkOf(*s));
  step.tokens = s->planned;
  step.sequences.push_back(s);
  return step;
}

Scheduler::StepPlan Scheduler::Plan() {
  DropFinishedOrCancelled(absl::Now());
  if (StepPlan alone = PlanIsolated(); !alone.sequences.empty()) return alone;
  // Blocks are planned per KV cache: a sequence grows in its own, and a
  // victim frees blocks only in its own.
  std::vector<int64_t> free_blocks = FreeBlocks();
  auto kv = [this](const Sequence* s) -> runtime::KvCache& {
    return runner_->kv_cache_of(s->cache);
  };
  int64_t budget = max_step_tokens_;
  std::vector<Sequence*> plan;
  bool preempted_any = false;

  // Newest running sequence in `keep`'s cache that is neither planned nor
  // `keep`: the one to preempt when blocks run out (it has waited the
  // least).
  auto victim = [this](const Sequence* keep) -> Sequence* {
    for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
      Sequence* s = it->get();
      if (s != keep && s->cache == keep->cache && s->planned == 0 &&
          !s->preempted) {
        return s;
      }
    }
    return nullptr;
  };

  // 1. One decode token per sequence past its prompt, oldest first.
  for (auto& owned : running_) {
    Sequence* s = owned.get();
    if (s->preempted || s->remaining() != 1 || budget == 0) continue;
    int64_t& free = free_blocks[s->cache];
    const int64_t need = kv(s).BlocksNeeded(s->id, s->computed + 1);
    while (need > free) {
      Sequence* v = victim(s);
      if (v == nullptr) break;
      free += kv(v).BlocksHeld(v->id);
      Preempt(v);
      preempted_any = true;
    }
    if (need > free) {
      free += kv(s).BlocksHeld(s->id);
      Preempt(s);
      preempted_any = true;
      continue;
    }
    free -= need;
    s->planned = 1;
    budget -= 1;
    plan.push_back(s);
  }
  // 2. Prompt chunks of running sequences, oldest first, as far as the token
  // budget and the free blocks go.
  for (auto& owned : running_) {
    Sequence* s = owned.get();
    if (budget == 0) break;
    if (s->preempted || s->planned > 0 || s->remaining() <= 1) continue;
    const int64_t room =
        kv(s).GrowLimit(s->id, free_blocks[s->cache]) - s->computed;
    const int64_t n = std::min({s->remaining(), budget, room});
    if (n <= 0) continue;
    free_blocks[s->cache] -= kv(s).BlocksNeeded(s->id, s->computed + n);
    s->planned = n;
    budget -= n;
    plan.push_back(s);
  }
  // 3. New requests (preempted ones first), while there are slots, budget,
  // and blocks for the whole prompt, so an admitted prefill does not stall.
  // Not in an iteration that had to preempt: blocks are short already.
  std::vector<std::unique_ptr<Sequence>> preempted;
  for (auto& owned : running_) {
    if (owned->preempted) preempted.push_back(std::move(owned));
  }
  running_.erase(std::remove(running_.begin(), running_.end(), nullptr),
                 running_.end());
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = preempted.rbegin(); it != preempted.rend(); ++it) {
      (*it)->preempted = false;
      waiting_.push_front(std::move(*it));
    }
    while (!preempted_any && budget > 0 && !waiting_.empty() &&
           static_cast<int>(running_.size()) < options_.max_running_sequences) {
      Sequence* s = waiting_.front().get();
      s->cache = MostFree(free_blocks);
      if (kv(s).MaxBlocksHeld(static_cast<int64_t>(s->tokens.size()),
                              max_step_tokens_) > free_blocks[s->cache])
        break;
      const int64_t n = std::min(s->remaining(), budget);
      free_blocks[s->cache] -= kv(s).BlocksNeeded(s->id, n);
      s->planned = n;
      budget -= n;
      plan.push_back(s);
      if (!s->admitted_once) {
        s->admitted_once = true;
        if (metrics_) {
          metrics_->ObserveQueueTime(Seconds(absl::Now() - s->arrival));
          metrics_->AddPromptTokens(s->prompt_len);
        }
      }
      running_.push_back(std::move(waiting_.front()));
      waiting_.pop_front();
    }
  }
  if (plan.empty()) {
    // Every running sequence is stuck on blocks held by the others (their
    // prompts grew past what was free at admission): give the newest up so
    // the older ones can move.
    if (running_.size() > 1) {
      Preempt(running_.back().get());
      std::lock_guard<std::mutex> lock(mu_);
      running_.back()->preempted = false;
      waiting_.push_front(std::move(running_.back()));
      running_.pop_back();
    }
    return {};
  }

  StepPlan step;
  step.chunks.reserve(plan.size());
  for (Sequence* s : plan) {
    step.chunks.push_back(ChunkOf(*s));
    step.tokens += s->planned;
  }
  step.sequences = std::move(plan);
  return step;
}

void Scheduler::Apply(const StepPlan& plan, const absl::Status& step,
                      absl::Time end) {
  if (!step.ok()) {
    ApplyFailure(plan, step);
    return;
  }
  if (const int failed = failed_steps_in_a_row_.exchange(0); failed > 0) {
    std::fprintf(stderr,
                 "scheduler: engine steps succeed again after %d failed\n",
                 failed);
  }
  const int64_t vocab = runner_->vocab_size();
  // The step's outputs in chunk order: logits rows, and greedy tokens.
  size_t next_row = 0, next_greedy = 0;
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    Sequence* s = plan.sequences[i];
    const bool greedy = plan.chunks[i].greedy_token;
    const size_t row = greedy ? 0 : next_row++;
    const int32_t greedy_token = greedy ? greedy_tokens_[next_greedy++] : -1;
    const int64_t n = s->planned;
    s->planned = 0;
    s->computed += n;
    if (s->remaining() > 0) continue;  // more of the prompt to prefill
    RequestOutput out;
    absl::Span<const float> row_logits;
    if (!greedy) {
      row_logits = absl::MakeConstSpan(logits_).subspan(row * vocab, vocab);
    }
    if (s->request.logits_only) {
      out.logits.assign(row_logits.begin(), row_logits.end());
      Finish(s, FinishReason::kStop, absl::OkStatus(), std::move(out));
      continue;
    }
    runtime::SampledLogprobs logprobs;
    const int32_t token =
        greedy ? greedy_token
               : s->sampler->Sample(row_logits, s->prompt(), s->generated_ids(),
                                    s->request.logprobs ? &logprobs : nullptr);
    if (token < 0) {
      Finish(s, FinishReason::kError,
             absl::InternalError(
                 absl::StrCat("request ", s->request.id,
                              ": the model produced no usable logits")),
             {});
      continue;
    }
    s->tokens.push_back(token);
    if (s->suspect) {
      s->suspect = false;
      --num_suspects_;
    }
    const std::string piece = s->decoder ? s->decoder->Push(token) : "";
    absl::StatusOr<runtime::StopUpdate> update = s->stop->Update(token, piece);
    if (!update.ok()) {
      Finish(s, FinishReason::kError, update.status(), {});
      continue;
    }
    out.token_ids.push_back(token);
    out.text = std::move(update->text);
    if (s->request.logprobs) {
      out.logprobs.push_back(logprobs.raw);
      if (s->request.top_logprobs > 0) {
        out.top_logprobs.push_back(
            TopLogprobs(row_logits, s->request.top_logprobs));
      }
    }
    if (metrics_) {
      metrics_->AddGeneratedTokens(1);
      if (s->generated() == 1) {
        metrics_->ObserveTimeToFirstToken(Seconds(end - s->arrival));
      } else {
        metrics_->ObserveInterTokenLatency(Seconds(end - s->last_token));
      }
    }
    s->last_token = end;
    if (update->finish_reason == runtime::FinishReason::kNone) {
      s->request.on_output(std::move(out));
      continue;
    }
    // Bytes the decoder still holds (an unfinished UTF-8 sequence) end the
    // output, unless a stop string already cut it.
    if (!update->stop_string && s->decoder) out.text += s->decoder->Flush();
    out.ended_by_stop_token = update->stop_token_id.has_value();
    Finish(s,
           update->finish_reason == runtime::FinishReason::kLength
               ? FinishReason::kLength
               : FinishReason::kStop,
           absl::OkStatus(), std::move(out));
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const auto& s) { return s->done; }),
                 running_.end());
}

void Scheduler::ApplyFailure(const StepPlan& plan, const absl::Status& step) {
  const int failed = ++failed_steps_in_a_row_;
  // Every failure until the instance turns unhealthy, then now and then.
  if (failed <= options_.unhealthy_after_failed_steps || failed % 100 == 0) {
    std::fprintf(stderr,
                 "scheduler: an engine step of %zu sequences failed (%d in a "
                 "row): %s\n",
                 plan.sequences.size(), failed,
                 std::string(step.message()).c_str());
  }
  if (plan.sequences.size() == 1) {
    Sequence* s = plan.sequences[0];
    s->planned = 0;
    Finish(s, FinishReason::kError,
           absl::InternalError(
               absl::StrCat("request ", s->request.id,
                            ": engine step failed: ", step.message())),
           {});
  } else {
    // Which of them failed it is not known: each is recomputed alone
    // (PlanIsolated), in admission order, ahead of the queue.
    std::vector<std::unique_ptr<Sequence>> suspects;
    for (auto& owned : running_) {
      if (owned->planned == 0) continue;
      owned->planned = 0;
      runner_->Release(owned->id);
      owned->computed = 0;
      owned->suspect = true;
      ++num_suspects_;
      suspects.push_back(std::move(owned));
    }
    running_.erase(std::remove(running_.begin(), running_.end(), nullptr),
                   running_.end());
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = suspects.rbegin(); it != suspects.rend(); ++it) {
      waiting_.push_front(std::move(*it));
    }
  }
  running_.erase(std::remove_if(running_.begin(), running_.end(),
                                [](const auto& s) { return s->done; }),
                 running_.end());
}

void Scheduler::UpdateGauges() {
  std::lock_guard<std::mutex> lock(mu_);
  num_running_ = static_cast<int64_t>(running_.size());
  if (metrics_) {
    const std::vector<int64_t> free_blocks = FreeBlocks();
    const int64_t free =
        std::accumulate(free_blocks.begin(), free_blocks.end(), int64_t{0});
    const int64_t caches = static_cast<int64_t>(free_blocks.size());
    metrics_->SetQueueDepth(static_cast<int64_t>(waiting_.size()));
    metrics_->SetRunningSequences(num_running_);
    metrics_->SetKvCacheBlocks(caches * kv_blocks_ - free, caches * kv_blocks_);
  }
  changed_.notify_all();
}

}  // namespace ringmoe::serving

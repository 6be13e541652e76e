#include "server/kserve_service.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/kserve_tensors.h"
#include "server/stream_channel.h"

namespace ringmoe::server {
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;
using inference::ModelStreamInferResponse;

constexpr char kVersion[] = "1";

std::string NewInferId() {
  static std::atomic<uint64_t> next{1};
  return absl::StrCat("infer-", next.fetch_add(1));
}

absl::Status Invalid(const InferJob& job, absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("request ", job.id, ": ", message));
}

// Integer-valued setting: rejects fractions and values outside int32.
absl::StatusOr<int32_t> AsInt(const std::string& key, double v) {
  if (!std::isfinite(v) || v != std::floor(v) ||
      v < std::numeric_limits<int32_t>::min() ||
      v > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' must be an integer in int32 range, got ", v));
  }
  return static_cast<int32_t>(v);
}

bool IsSetting(const std::string& key) {
  static const auto* settings =
      new absl::flat_hash_set<std::string>{"max_tokens",
                                           "top_k",
                                           "seed",
                                           "temperature",
                                           "top_p",
                                           "min_p",
                                           "ignore_eos",
                                           "repetition_penalty",
                                           "stream",
                                           "presence_penalty",
                                           "frequency_penalty"};
  return settings->contains(key);
}

// Applies one generation setting by name; NOT_FOUND for names that are not
// settings (see IsSetting).
absl::Status ApplySetting(const std::string& key, double v, InferJob* job) {
  runtime::SamplingParams& p = job->generation.sampling;
  if (key == "max_tokens") {
    ASSIGN_OR_RETURN(job->generation.max_tokens, AsInt(key, v));
  } else if (key == "top_k") {
    ASSIGN_OR_RETURN(p.top_k, AsInt(key, v));
  } else if (key == "seed") {
    if (!(v >= 0) || v != std::floor(v) || v > 1.8e19) {
      return absl::InvalidArgumentError(
          absl::StrCat("'seed' must be a non-negative integer, got ", v));
    }
    p.seed = static_cast<uint64_t>(v);
  } else if (key == "temperature") {
    p.temperature = static_cast<float>(v);
  } else if (key == "top_p") {
    p.top_p = static_cast<float>(v);
  } else if (key == "min_p") {
    p.min_p = static_cast<float>(v);
  } else if (key == "repetition_penalty") {
    p.repetition_penalty = static_cast<float>(v);
  } else if (key == "presence_penalty") {
    p.presence_penalty = static_cast<float>(v);
  } else if (key == "frequency_penalty") {
    p.frequency_penalty = static_cast<float>(v);
  } else if (key == "ignore_eos") {
    p.ignore_eos = v != 0;
  } else if (key == "stream") {
    job->stream = v != 0;
  } else {
    return absl::NotFoundError(key);
  }
  return absl::OkStatus();
}

// vLLM backend style: {"temperature": 0, "max_tokens": 8, "stop": [...]}.
absl::Status ApplySamplingJson(const std::string& text, InferJob* job) {
  nlohmann::json j =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        "'sampling_parameters' must be a JSON object");
  }
  for (auto& [key, value] : j.items()) {
    if (key == "stop") {
      if (value.is_string()) {
        job->generation.sampling.stop_strings.push_back(
            value.get<std::string>());
        continue;
      }
      if (!value.is_array()) {
        return absl::InvalidArgumentError(
            "sampling_parameters 'stop' must be a string or a list of strings");
      }
      for (const auto& s : value) {
        if (!s.is_string()) {
          return absl::InvalidArgumentError(
              "sampling_parameters 'stop' must be a string or a list of "
              "strings");
        }
        job->generation.sampling.stop_strings.push_back(s.get<std::string>());
      }
      continue;
    }
    double v;
    if (value.is_boolean()) {
      v = value.get<bool>() ? 1 : 0;
    } else if (value.is_number()) {
      v = value.get<double>();
    } else if (value.is_string()) {
      // vLLM's backend accepts numbers written as strings ("0.7").
      char* end = nullptr;
      const std::string s = value.get<std::string>();
      v = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0') {
        return absl::InvalidArgumentError(absl::StrCat(
            "sampling_parameters '", key, "' is not a number: ", s));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "sampling_parameters '", key, "' must be a number or a bool"));
    }
    absl::Status s = ApplySetting(key, v, job);
    // Unknown vLLM options (n, best_of, ...) are not ours to reject loudly,
    // but silently ignoring them would change results: refuse.
    if (absl::IsNotFound(s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling_parameters '", key, "' is not supported"));
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

bool IsReservedParameter(const std::string& key) {
  static const auto* reserved = new absl::flat_hash_set<std::string>{
      "sequence_id", "sequence_start", "sequence_end",      "priority",
      "timeout",     "headers",        "binary_data_output"};
  return reserved->contains(key) || absl::StartsWith(key, "triton_");
}

}  // namespace

absl::StatusOr<InferJob> ParseInferRequest(const ServedModel& model,
                                           const ModelInferRequest& request,
                                           bool streaming_rpc) {
  InferJob job;
  job.id = request.id().empty() ? NewInferId() : request.id();
  job.raw = kserve::UsesRaw(request);
  job.streaming_rpc = streaming_rpc;
  job.stream = streaming_rpc;
  job.generation.id = job.id;
  absl::Status name = CheckModelName(model, request.model_name());
  if (!name.ok()) return Invalid(job, name.message());
  if (!request.model_version().empty() && request.model_version() != kVersion) {
    return Invalid(
        job, absl::StrCat("model '", model.name, "' has no version '",
                          request.model_version(), "' (only ", kVersion, ")"));
  }
  int ids_index = -1;
  int text_index = -1;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& input = request.inputs(i).name();
    if (input == "input_ids") {
      ids_index = i;
    } else if (input == "text_input") {
      text_index = i;
    }
  }
  if ((ids_index < 0) == (text_index < 0)) {
    return Invalid(
        job, "send exactly one of the inputs 'input_ids' and 'text_input'");
  }
  auto prefixed = [&job](const absl::Status& s) {
    return s.ok() ? s : Invalid(job, s.message());
  };

  if (ids_index >= 0) {
    job.logits = true;
    const auto& t = request.inputs(ids_index);
    if (t.shape_size() != 2 || t.shape(0) < 1 || t.shape(1) < 1) {
      return Invalid(
          job, absl::StrCat("input 'input_ids' must have shape [batch, seq] "
                            "with both at least 1, got [",
                            absl::StrJoin(t.shape(), ","), "]"));
    }
    absl::StatusOr<std::vector<int64_t>> ids =
        kserve::ReadIntegers(request, ids_index);
    if (!ids.ok()) return prefixed(ids.status());
    const int64_t batch = t.shape(0);
    const int64_t seq = t.shape(1);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<int32_t> row;
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t v = (*ids)[b * seq + i];
        if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
          return Invalid(job, absl::StrCat("input_ids[", b, "][", i, "] = ", v,
                                           " is outside the vocabulary"));
        }
        row.push_back(static_cast<int32_t>(v));
      }
      job.rows.push_back(std::move(row));
    }
    for (const auto& out : request.outputs()) {
      if (out.name() != "logits") {
        return Invalid(job, absl::StrCat("unknown output '", out.name(),
                                         "' for input_ids (only 'logits')"));
      }
    }
    for (int i = 0; i < request.inputs_size(); ++i) {
      if (i != ids_index) {
        return Invalid(
            job, absl::StrCat("unexpected input '", request.inputs(i).name(),
                              "' next to 'input_ids'"));
      }
    }
    job.outputs = {"logits"};
    return job;
  }

  // text_input: the prompt.
  {
    const auto& t = request.inputs(text_index);
    absl::StatusOr<std::vector<std::string>> text =
        kserve::ReadBytes(request, text_index);
    if (!text.ok()) return prefixed(text.status());
    if (text->size() != 1) {
      return Invalid(
          job, absl::StrCat("input 'text_input' must hold one string, got ",
                            text->size(), " (shape [",
                            absl::StrJoin(t.shape(), ","), "])"));
    }
    if ((*text)[0].empty()) return Invalid(job, "input 'text_input' is empty");
    const tokenizer::Tokenizer* tok = model.engine->tokenizer();
    if (tok == nullptr) {
      return Invalid(
          job, absl::StrCat("model '", model.name,
                            "' has no tokenizer; send input_ids instead"));
    }
    job.generation.prompt_ids =
        tok->Encode((*text)[0], /*add_special_tokens=*/true);
  }
  // Settings: the request's parameters, then input tensors.
  for (const auto& [key, param] : request.parameters()) {
    if (IsReservedParameter(key)) continue;
    if (key == "stop") {
      if (param.parameter_choice_case() !=
          inference::InferParameter::kStringParam) {
        return Invalid(job, "parameter 'stop' must be a string");
      }
      job.generation.sampling.stop_strings.push_back(param.string_param());
      continue;
    }
    // Clients attach parameters of their own; only settings are ours.
    if (!IsSetting(key)) continue;
    double v;
    if (param.parameter_choice_case() ==
        inference::InferParameter::kBoolParam) {
      v = param.bool_param() ? 1 : 0;
    } else {
      absl::StatusOr<std::optional<double>> n =
          kserve::NumberParameter(request.parameters(), key);
      if (!n.ok()) return prefixed(n.status());
      v = **n;
    }
    absl::Status applied = ApplySetting(key, v, &job);
    if (!applied.ok()) return prefixed(applied);
  }
  for (int i = 0; i < request.inputs_size(); ++i) {
    if (i == text_index) continue;
    const auto& t = request.inputs(i);
    if (t.name() == "sampling_parameters") {
      absl::StatusOr<std::vector<std::string>> json =
          kserve::ReadBytes(request, i);
      if (!json.ok()) return prefixed(json.status());
      if (json->size() != 1) {
        return Invalid(job,
                       "input 'sampling_parameters' must hold one JSON string");
      }
      absl::Status applied = ApplySamplingJson((*json)[0], &job);
      if (!applied.ok()) return prefixed(applied);
      continue;
    }
    if (t.name() == "stop_words" || t.name() == "stop") {
      absl::StatusOr<std::vector<std::string>> words =
          kserve::ReadBytes(request, i);
      if (!words.ok()) return prefixed(words.status());
      for (auto& w : *words)
        job.generation.sampling.stop_strings.push_back(std::move(w));
      continue;
    }
    if (t.name() == "exclude_input_in_output") continue;  // never included
    if (!IsSetting(t.name())) {
      return Invalid(job, absl::StrCat("unknown input '", t.name(), "'"));
    }
    absl::StatusOr<double> v = kserve::ReadScalar(request, i);
    if (!v.ok()) return prefixed(v.status());
    absl::Status applied = ApplySetting(t.name(), *v, &job);
    if (!applied.ok()) return prefixed(applied);
  }
  absl::StatusOr<std::optional<bool>> empty_final = kserve::BoolParameter(
      request.parameters(), "triton_enable_empty_final_response");
  if (!empty_final.ok()) return prefixed(empty_final.status());
  job.empty_final_response = empty_final->value_or(false);
  if (!streaming_rpc) job.stream = false;  // unary: the whole text at once

  static const auto* known = new absl::flat_hash_set<std::string>{
      "text_output", "finish_reason", "num_input_tokens", "num_output_tokens",
      "output_ids"};
  for (const auto& out : request.outputs()) {
    if (!known->contains(out.name())) {
      return Invalid(job, absl::StrCat("unknown output '", out.name(),
                                       "' for text_input"));
    }
    job.outputs.push_back(out.name());
  }
  if (job.outputs.empty()) job.outputs = {"text_output"};
  return job;
}

namespace {

// Runs one InferJob on the scheduler and hands its responses to `emit` on
// the engine thread: (response, final, status); a non-OK status comes with
// final = true and no response.
class InferRun : public std::enable_shared_from_this<InferRun> {
 public:
  using Emit = std::function<void(ModelInferResponse, bool, absl::Status)>;

  static absl::StatusOr<std::shared_ptr<InferRun>> Start(
      const ServedModel& model, InferJob job, absl::Time deadline, Emit emit) {
    std::shared_ptr<InferRun> run(
        new InferRun(model, std::move(job), std::move(emit)));
    absl::Status s = run->Submit(deadline);
    if (!s.ok()) {
      run->Cancel();
      return s;
    }
    return run;
  }

  void Cancel() {
    absl::MutexLock lock(&mu_);
    failed_ = true;
    for (auto& h : handles_) h->Cancel();
  }

 private:
  InferRun(const ServedModel& model, InferJob job, Emit emit)
      : model_(model), job_(std::move(job)), emit_(std::move(emit)) {}

  absl::Status Submit(absl::Time deadline) {
    std::shared_ptr<InferRun> self = shared_from_this();
    if (job_.logits) {
      rows_.resize(job_.rows.size());
      pending_ = static_cast<int>(job_.rows.size());
      for (size_t r = 0; r < job_.rows.size(); ++r) {
        Request request;
        request.id = job_.rows.size() == 1 ? job_.id
                                           : absl::StrCat(job_.id, "[", r, "]");
        request.prompt_ids = job_.rows[r];
        request.logits_only = true;
        request.deadline = deadline;
        request.on_output = [self, r](RequestOutput out) {
          self->OnLogits(r, std::move(out));
        };
        ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> h,
                         model_.scheduler->Submit(std::move(request)));
        absl::MutexLock lock(&mu_);
        handles_.push_back(std::move(h));
      }
      return absl::OkStatus();
    }
    Request request = job_.generation;
    request.deadline = deadline;
    request.on_output = [self](RequestOutput out) {
      self->OnText(std::move(out));
    };
    ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> h,
                     model_.scheduler->Submit(std::move(request)));
    absl::MutexLock lock(&mu_);
    handles_.push_back(std::move(h));
    return absl::OkStatus();
  }

  ModelInferResponse NewResponse() const {
    ModelInferResponse response;
    response.set_model_name(model_.name);
    response.set_model_version(kVersion);
    response.set_id(job_.id);
    return response;
  }

  void OnLogits(size_t row, RequestOutput out) {
    {
      absl::MutexLock lock(&mu_);
      if (failed_) return;
      if (!out.status.ok()) {
        failed_ = true;
        for (auto& h : handles_) h->Cancel();
      }
    }
    if (!out.status.ok()) {
      emit_({}, true, out.status);
      return;
    }
    rows_[row] = std::move(out.logits);
    if (--pending_ > 0) return;
    const int64_t vocab = model_.engine->spec().vocab_size;
    std::vector<float> all;
    all.reserve(rows_.size() * vocab);
    for (const auto& r : rows_) all.insert(all.end(), r.begin(), r.end());
    ModelInferResponse response = NewResponse();
    kserve::AddFp32Output(&response, "logits",
                          {static_cast<int64_t>(rows_.size()), vocab}, all,
                          job_.raw);
    MarkFinal(&response, true);
    emit_(std::move(response), true, absl::OkStatus());
  }

  void OnText(RequestOutput out) {
    ids_.insert(ids_.end(), out.token_ids.begin(), out.token_ids.end());
    text_ += out.text;
    if (!out.finished) {
      if (!job_.stream) return;
      ModelInferResponse delta = NewResponse();
      AddTextOutputs(&delta, out.text, out.token_ids, nullptr);
      MarkFinal(&delta, false);
      emit_(std::move(delta), false, absl::OkStatus());
      return;
    }
    if (!out.status.ok() || out.finish_reason == FinishReason::kError) {
      emit_({}, true,
            out.status.ok() ? absl::InternalError("generation failed")
                            : out.status);
      return;
    }
    ModelInferResponse last = NewResponse();
    if (job_.stream) {
      AddTextOutputs(&last, out.text, out.token_ids, &out);
    } else {
      AddTextOutputs(&last, text_, ids_, &out);
    }
    if (job_.stream && job_.empty_final_response) {
      MarkFinal(&last, false);
      emit_(std::move(last), false, absl::OkStatus());
      ModelInferResponse empty = NewResponse();
      MarkFinal(&empty, true);
      emit_(std::move(empty), true, absl::OkStatus());
      return;
    }
    MarkFinal(&last, true);
    emit_(std::move(last), true, absl::OkStatus());
  }

  // The requested outputs; finish details only with `finish` (the last
  // response).
  void AddTextOutputs(ModelInferResponse* response, const std::string& text,
                      const std::vector<int32_t>& ids,
                      const RequestOutput* finish) const {
    for (const std::string& name : job_.outputs) {
      if (name == "text_output") {
        kserve::AddBytesOutput(response, name, {1}, {text}, job_.raw);
      } else if (name == "output_ids") {
        kserve::AddInt32Output(
            response, name, {static_cast<int64_t>(ids.size())}, ids, job_.raw);
      } else if (finish != nullptr && name == "finish_reason") {
        const char* reason =
            finish->finish_reason == FinishReason::kLength ? "length" : "stop";
        kserve::AddBytesOutput(response, name, {1}, {reason}, job_.raw);
      } else if (finish != nullptr && name == "num_input_tokens") {
        const int32_t n = finish->prompt_tokens;
        kserve::AddInt32Output(response, name, {1}, absl::MakeConstSpan(&n, 1),
                               job_.raw);
      } else if (finish != nullptr && name == "num_output_tokens") {
        const int32_t n = finish->completion_tokens;
        kserve::AddInt32Output(response, name, {1}, absl::MakeConstSpan(&n, 1),
                               job_.raw);
      }
    }
  }

  // Triton's decoupled-stream marker, on streaming responses only.
  void MarkFinal(ModelInferResponse* response, bool final) const {
    if (!job_.streaming_rpc) return;
    (*response->mutable_parameters())["triton_final_response"].set_bool_param(
        final);
  }

  const ServedModel& model_;
  const InferJob job_;
  const Emit emit_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<RequestHandle>> handles_ ABSL_GUARDED_BY(mu_);
  bool failed_ ABSL_GUARDED_BY(mu_) = false;
  // Engine thread only.
  std::vector<std::vector<float>> rows_;
  int pending_ = 0;
  std::string text_;
  std::vector<int32_t> ids_;
};

class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  InferReactor(const ServedModel& model, grpc::CallbackServerContext* context,
               const ModelInferRequest& request, ModelInferResponse* response)
      : model_(model), context_(context), state_(std::make_shared<State>()) {
    state_->reactor = this;
    state_->response = response;
    absl::StatusOr<InferJob> job = ParseInferRequest(model_, request, false);
    if (!job.ok()) {
      Complete(state_, {}, job.status());
      return;
    }
    absl::StatusOr<std::shared_ptr<InferRun>> run = InferRun::Start(
        model_, *std::move(job), DeadlineOf(*context),
        [state = state_](ModelInferResponse r, bool final, absl::Status s) {
          if (final) Complete(state, std::move(r), std::move(s));
        });
    if (!run.ok()) {
      Complete(state_, {}, run.status());
      return;
    }
    run_ = *std::move(run);
  }

  void OnCancel() override {
    if (run_) run_->Cancel();
    Complete(state_, {}, absl::CancelledError("cancelled"));
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&state_->mu);
      state_->reactor = nullptr;
      if (model_.metrics) {
        model_.metrics->CountRequest(
            "ModelInfer", OutcomeCode(*context_, static_cast<grpc::StatusCode>(
                                                     state_->code)));
      }
    }
    delete this;
  }

 private:
  struct State {
    absl::Mutex mu;
    InferReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    ModelInferResponse* response ABSL_GUARDED_BY(mu) = nullptr;
    bool finished ABSL_GUARDED_BY(mu) = false;
    absl::StatusCode code ABSL_GUARDED_BY(mu) = absl::StatusCode::kOk;
  };

  static void Complete(const std::shared_ptr<State>& state,
                       ModelInferResponse response, absl::Status status) {
    absl::MutexLock lock(&state->mu);
    if (state->reactor == nullptr || state->finished) return;
    state->finished = true;
    state->code = status.code();
    if (status.ok()) *state->response = std::move(response);
    state->reactor->Finish(ToGrpcStatus(status));
  }

  const ServedModel& model_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<State> state_;
  std::shared_ptr<InferRun> run_;
};

using StreamReactorBase =
    grpc::ServerBidiReactor<ModelInferRequest, ModelStreamInferResponse>;
using StreamInferChannel =
    StreamChannel<StreamReactorBase, ModelStreamInferResponse>;

// Many requests per stream, each answered by one or more responses that
// carry its id; the stream ends when the client has half-closed and every
// request has sent its final response.
class StreamInferReactor final : public StreamReactorBase {
 public:
  StreamInferReactor(const ServedModel& model,
                     grpc::CallbackServerContext* context)
      : model_(model),
        context_(context),
        state_(std::make_shared<State>(this)) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      absl::MutexLock lock(&state_->mu);
      state_->reads_done = true;
      MaybeFinishLocked(*state_);
      return;
    }
    Handle(request_);
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) CancelRuns();
    state_->channel.OnWriteDone(ok);
  }

  void OnCancel() override {
    CancelRuns();
    state_->channel.Abort(
        grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    if (model_.metrics) {
      model_.metrics->CountRequest(
          "ModelStreamInfer",
          OutcomeCode(*context_, state_->channel.final_code()));
    }
    state_->channel.Detach();
    delete this;
  }

 private:
  struct State {
    explicit State(StreamReactorBase* reactor) : channel(reactor) {}
    StreamInferChannel channel;
    absl::Mutex mu;
    int active ABSL_GUARDED_BY(mu) = 0;
    bool reads_done ABSL_GUARDED_BY(mu) = false;
    std::vector<std::weak_ptr<InferRun>> runs ABSL_GUARDED_BY(mu);
  };

  static void MaybeFinishLocked(State& state)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
    if (state.reads_done && state.active == 0)
      state.channel.Finish(grpc::Status::OK);
  }

  static ModelStreamInferResponse ErrorResponse(const std::string& id,
                                                const absl::Status& status) {
    ModelStreamInferResponse response;
    response.set_error_message(std::string(status.message()));
    response.mutable_infer_response()->set_id(id);
    return response;
  }

  // Errors of one request are reported in the stream, which goes on.
  void Handle(const ModelInferRequest& request) {
    absl::StatusOr<InferJob> job = ParseInferRequest(model_, request, true);
    if (!job.ok()) {
      state_->channel.Push(ErrorResponse(request.id(), job.status()));
      return;
    }
    const std::string id = job->id;
    {
      absl::MutexLock lock(&state_->mu);
      ++state_->active;
    }
    absl::StatusOr<std::shared_ptr<InferRun>> run = InferRun::Start(
        model_, *std::move(job), DeadlineOf(*context_),
        [state = state_, id](ModelInferResponse r, bool final, absl::Status s) {
          if (s.ok()) {
            ModelStreamInferResponse response;
            *response.mutable_infer_response() = std::move(r);
            state->channel.Push(std::move(response));
          } else {
            state->channel.Push(ErrorResponse(id, s));
          }
          if (!final) return;
          absl::MutexLock lock(&state->mu);
          --state->active;
          MaybeFinishLocked(*state);
        });
    absl::MutexLock lock(&state_->mu);
    if (!run.ok()) {
      --state_->active;
      state_->channel.Push(ErrorResponse(id, run.status()));
      return;
    }
    state_->runs.push_back(*run);
  }

  void CancelRuns() {
    absl::MutexLock lock(&state_->mu);
    for (auto& weak : state_->runs) {
      if (auto run = weak.lock()) run->Cancel();
    }
  }

  const ServedModel& model_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<State> state_;
  ModelInferRequest request_;
};

}  // namespace

grpc::ServerUnaryReactor* KServeService::FinishUnary(
    grpc::CallbackServerContext* context, const char* method,
    const absl::Status& status) {
  if (model_.metrics) model_.metrics->CountRequest(method, status.code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

bool KServeService::ModelMatches(const std::string& name,
                                 const std::string& version) const {
  return name == model_.name && (version.empty() || version == kVersion);
}

grpc::ServerUnaryReactor* KServeService::ServerLive(
    grpc::CallbackServerContext* context, const inference::ServerLiveRequest*,
    inference::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishUnary(context, "ServerLive", absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest*,
    inference::ServerReadyResponse* response) {
  response->set_ready(model_.scheduler->accepting());
  return FinishUnary(context, "ServerReady", absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelReady(
    grpc::CallbackServerContext* context,
    const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  response->set_ready(ModelMatches(request->name(), request->version()) &&
                      model_.scheduler->accepting());
  return FinishUnary(context, "ModelReady", absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ServerMetadata(
    grpc::CallbackServerContext* context,
    const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  response->set_name("ringmoe");
  response->set_version(server_version_);
  return FinishUnary(context, "ServerMetadata", absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelMetadata(
    grpc::CallbackServerContext* context,
    const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  if (!ModelMatches(request->name(), request->version())) {
    return FinishUnary(context, "ModelMetadata",
                       absl::NotFoundError(absl::StrCat(
                           "unknown model '", request->name(), "' version '",
                           request->version(), "'; this server serves '",
                           model_.name, "' version ", kVersion)));
  }
  const int64_t vocab = model_.engine->spec().vocab_size;
  response->set_name(model_.name);
  response->add_versions(kVersion);
  response->set_platform("ringmoe");
  auto add = [](auto* list, const char* name, const char* type,
                std::vector<int64_t> shape) {
    auto* t = list->Add();
    t->set_name(name);
    t->set_datatype(type);
    t->mutable_shape()->Add(shape.begin(), shape.end());
  };
  add(response->mutable_inputs(), "input_ids", "INT64", {-1, -1});
  if (model_.engine->tokenizer() != nullptr) {
    add(response->mutable_inputs(), "text_input", "BYTES", {1});
    add(response->mutable_inputs(), "stream", "BOOL", {1});
    add(response->mutable_inputs(), "max_tokens", "INT32", {1});
    add(response->mutable_inputs(), "temperature", "FP32", {1});
    add(response->mutable_inputs(), "top_k", "INT32", {1});
    add(response->mutable_inputs(), "top_p", "FP32", {1});
    add(response->mutable_inputs(), "seed", "UINT64", {1});
    add(response->mutable_inputs(), "stop_words", "BYTES", {-1});
    add(response->mutable_inputs(), "sampling_parameters", "BYTES", {1});
  }
  add(response->mutable_outputs(), "logits", "FP32", {-1, vocab});
  if (model_.engine->tokenizer() != nullptr) {
    add(response->mutable_outputs(), "text_output", "BYTES", {1});
    add(response->mutable_outputs(), "output_ids", "INT32", {-1});
    add(response->mutable_outputs(), "finish_reason", "BYTES", {1});
    add(response->mutable_outputs(), "num_input_tokens", "INT32", {1});
    add(response->mutable_outputs(), "num_output_tokens", "INT32", {1});
  }
  return FinishUnary(context, "ModelMetadata", absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelInfer(
    grpc::CallbackServerContext* context, const ModelInferRequest* request,
    ModelInferResponse* response) {
  return new InferReactor(model_, context, *request, response);
}

grpc::ServerBidiReactor<ModelInferRequest, ModelStreamInferResponse>*
KServeService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new StreamInferReactor(model_, context);
}

}  // namespace ringmoe::server

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
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "grpcpp/support/proto_buffer_writer.h"
#include "nlohmann/json.hpp"
#include "server/kserve_tensors.h"
#include "server/stream_channel.h"

namespace ringmoe::server {

using serving::CheckModelName;
using serving::FinishReason;
using serving::Request;
using serving::RequestHandle;
using serving::RequestOutput;
using serving::ServedModel;
namespace {

using inference::ModelInferRequest;
using inference::ModelInferResponse;
using inference::ModelStreamInferResponse;

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
    response.set_model_version(kModelVersion);
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
    grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;
using StreamInferChannel = StreamChannel<StreamReactorBase, grpc::ByteBuffer>;

grpc::ByteBuffer Serialized(const ModelStreamInferResponse& response) {
  grpc::ByteBuffer buffer;
  bool own_buffer;
  // Serializing a message this process built cannot fail.
  grpc::SerializationTraits<ModelStreamInferResponse>::Serialize(
      response, &buffer, &own_buffer)
      .IgnoreError();
  return buffer;
}

// ringmoe_requests_total's method for one request inside a stream.
constexpr char kStreamRequest[] = "ModelStreamInfer.request";

// Many requests per stream, each answered by one or more responses that
// carry its id; the stream ends when the client has half-closed and every
// request has sent its final response.
class StreamInferReactor final : public StreamReactorBase {
 public:
  StreamInferReactor(const ServedModel& model,
                     grpc::CallbackServerContext* context)
      : model_(model),
        context_(context),
        state_(std::make_shared<State>(
            this, CountOutcome(model.metrics, context, "ModelStreamInfer"))) {
    StartRead(&read_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      absl::MutexLock lock(&state_->mu);
      state_->reads_done = true;
      MaybeFinishLocked(*state_);
      return;
    }
    ++messages_read_;
    ModelInferRequest request;
    const grpc::Status parsed =
        grpc::SerializationTraits<ModelInferRequest>::Deserialize(&read_,
                                                                  &request);
    if (parsed.ok()) {
      Handle(request);
    } else {
      Refuse("", absl::InvalidArgumentError(absl::StrCat(
                     "message ", messages_read_,
                     " of the stream is not a valid ModelInferRequest: bad "
                     "protobuf wire format, or a string field that is not "
                     "UTF-8")));
    }
    StartRead(&read_);
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
    state_->channel.Detach();
    delete this;
  }

 private:
  struct State {
    State(StreamReactorBase* reactor, StreamInferChannel::FinishFn on_finish)
        : channel(reactor, nullptr, std::move(on_finish)) {}
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
  // Each request's outcome counts in ringmoe_requests_total under
  // kStreamRequest, next to the stream's own under ModelStreamInfer.
  void Handle(const ModelInferRequest& request) {
    absl::StatusOr<InferJob> job = ParseInferRequest(model_, request, true);
    if (!job.ok()) {
      Refuse(request.id(), job.status());
      return;
    }
    const std::string id = job->id;
    {
      absl::MutexLock lock(&state_->mu);
      ++state_->active;
    }
    absl::StatusOr<std::shared_ptr<InferRun>> run = InferRun::Start(
        model_, *std::move(job), DeadlineOf(*context_),
        [state = state_, id, metrics = model_.metrics](
            ModelInferResponse r, bool final, absl::Status s) {
          bool open;
          if (s.ok()) {
            ModelStreamInferResponse response;
            *response.mutable_infer_response() = std::move(r);
            open = state->channel.Push(Serialized(response));
          } else {
            open = state->channel.Push(Serialized(ErrorResponse(id, s)));
          }
          // The stream ended (the client stopped reading or
          // left): the stream's other requests stop too.
          if (!open) CancelRunsOf(*state);
          if (!final) return;
          if (metrics) metrics->CountRequest(kStreamRequest, s.code());
          absl::MutexLock lock(&state->mu);
          --state->active;
          MaybeFinishLocked(*state);
        });
    if (!run.ok()) {
      {
        absl::MutexLock lock(&state_->mu);
        --state_->active;
      }
      Refuse(id, run.status());
      return;
    }
    absl::MutexLock lock(&state_->mu);
    state_->runs.push_back(*run);
  }

  void Refuse(const std::string& id, const absl::Status& status) {
    if (model_.metrics)
      model_.metrics->CountRequest(kStreamRequest, status.code());
    if (!state_->channel.Push(Serialized(ErrorResponse(id, status)))) {
      CancelRuns();
    }
  }

  static void CancelRunsOf(State& state) {
    absl::MutexLock lock(&state.mu);
    for (auto& weak : state.runs) {
      if (auto run = weak.lock()) run->Cancel();
    }
  }
  void CancelRuns() { CancelRunsOf(*state_); }

  const ServedModel& model_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<State> state_;
  grpc::ByteBuffer read_;
  int64_t messages_read_ = 0;
};

}  // namespace

bool KServeService::ModelMatches(const std::string& name,
                                 const std::string& version) const {
  return name == model_.name && (version.empty() || version == kModelVersion);
}

grpc::ServerUnaryReactor* KServeService::ServerLive(
    grpc::CallbackServerContext* context, const inference::ServerLiveRequest*,
    inference::ServerLiveResponse* response) {
  response->set_live(true);
  return FinishUnary(context, model_.metrics, "ServerLive", absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ServerReady(
    grpc::CallbackServerContext* context, const inference::ServerReadyRequest*,
    inference::ServerReadyResponse* response) {
  response->set_ready(model_.scheduler->ready());
  return FinishUnary(context, model_.metrics, "ServerReady", absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelReady(
    grpc::CallbackServerContext* context,
    const inference::ModelReadyRequest* request,
    inference::ModelReadyResponse* response) {
  response->set_ready(ModelMatches(request->name(), request->version()) &&
                      model_.scheduler->ready());
  return FinishUnary(context, model_.metrics, "ModelReady", absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ServerMetadata(
    grpc::CallbackServerContext* context,
    const inference::ServerMetadataRequest*,
    inference::ServerMetadataResponse* response) {
  response->set_name("ringmoe");
  response->set_version(server_version_);
  return FinishUnary(context, model_.metrics, "ServerMetadata",
                     absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelMetadata(
    grpc::CallbackServerContext* context,
    const inference::ModelMetadataRequest* request,
    inference::ModelMetadataResponse* response) {
  if (!ModelMatches(request->name(), request->version())) {
    return FinishUnary(context, model_.metrics, "ModelMetadata",
                       absl::NotFoundError(absl::StrCat(
                           "unknown model '", request->name(), "' version '",
                           request->version(), "'; this server serves '",
                           model_.name, "' version ", kModelVersion)));
  }
  const int64_t vocab = model_.engine->spec().vocab_size;
  response->set_name(model_.name);
  response->add_versions(kModelVersion);
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
  return FinishUnary(context, model_.metrics, "ModelMetadata",
                     absl::OkStatus());
}

grpc::ServerUnaryReactor* KServeService::ModelInfer(
    grpc::CallbackServerContext* context, const ModelInferRequest* request,
    ModelInferResponse* response) {
  return new InferReactor(model_, context, *request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
KServeService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  return new StreamInferReactor(model_, context);
}

}  // namespace ringmoe::server

#include "server/generation_service.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/stream_channel.h"

namespace ringmoe::server {
namespace {

using Channel = StreamChannel<grpc::ServerWriteReactor<v1::GenerateResponse>,
                              v1::GenerateResponse>;

std::string NewRequestId() {
  static std::atomic<uint64_t> next{1};
  return absl::StrCat("gen-", next.fetch_add(1));
}

v1::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return v1::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return v1::FINISH_REASON_LENGTH;
    case FinishReason::kCancelled:
      return v1::FINISH_REASON_CANCELLED;
    case FinishReason::kError:
      return v1::FINISH_REASON_ERROR;
  }
  return v1::FINISH_REASON_ERROR;
}

// A slow reader gets fewer, larger messages instead of an ever longer queue.
bool MergeDeltas(v1::GenerateResponse& last, const v1::GenerateResponse& next) {
  last.mutable_text()->append(next.text());
  last.mutable_token_ids()->MergeFrom(next.token_ids());
  last.mutable_logprobs()->MergeFrom(next.logprobs());
  if (next.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    last.set_finish_reason(next.finish_reason());
    *last.mutable_usage() = next.usage();
    last.set_error_message(next.error_message());
  }
  return true;
}

class GenerateReactor final
    : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  GenerateReactor(const ServedModel& model,
                  grpc::CallbackServerContext* context,
                  const v1::GenerateRequest& proto)
      : model_(model),
        context_(context),
        channel_(std::make_shared<Channel>(this, MergeDeltas)) {
    absl::StatusOr<Request> request = RequestFromProto(model_, proto);
    if (!request.ok()) {
      channel_->Finish(ToGrpcStatus(request.status()));
      return;
    }
    request->deadline = DeadlineOf(*context);
    request->on_output = [channel = channel_,
                          id = request->id](RequestOutput out) {
      v1::GenerateResponse response;
      response.set_request_id(id);
      response.set_text(std::move(out.text));
      response.mutable_token_ids()->Add(out.token_ids.begin(),
                                        out.token_ids.end());
      response.mutable_logprobs()->Add(out.logprobs.begin(),
                                       out.logprobs.end());
      if (!out.finished) {
        channel->Push(std::move(response));
        return;
      }
      response.set_finish_reason(ToProto(out.finish_reason));
      response.mutable_usage()->set_prompt_tokens(out.prompt_tokens);
      response.mutable_usage()->set_completion_tokens(out.completion_tokens);
      if (!out.status.ok())
        response.set_error_message(std::string(out.status.message()));
      channel->Push(std::move(response));
      channel->Finish(ToGrpcStatus(out.status));
    };
    absl::StatusOr<std::shared_ptr<RequestHandle>> handle =
        model_.scheduler->Submit(*std::move(request));
    if (!handle.ok()) {
      channel_->Finish(ToGrpcStatus(handle.status()));
      return;
    }
    handle_ = *std::move(handle);
  }

  void OnWriteDone(bool ok) override {
    if (!ok && handle_) handle_->Cancel();
    channel_->OnWriteDone(ok);
  }

  // The client went away or the deadline passed: free the sequence's KV
  // blocks at the scheduler's next step.
  void OnCancel() override {
    if (handle_) handle_->Cancel();
    channel_->Abort(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  }

  void OnDone() override {
    if (model_.metrics) {
      model_.metrics->CountRequest(
          "Generate", OutcomeCode(*context_, channel_->final_code()));
    }
    channel_->Detach();
    delete this;
  }

 private:
  const ServedModel& model_;
  grpc::CallbackServerContext* const context_;
  const std::shared_ptr<Channel> channel_;
  std::shared_ptr<RequestHandle> handle_;
};

}  // namespace

absl::StatusOr<Request> RequestFromProto(const ServedModel& model,
                                         const v1::GenerateRequest& proto) {
  Request request;
  request.id = proto.request_id().empty() ? NewRequestId() : proto.request_id();
  const std::string who = absl::StrCat("request ", request.id, ": ");
  absl::Status name = CheckModelName(model, proto.model());
  if (!name.ok())
    return absl::InvalidArgumentError(absl::StrCat(who, name.message()));
  if (!proto.text().empty() && proto.input_ids_size() > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "give either text or input_ids, not both"));
  }
  if (!proto.text().empty()) {
    const tokenizer::Tokenizer* tok = model.engine->tokenizer();
    if (tok == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, "model '", model.name,
                       "' has no tokenizer; send input_ids instead of text"));
    }
    const bool special =
        proto.has_add_special_tokens() ? proto.add_special_tokens() : true;
    request.prompt_ids = tok->Encode(proto.text(), special);
  } else {
    request.prompt_ids.assign(proto.input_ids().begin(),
                              proto.input_ids().end());
  }
  if (request.prompt_ids.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, "the prompt is empty: set text or input_ids"));
  }
  if (proto.has_max_tokens()) request.max_tokens = proto.max_tokens();
  const v1::SamplingParameters& s = proto.sampling();
  runtime::SamplingParams& p = request.sampling;
  if (s.has_temperature()) p.temperature = s.temperature();
  p.top_k = s.top_k();
  if (s.has_top_p()) p.top_p = s.top_p();
  p.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.repetition_penalty = s.repetition_penalty();
  p.presence_penalty = s.presence_penalty();
  p.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) p.seed = s.seed();
  p.stop_strings.assign(proto.stop().begin(), proto.stop().end());
  p.stop_token_ids.assign(proto.stop_token_ids().begin(),
                          proto.stop_token_ids().end());
  p.ignore_eos = proto.ignore_eos();
  request.logprobs = proto.logprobs();
  return request;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new GenerateReactor(model_, context, *request);
}

grpc::ServerUnaryReactor* GenerationService::FinishUnary(
    grpc::CallbackServerContext* context, const char* method,
    const absl::Status& status) {
  if (model_.metrics) model_.metrics->CountRequest(method, status.code());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(
    grpc::CallbackServerContext* context, const v1::TokenizeRequest* request,
    v1::TokenizeResponse* response) {
  absl::Status status = CheckModelName(model_, request->model());
  const tokenizer::Tokenizer* tok = model_.engine->tokenizer();
  if (status.ok() && tok == nullptr) {
    status = absl::FailedPreconditionError(
        absl::StrCat("model '", model_.name, "' has no tokenizer.json"));
  }
  if (status.ok()) {
    const bool special = request->has_add_special_tokens()
                             ? request->add_special_tokens()
                             : true;
    std::vector<int32_t> ids = tok->Encode(request->text(), special);
    response->mutable_ids()->Add(ids.begin(), ids.end());
  }
  return FinishUnary(context, "Tokenize", status);
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(
    grpc::CallbackServerContext* context, const v1::DetokenizeRequest* request,
    v1::DetokenizeResponse* response) {
  absl::Status status = CheckModelName(model_, request->model());
  const tokenizer::Tokenizer* tok = model_.engine->tokenizer();
  if (status.ok() && tok == nullptr) {
    status = absl::FailedPreconditionError(
        absl::StrCat("model '", model_.name, "' has no tokenizer.json"));
  }
  if (status.ok()) {
    std::vector<int32_t> ids(request->ids().begin(), request->ids().end());
    response->set_text(tok->Decode(ids, request->skip_special_tokens()));
  }
  return FinishUnary(context, "Detokenize", status);
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(
    grpc::CallbackServerContext* context,
    const v1::GetModelInfoRequest* request,
    v1::GetModelInfoResponse* response) {
  absl::Status status = CheckModelName(model_, request->model());
  if (status.ok()) {
    const model::ModelSpec& spec = model_.engine->spec();
    response->set_name(model_.name);
    response->set_architecture(spec.architecture);
    response->set_vocab_size(static_cast<int32_t>(spec.vocab_size));
    response->set_max_context_tokens(model_.scheduler->context_tokens());
    response->set_num_layers(static_cast<int32_t>(spec.num_layers));
    response->set_num_experts(static_cast<int32_t>(spec.num_experts));
    response->set_num_experts_per_token(
        static_cast<int32_t>(spec.experts_per_token));
    response->set_has_tokenizer(model_.engine->tokenizer() != nullptr);
    const std::vector<int32_t>& eos = model_.engine->eos_token_ids();
    response->mutable_eos_token_ids()->Add(eos.begin(), eos.end());
    response->set_max_prompt_tokens(model_.scheduler->max_prompt_tokens());
    response->set_max_new_tokens(model_.scheduler->max_new_tokens());
    response->set_kv_cache_block_size(
        static_cast<int32_t>(model_.scheduler->kv_block_size()));
    response->set_kv_cache_blocks(
        static_cast<int32_t>(model_.scheduler->kv_blocks()));
    const memory_ring::PlacementPlan& plan = model_.engine->placement();
    v1::Placement* placement = response->mutable_placement();
    placement->set_budget_bytes(plan.budget_bytes);
    placement->set_resident_bytes(plan.resident_bytes);
    placement->set_streamed_bytes(plan.streamed_bytes);
    placement->set_ring_slots(plan.num_slots);
    placement->set_slot_bytes(plan.streams() ? plan.slot_bytes : 0);
    placement->set_slot_experts(plan.streams() ? plan.section_experts : 0);
    placement->set_expert_cache_bytes(plan.cache_bytes);
    placement->set_resident_experts(plan.resident_experts);
    placement->set_streamed_experts(plan.streamed_experts);
    placement->set_summary(plan.Summary());
  }
  return FinishUnary(context, "GetModelInfo", status);
}

}  // namespace ringmoe::server

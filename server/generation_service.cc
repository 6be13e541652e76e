#include "server/generation_service.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/stream_channel.h"

namespace ringmoe::server {

using serving::CheckModelName;
using serving::FinishReason;
using serving::Request;
using serving::RequestHandle;
using serving::RequestOutput;
using serving::ServedModel;

namespace {

using Channel = StreamChannel<grpc::ServerWriteReactor<v1::GenerateResponse>,
                              v1::GenerateResponse>;

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
        channel_(std::make_shared<Channel>(
            this, MergeDeltas,
            CountOutcome(model.metrics, context, "Generate"))) {
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
    // The call ended before its sequence did (the client stopped reading
    // and its buffer overflowed): stop generating for nobody.
    if (handle_) handle_->Cancel();
    channel_->Detach();
    delete this;
  }

 private:
  const ServedModel& model_;
  const std::shared_ptr<Channel> channel_;
  std::shared_ptr<RequestHandle> handle_;
};

}  // namespace

namespace {

// A JSON document from a request's *_json field: empty is `empty`; anything
// else must parse (INVALID_ARGUMENT naming the field).
absl::StatusOr<nlohmann::ordered_json> JsonField(absl::string_view text,
                                                 absl::string_view field,
                                                 nlohmann::ordered_json empty) {
  // As deep as any tool schema needs; deeper input is refused before it is
  // built.
  constexpr int kMaxDepth = 64;
  if (text.empty()) return empty;
  absl::StatusOr<nlohmann::ordered_json> json =
      json::ParseStrictOrdered(text, kMaxDepth);
  if (!json.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is not valid JSON: ", json.status().message()));
  }
  return json;
}

absl::StatusOr<serving::ChatInput> ChatFromProto(
    const v1::GenerateRequest& proto) {
  serving::ChatInput chat;
  chat.messages = nlohmann::ordered_json::array();
  for (int i = 0; i < proto.messages_size(); ++i) {
    const v1::ChatMessage& m = proto.messages(i);
    nlohmann::ordered_json message = {{"role", m.role()},
                                      {"content", m.content()}};
    if (!m.reasoning_content().empty())
      message["reasoning_content"] = m.reasoning_content();
    if (!m.tool_call_id().empty()) message["tool_call_id"] = m.tool_call_id();
    if (!m.name().empty()) message["name"] = m.name();
    if (!m.tool_calls_json().empty()) {
      ASSIGN_OR_RETURN(
          message["tool_calls"],
          JsonField(m.tool_calls_json(),
                    absl::StrCat("messages[", i, "].tool_calls_json"),
                    nullptr));
      // OpenAI's convention: an assistant turn that only calls tools has
      // null content (templates test for it).
      if (m.content().empty()) message["content"] = nullptr;
    }
    chat.messages.push_back(std::move(message));
  }
  ASSIGN_OR_RETURN(chat.tools,
                   JsonField(proto.tools_json(), "tools_json", nullptr));
  ASSIGN_OR_RETURN(chat.template_kwargs,
                   JsonField(proto.chat_template_kwargs_json(),
                             "chat_template_kwargs_json", nullptr));
  chat.add_generation_prompt =
      proto.has_add_generation_prompt() ? proto.add_generation_prompt() : true;
  return chat;
}

}  // namespace

absl::StatusOr<Request> RequestFromProto(const ServedModel& model,
                                         const v1::GenerateRequest& proto) {
  serving::GenerationInput input;
  input.request_id = proto.request_id();
  input.model = proto.model();
  if (!proto.text().empty()) input.text = proto.text();
  input.input_ids.assign(proto.input_ids().begin(), proto.input_ids().end());
  if (proto.messages_size() > 0) {
    absl::StatusOr<serving::ChatInput> chat = ChatFromProto(proto);
    if (!chat.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("request ", serving::Quote(proto.request_id()), ": ",
                       chat.status().message()));
    }
    input.chat = *std::move(chat);
  }
  if (proto.has_add_special_tokens())
    input.add_special_tokens = proto.add_special_tokens();
  if (proto.has_max_tokens()) input.max_tokens = proto.max_tokens();
  const v1::SamplingParameters& s = proto.sampling();
  runtime::SamplingParams& p = input.sampling;
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
  input.logprobs = proto.logprobs();
  return serving::PrepareRequest(model, std::move(input));
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GenerationService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return new GenerateReactor(model_, context, *request);
}

grpc::ServerUnaryReactor* GenerationService::Tokenize(
    grpc::CallbackServerContext* context, const v1::TokenizeRequest* request,
    v1::TokenizeResponse* response) {
  absl::StatusOr<const tokenizer::Tokenizer*> tok =
      serving::TokenizerFor(model_, request->model());
  if (tok.ok()) {
    const bool special = request->has_add_special_tokens()
                             ? request->add_special_tokens()
                             : true;
    std::vector<int32_t> ids = (*tok)->Encode(request->text(), special);
    response->mutable_ids()->Add(ids.begin(), ids.end());
  }
  return FinishUnary(context, model_.metrics, "Tokenize", tok.status());
}

grpc::ServerUnaryReactor* GenerationService::Detokenize(
    grpc::CallbackServerContext* context, const v1::DetokenizeRequest* request,
    v1::DetokenizeResponse* response) {
  absl::StatusOr<const tokenizer::Tokenizer*> tok =
      serving::TokenizerFor(model_, request->model());
  if (tok.ok()) {
    std::vector<int32_t> ids(request->ids().begin(), request->ids().end());
    response->set_text((*tok)->Decode(ids, request->skip_special_tokens()));
  }
  return FinishUnary(context, model_.metrics, "Detokenize", tok.status());
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
  return FinishUnary(context, model_.metrics, "GetModelInfo", status);
}

}  // namespace ringmoe::server

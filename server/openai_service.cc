#include "server/openai_service.h"

#include <atomic>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/stream_buffers.h"

namespace ringmoe::server {
namespace {

using openai::Endpoint;
using openai::OrderedJson;

constexpr char kJson[] = "application/json";

std::string Dump(const OrderedJson& json) {
  return json.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

std::string NewResponseId(Endpoint endpoint) {
  static std::atomic<uint64_t> next{1};
  return absl::StrCat(
      endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-",
      next.fetch_add(1));
}

// Bytes an output holds while it waits for the HTTP thread.
int64_t OutputBytes(const serving::RequestOutput& out) {
  int64_t bytes = static_cast<int64_t>(
      sizeof(out) + out.text.size() + out.token_ids.size() * sizeof(int32_t) +
      out.logprobs.size() * sizeof(float) + out.logits.size() * sizeof(float));
  for (const auto& top : out.top_logprobs) {
    bytes += static_cast<int64_t>(sizeof(top) +
                                  top.size() * sizeof(serving::TokenLogprob));
  }
  return bytes;
}

// Outputs of a request's sequences, delivered on the engine thread and read
// on the HTTP thread. Shared, so that callbacks of sequences still running
// after the HTTP thread gave up have somewhere to go.
//
// The HTTP thread blocks in its writes while a streaming client does not
// read, so what waits here is bounded like a gRPC stream's replies
// (StreamBuffers): past the limit the request's sequences are cancelled and
// the stream ends with an error instead of the server's memory growing.
class Mailbox {
 public:
  ~Mailbox() { StreamBuffers::buffered_bytes() -= bytes_; }

  // The request's sequences, cancelled on overflow (and at once when it
  // already happened).
  void AddHandle(std::shared_ptr<serving::RequestHandle> handle) {
    absl::MutexLock lock(&mu_);
    if (!overflow_.ok()) handle->Cancel();
    handles_.push_back(std::move(handle));
  }

  // On the engine thread: queues choice `index`'s output.
  void Push(int index, serving::RequestOutput out) {
    absl::MutexLock lock(&mu_);
    if (!overflow_.ok()) return;
    const int64_t added = OutputBytes(out);
    bytes_ += added;
    const int64_t total = StreamBuffers::buffered_bytes() += added;
    outputs_.emplace_back(index, std::move(out));
    if (bytes_ > StreamBuffers::per_stream() ||
        total > StreamBuffers::total()) {
      overflow_ = absl::ResourceExhaustedError(absl::StrCat(
          "the client is not reading its stream: ", bytes_,
          " bytes of output are waiting (limits: ", StreamBuffers::per_stream(),
          " per stream, ", StreamBuffers::total(),
          " for the server); the stream ends"));
      ++StreamBuffers::overflows();
      outputs_.clear();
      StreamBuffers::buffered_bytes() -= bytes_;
      bytes_ = 0;
      for (auto& handle : handles_) handle->Cancel();
    }
    arrived_.Signal();
  }

  // On the HTTP thread: waits for outputs and takes them all; an error
  // once the buffer overflowed.
  absl::Status Take(std::deque<std::pair<int, serving::RequestOutput>>& batch) {
    absl::MutexLock lock(&mu_);
    while (outputs_.empty() && overflow_.ok()) arrived_.Wait(&mu_);
    if (!overflow_.ok()) return overflow_;
    batch.swap(outputs_);
    StreamBuffers::buffered_bytes() -= bytes_;
    bytes_ = 0;
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  absl::CondVar arrived_;
  std::deque<std::pair<int, serving::RequestOutput>> outputs_
      ABSL_GUARDED_BY(mu_);
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::shared_ptr<serving::RequestHandle>> handles_
      ABSL_GUARDED_BY(mu_);
  absl::Status overflow_ ABSL_GUARDED_BY(mu_);
};

// One choice as it is assembled.
struct Choice {
  std::optional<serving::ChatOutputParser> parser;
  std::optional<openai::LogprobsBuilder> logprobs;
  std::string echo;  // completions with echo: the prompt text
  std::string content;
  std::string reasoning;
  std::vector<serving::ToolCall> tool_calls;
  serving::FinishReason finish_reason = serving::FinishReason::kStop;
  absl::Status status;
  int prompt_tokens = 0;
  int completion_tokens = 0;
  bool finished = false;
};

}  // namespace

void OpenAiService::Reply(HttpResponse& response, const char* method,
                          const absl::Status& status) const {
  if (model_.metrics) model_.metrics->CountRequest(method, status.code());
  response.Send(openai::HttpStatus(status.code()), kJson,
                openai::ErrorJson(status));
}

void OpenAiService::Handle(const HttpRequest& request,
                           HttpResponse& response) const {
  const std::string& path = request.path;
  const bool get = request.method == "GET" || request.method == "HEAD";
  const bool post = request.method == "POST";
  auto wrong_method = [&](const char* allowed) {
    response.Send(
        405, kJson,
        openai::ErrorJson(absl::InvalidArgumentError(absl::StrCat(
            request.method, " is not allowed on ", path, "; use ", allowed))),
        {{"Allow", allowed}});
  };
  if (path == "/health") {
    if (!get) return wrong_method("GET");
    const bool ready = model_.scheduler->ready();
    response.Send(ready ? 200 : 503, kJson,
                  ready ? "{}"
                  : model_.scheduler->accepting()
                      ? R"({"status": "engine steps are failing"})"
                      : R"({"status": "shutting down"})");
    return;
  }
  if (path == "/v1/models" || absl::StartsWith(path, "/v1/models/")) {
    if (!get) return wrong_method("GET");
    const OrderedJson card = {
        {"id", model_.name},
        {"object", "model"},
        {"created", created_},
        {"owned_by", "ringmoe"},
        {"max_model_len", model_.scheduler->context_tokens()},
        {"vocab_size", model_.engine->spec().vocab_size}};
    if (path == "/v1/models") {
      response.Send(
          200, kJson,
          Dump({{"object", "list"}, {"data", OrderedJson::array({card})}}));
    } else if (path.substr(std::string("/v1/models/").size()) == model_.name) {
      response.Send(200, kJson, Dump(card));
    } else {
      response.Send(404, kJson,
                    openai::ErrorJson(absl::NotFoundError(absl::StrCat(
                        "The model '", serving::Quote(path.substr(11)),
                        "' does not exist"))));
    }
    return;
  }
  if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (!post) return wrong_method("POST");
    Generate(path == "/v1/completions" ? Endpoint::kCompletions
                                       : Endpoint::kChatCompletions,
             request, response);
    return;
  }
  response.Send(404, kJson,
                openai::ErrorJson(absl::NotFoundError(absl::StrCat(
                                      "no route ", serving::Quote(path))),
                                  /*code=*/nullptr));
}

void OpenAiService::Generate(Endpoint endpoint, const HttpRequest& http,
                             HttpResponse& response) const {
  const bool chat = endpoint == Endpoint::kChatCompletions;
  const char* method = chat ? "chat.completions" : "completions";
  absl::StatusOr<openai::ApiRequest> api =
      openai::ParseRequest(endpoint, http.body, model_);
  if (!api.ok()) return Reply(response, method, api.status());

  const std::string id = NewResponseId(endpoint);
  const int64_t created = absl::ToUnixSeconds(absl::Now());
  const size_t count = api->choices.size();
  auto mailbox = std::make_shared<Mailbox>();
  std::vector<Choice> choices(count);
  std::vector<std::shared_ptr<serving::RequestHandle>> handles;
  auto cancel_all = [&handles] {
    for (auto& handle : handles) handle->Cancel();
  };
  const tokenizer::Tokenizer* tok = model_.engine->tokenizer();
  for (size_t i = 0; i < count; ++i) {
    serving::GenerationInput input = std::move(api->choices[i]);
    input.request_id = absl::StrCat(id, "-", i);
    const std::optional<std::string> text = input.text;
    const std::vector<int32_t> ids = input.input_ids;
    std::string chat_prompt;
    absl::StatusOr<serving::Request> request =
        serving::PrepareRequest(model_, std::move(input), &chat_prompt);
    if (!request.ok()) {
      cancel_all();
      return Reply(response, method, request.status());
    }
    Choice& choice = choices[i];
    if (chat && model_.chat_format != serving::ChatFormat::kPlain) {
      choice.parser.emplace(model_.chat_format, chat_prompt,
                            api->parse_tool_calls);
    }
    if (api->echo) {
      choice.echo = text.has_value() ? *text
                    : tok != nullptr ? tok->Decode(ids, true)
                                     : "";
    }
    if (api->logprobs) {
      choice.logprobs.emplace(endpoint, tok,
                              static_cast<int64_t>(choice.echo.size()));
    }
    request->on_output = [mailbox, i](serving::RequestOutput out) {
      mailbox->Push(static_cast<int>(i), std::move(out));
    };
    absl::StatusOr<std::shared_ptr<serving::RequestHandle>> handle =
        model_.scheduler->Submit(*std::move(request));
    if (!handle.ok()) {
      cancel_all();
      return Reply(response, method, handle.status());
    }
    mailbox->AddHandle(*handle);
    handles.push_back(*std::move(handle));
  }
  // Applies one output to its choice; returns the choice's stream delta.
  auto apply = [&](int index, serving::RequestOutput& out) {
    Choice& c = choices[index];
    serving::ChatDelta delta;
    if (c.parser.has_value()) {
      delta = c.parser->Push(out.text);
      if (out.finished) {
        serving::ChatDelta last = c.parser->Finish();
        delta.content += last.content;
        delta.reasoning += last.reasoning;
        for (auto& call : last.tool_calls) {
          delta.tool_calls.push_back(std::move(call));
        }
      }
    } else {
      delta.content = std::move(out.text);
    }
    c.content += delta.content;
    c.reasoning += delta.reasoning;
    c.tool_calls.insert(c.tool_calls.end(), delta.tool_calls.begin(),
                        delta.tool_calls.end());
    if (c.logprobs.has_value()) c.logprobs->Add(out);
    if (out.finished) {
      c.finished = true;
      c.finish_reason = out.finish_reason;
      c.status = out.status;
      c.prompt_tokens = out.prompt_tokens;
      c.completion_tokens = out.completion_tokens;
    }
    return delta;
  };
  auto usage = [&] {
    int prompt = 0;
    int completion = 0;
    for (size_t i = 0; i < count; ++i) {
      completion += choices[i].completion_tokens;
      // Choices of one prompt share it: count it once.
      if (i % api->choices_per_prompt == 0) {
        prompt += choices[i].prompt_tokens;
      }
    }
    return OrderedJson{{"prompt_tokens", prompt},
                       {"completion_tokens", completion},
                       {"total_tokens", prompt + completion}};
  };
  auto chunk = [&](OrderedJson choices_json) {
    OrderedJson c = {
        {"id", id},
        {"object", chat ? "chat.completion.chunk" : "text_completion"},
        {"created", created},
        {"model", model_.name},
        {"choices", std::move(choices_json)}};
    return absl::StrCat("data: ", Dump(c), "\n\n");
  };
  std::vector<int> tool_indexes(count, 0);

  if (api->stream) {
    bool open = response.StartStream(
        200, "text/event-stream",
        {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
    if (open && chat) {
      OrderedJson first = OrderedJson::array();
      for (size_t i = 0; i < count; ++i) {
        first.push_back({{"index", i},
                         {"delta", {{"role", "assistant"}, {"content", ""}}},
                         {"logprobs", nullptr},
                         {"finish_reason", nullptr}});
      }
      open = response.Write(chunk(std::move(first)));
    }
    if (open && api->echo) {
      for (size_t i = 0; i < count && open; ++i) {
        open = response.Write(
            chunk(OrderedJson::array({{{"index", i},
                                       {"text", choices[i].echo},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}})));
      }
    }
    size_t finished = 0;
    while (open && finished < count) {
      std::deque<std::pair<int, serving::RequestOutput>> batch;
      if (absl::Status taken = mailbox->Take(batch); !taken.ok()) {
        // Its sequences are cancelled; the client may still read this.
        if (model_.metrics) model_.metrics->CountRequest(method, taken.code());
        response.Write(
            absl::StrCat("data: ", openai::ErrorJson(taken), "\n\n"));
        return;
      }
      std::string data;
      for (auto& [index, out] : batch) {
        const bool done = out.finished;
        // A completions stream has an event for every step that made tokens,
        // text or not (a character may span tokens): clients time tokens.
        const bool made_tokens = !chat && !out.token_ids.empty();
        serving::ChatDelta delta = apply(index, out);
        Choice& c = choices[index];
        OrderedJson logprobs = nullptr;
        if (c.logprobs.has_value()) logprobs = c.logprobs->Take();
        const bool has_logprobs =
            !logprobs.is_null() &&
            !(chat ? logprobs["content"].empty() : logprobs["tokens"].empty());
        if (!delta.empty() || has_logprobs || made_tokens) {
          OrderedJson entry = {{"index", index}};
          if (chat) {
            OrderedJson d = OrderedJson::object();
            if (!delta.reasoning.empty())
              d["reasoning_content"] = delta.reasoning;
            if (!delta.content.empty()) d["content"] = delta.content;
            if (!delta.tool_calls.empty()) {
              OrderedJson calls = OrderedJson::array();
              for (const serving::ToolCall& call : delta.tool_calls) {
                calls.push_back(
                    openai::ToolCallJson(call, tool_indexes[index]++, true));
              }
              d["tool_calls"] = std::move(calls);
            }
            entry["delta"] = std::move(d);
          } else {
            entry["text"] = delta.content;
          }
          entry["logprobs"] = has_logprobs ? logprobs : OrderedJson(nullptr);
          entry["finish_reason"] = nullptr;
          data += chunk(OrderedJson::array({std::move(entry)}));
        }
        if (!done) continue;
        ++finished;
        if (!c.status.ok() && c.finish_reason != serving::FinishReason::kStop) {
          data += absl::StrCat("data: ", openai::ErrorJson(c.status), "\n\n");
        }
        OrderedJson last = {{"index", index}};
        if (chat) {
          last["delta"] = OrderedJson::object();
        } else {
          last["text"] = "";
        }
        last["logprobs"] = nullptr;
        last["finish_reason"] =
            openai::FinishReasonName(c.finish_reason, !c.tool_calls.empty());
        data += chunk(OrderedJson::array({std::move(last)}));
      }
      open = response.Write(data);
    }
    if (!open) {
      // The client went away: free its sequences at the next step.
      cancel_all();
      if (model_.metrics) {
        model_.metrics->CountRequest(method, absl::StatusCode::kCancelled);
      }
      return;
    }
    std::string tail;
    if (api->include_usage) {
      OrderedJson c = {
          {"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model_.name},
          {"choices", OrderedJson::array()},
          {"usage", usage()}};
      tail = absl::StrCat("data: ", Dump(c), "\n\n");
    }
    tail += "data: [DONE]\n\n";
    response.Write(tail);
    // Counted before the client can see the end of the stream.
    if (model_.metrics)
      model_.metrics->CountRequest(method, absl::StatusCode::kOk);
    response.End();
    return;
  }

  // Whole response: wait for every choice.
  size_t finished = 0;
  while (finished < count) {
    std::deque<std::pair<int, serving::RequestOutput>> batch;
    // This thread takes outputs as they come: the buffer cannot overflow.
    mailbox->Take(batch).IgnoreError();
    for (auto& [index, out] : batch) {
      if (out.finished) ++finished;
      apply(index, out);
    }
  }
  for (const Choice& c : choices) {
    if (!c.status.ok()) return Reply(response, method, c.status);
  }
  OrderedJson list = OrderedJson::array();
  for (size_t i = 0; i < count; ++i) {
    Choice& c = choices[i];
    OrderedJson entry = {{"index", i}};
    if (chat) {
      OrderedJson message = {{"role", "assistant"}};
      message["content"] = c.content.empty() && !c.tool_calls.empty()
                               ? OrderedJson(nullptr)
                               : OrderedJson(c.content);
      if (!c.reasoning.empty()) message["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) {
        OrderedJson calls = OrderedJson::array();
        for (size_t k = 0; k < c.tool_calls.size(); ++k) {
          calls.push_back(openai::ToolCallJson(c.tool_calls[k],
                                               static_cast<int>(k), false));
        }
        message["tool_calls"] = std::move(calls);
      }
      entry["message"] = std::move(message);
    } else {
      entry["text"] = c.echo + c.content;
    }
    entry["logprobs"] =
        c.logprobs.has_value() ? c.logprobs->Take() : OrderedJson(nullptr);
    entry["finish_reason"] =
        openai::FinishReasonName(c.finish_reason, !c.tool_calls.empty());
    list.push_back(std::move(entry));
  }
  const OrderedJson body = {
      {"id", id},
      {"object", chat ? "chat.completion" : "text_completion"},
      {"created", created},
      {"model", model_.name},
      {"choices", std::move(list)},
      {"usage", usage()}};
  if (model_.metrics)
    model_.metrics->CountRequest(method, absl::StatusCode::kOk);
  response.Send(200, kJson, Dump(body));
}

}  // namespace ringmoe::server

#include "clients/cli/remote_generate.h"

#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "clients/cli/cli_util.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"
#include "proto/generation.grpc.pb.h"

namespace ringmoe::cli {
namespace {

const char* ReasonName(v1::FinishReason reason) {
  switch (reason) {
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case v1::FINISH_REASON_ERROR:
      return "error";
    default:
      return "none";
  }
}

}  // namespace

int RunGenerateOnServer(const std::string& server, const std::string& prompt,
                        const std::string& id_text,
                        const runtime::SamplingParams& params, bool stream,
                        bool json) {
  if (prompt.empty() == id_text.empty()) {
    return Fail("generate",
                absl::InvalidArgumentError(
                    "give exactly one of --prompt TEXT and --input_ids 1,2,3"));
  }
  v1::GenerateRequest request;
  if (!prompt.empty()) {
    request.set_text(prompt);
  } else {
    auto ids = ParseIdList(id_text);
    if (!ids.ok()) return Fail("generate", ids.status());
    request.mutable_input_ids()->Add(ids->begin(), ids->end());
  }
  request.set_max_tokens(params.max_new_tokens);
  v1::SamplingParameters* s = request.mutable_sampling();
  s->set_temperature(params.temperature);
  s->set_top_k(params.top_k);
  s->set_top_p(params.top_p);
  s->set_min_p(params.min_p);
  s->set_repetition_penalty(params.repetition_penalty);
  s->set_presence_penalty(params.presence_penalty);
  s->set_frequency_penalty(params.frequency_penalty);
  if (params.seed) s->set_seed(*params.seed);
  for (const auto& stop : params.stop_strings) request.add_stop(stop);
  request.mutable_stop_token_ids()->Add(params.stop_token_ids.begin(),
                                        params.stop_token_ids.end());
  request.set_ignore_eos(params.ignore_eos);

  auto channel =
      grpc::CreateChannel(server, grpc::InsecureChannelCredentials());
  auto stub = v1::Generation::NewStub(channel);
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader =
      stub->Generate(&context, request);
  v1::GenerateResponse response;
  std::vector<int32_t> ids;
  std::string text;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  const bool print_stream = stream && !json;
  while (reader->Read(&response)) {
    ids.insert(ids.end(), response.token_ids().begin(),
               response.token_ids().end());
    text += response.text();
    if (print_stream && !response.text().empty()) {
      std::fwrite(response.text().data(), 1, response.text().size(), stdout);
      std::fflush(stdout);
    }
    if (response.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      reason = response.finish_reason();
    }
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) {
    return Fail(
        "generate",
        absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                     absl::StrCat(server, ": ", status.error_message())));
  }
  if (json) {
    nlohmann::json out = {
        {"ids", ids}, {"text", text}, {"finish_reason", ReasonName(reason)}};
    std::cout << out.dump(-1, ' ', false,
                          nlohmann::json::error_handler_t::replace)
              << "\n";
    return 0;
  }
  if (!print_stream) std::cout << text;
  std::cout << "\nids: " << absl::StrJoin(ids, ",")
            << "\nfinish_reason: " << ReasonName(reason) << "\n";
  return 0;
}

}  // namespace ringmoe::cli

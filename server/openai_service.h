// The OpenAI-compatible HTTP API over the serving core: GET /v1/models,
// POST /v1/completions and /v1/chat/completions (whole responses or
// server-sent events), GET /health. Each request runs on the HTTP worker
// thread that received it: its sequences are submitted to the scheduler and
// their outputs written as they come; a client that goes away cancels them.
#ifndef RINGMOE_SERVER_OPENAI_SERVICE_H_
#define RINGMOE_SERVER_OPENAI_SERVICE_H_

#include <cstdint>

#include "engine/serving/request_api.h"
#include "server/http_server.h"
#include "server/openai_protocol.h"

namespace ringmoe::server {

class OpenAiService {
 public:
  // `created` is the Unix time reported as the model's creation (the
  // server's start).
  OpenAiService(const serving::ServedModel& model, int64_t created)
      : model_(model), created_(created) {}

  // The HttpHandler: thread-safe.
  void Handle(const HttpRequest& request, HttpResponse& response) const;

 private:
  void Generate(openai::Endpoint endpoint, const HttpRequest& request,
                HttpResponse& response) const;
  void Reply(HttpResponse& response, const char* method,
             const absl::Status& status) const;

  const serving::ServedModel model_;
  const int64_t created_;
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_OPENAI_SERVICE_H_

#include "server/http_server.h"

#include <civetweb.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/civetweb_stop.h"

namespace ringmoe::server {
namespace {

// Reads the request body, at most `limit` bytes; false when the client
// broke off or sent more.
bool ReadBody(mg_connection* conn, size_t limit, std::string& body) {
  char buf[16384];
  while (true) {
    const int n = mg_read(conn, buf, sizeof(buf));
    if (n < 0) return false;
    if (n == 0) return true;
    if (body.size() + static_cast<size_t>(n) > limit) return false;
    body.append(buf, static_cast<size_t>(n));
  }
}

// OpenAI's error shape, the only JSON API this server speaks over HTTP.
std::string ErrorBody(absl::string_view message) {
  // Keys in the order of every other error body (OpenAI's).
  nlohmann::ordered_json error = {{"message", std::string(message)},
                                  {"type", "invalid_request_error"},
                                  {"param", nullptr},
                                  {"code", nullptr}};
  return nlohmann::ordered_json{{"error", std::move(error)}}.dump();
}

}  // namespace

bool HttpResponse::Headers_(int status, absl::string_view content_type,
                            const Headers& headers, int64_t content_length) {
  status_ = status;
  if (mg_response_header_start(conn_, status) < 0) return false;
  const std::string type(content_type);
  mg_response_header_add(conn_, "Content-Type", type.c_str(), -1);
  if (content_length >= 0) {
    const std::string length = absl::StrCat(content_length);
    mg_response_header_add(conn_, "Content-Length", length.c_str(), -1);
  } else {
    mg_response_header_add(conn_, "Transfer-Encoding", "chunked", -1);
  }
  for (const auto& [name, value] : headers) {
    mg_response_header_add(conn_, name.c_str(), value.c_str(), -1);
  }
  return mg_response_header_send(conn_) >= 0;
}

bool HttpResponse::Send(int status, absl::string_view content_type,
                        absl::string_view body, const Headers& headers) {
  if (!Headers_(status, content_type, headers,
                static_cast<int64_t>(body.size()))) {
    broken_ = true;
    return false;
  }
  if (body.empty()) return true;
  broken_ = mg_write(conn_, body.data(), body.size()) <= 0;
  return !broken_;
}

bool HttpResponse::StartStream(int status, absl::string_view content_type,
                               const Headers& headers) {
  broken_ = !Headers_(status, content_type, headers, -1);
  return !broken_;
}

bool HttpResponse::Write(absl::string_view data) {
  if (broken_) return false;
  if (data.empty()) return true;
  // One chunk, size line and all, in one write: a stream of small events
  // costs one system call each.
  const std::string chunk =
      absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n");
  broken_ = mg_write(conn_, chunk.data(), chunk.size()) <= 0;
  return !broken_;
}

bool HttpResponse::End() {
  if (broken_) return false;
  broken_ = mg_write(conn_, "0\r\n\r\n", 5) <= 0;
  return !broken_;
}

int HttpServer::OnRequest(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  auto* server = static_cast<HttpServer*>(info->user_data);
  HttpResponse response(conn);
  HttpRequest request;
  request.method = info->request_method ? info->request_method : "";
  request.path = info->local_uri_raw ? info->local_uri_raw : "";
  request.query = info->query_string ? info->query_string : "";
  if (const char* type = mg_get_header(conn, "Content-Type")) {
    request.content_type = type;
  }
  const size_t limit = server->options_.max_body_bytes;
  if (info->content_length > 0 &&
      static_cast<uint64_t>(info->content_length) > limit) {
    response.Send(
        413, "application/json",
        ErrorBody(absl::StrCat("the request body has ", info->content_length,
                               " bytes, more than the limit of ", limit)),
        {{"Connection", "close"}});
    return 413;
  }
  if (!ReadBody(conn, limit, request.body)) {
    response.Send(413, "application/json",
                  ErrorBody(absl::StrCat(
                      "the request body could not be read whole or has more "
                      "than ",
                      limit, " bytes")),
                  {{"Connection", "close"}});
    return 413;
  }
  server->handler_(request, response);
  if (response.status() == 0) {
    // A handler that answered nothing: never leave the client hanging.
    response.Send(500, "application/json", ErrorBody("no response"));
  }
  return response.status();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, HttpHandler handler) {
  std::unique_ptr<HttpServer> server(
      new HttpServer(options, std::move(handler)));
  const std::string address = absl::StrCat(options.host, ":", options.port);
  const std::string threads = absl::StrCat(std::max(1, options.num_threads));
  const std::string io_timeout = absl::StrCat(options.io_timeout_ms);
  const std::string keep_alive = absl::StrCat(options.keep_alive_timeout_ms);
  const char* config[] = {"listening_ports",
                          address.c_str(),
                          "num_threads",
                          threads.c_str(),
                          "request_timeout_ms",
                          io_timeout.c_str(),
                          "enable_keep_alive",
                          "yes",
                          "keep_alive_timeout_ms",
                          keep_alive.c_str(),
                          nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.begin_request = &HttpServer::OnRequest;
  // Civetweb's own log lines (a client that went away) are not errors of
  // the server's.
  callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
  mg_init_library(0);
  server->context_ = mg_start(&callbacks, server.get(), config);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve HTTP on ", address));
  }
  mg_server_port ports[4];
  const int n = mg_get_server_ports(server->context_, 4, ports);
  if (n < 1) {
    return absl::UnavailableError(
        absl::StrCat("HTTP server on ", address, " has no listening port"));
  }
  server->port_ = ports[0].port;
  return server;
}

HttpServer::~HttpServer() {
  if (context_ == nullptr) return;
  StopCivetwebPromptly(options_.host, {port_}, [this] { mg_stop(context_); });
}

}  // namespace ringmoe::server

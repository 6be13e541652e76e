// A small HTTP/1.1 server over civetweb (docs/ARCHITECTURE.md says why):
// a pool of worker threads, each running one request at a time through one
// handler. Request bodies are read whole (bounded); responses are written
// whole or streamed in chunks (server-sent events). Knows nothing of the
// OpenAI API; server/openai_service.h routes and answers.
#ifndef RINGMOE_SERVER_HTTP_SERVER_H_
#define RINGMOE_SERVER_HTTP_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct mg_connection;
struct mg_context;

namespace ringmoe::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query
  std::string query;   // after '?', or empty
  std::string content_type;
  std::string body;
};

// The response to one request; used on the handler's thread only. Exactly
// one of Send and StartStream is called.
class HttpResponse {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  explicit HttpResponse(mg_connection* conn) : conn_(conn) {}

  // The whole response. False when the client is gone.
  bool Send(int status, absl::string_view content_type, absl::string_view body,
            const Headers& headers = {});
  // A streamed response (chunked transfer encoding), then Write for each
  // part and End. False when the client is gone: the handler should stop
  // the work behind the stream.
  bool StartStream(int status, absl::string_view content_type,
                   const Headers& headers = {});
  bool Write(absl::string_view data);
  bool End();

  int status() const { return status_; }

 private:
  bool Headers_(int status, absl::string_view content_type,
                const Headers& headers, int64_t content_length);

  mg_connection* const conn_;
  int status_ = 0;
  bool broken_ = false;
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port
  // Requests served at once (streams included); more wait for a thread.
  int num_threads = 64;
  // Larger bodies are refused with 413 before they are read.
  size_t max_body_bytes = 8 << 20;
  // Reads and writes that make no progress for this long fail (a client that
  // stops reading its stream is dropped, and its request cancelled).
  int io_timeout_ms = 30000;
  // Idle keep-alive connections are closed after this long.
  int keep_alive_timeout_ms = 5000;
};

class HttpServer {
 public:
  // Binds and starts serving; UNAVAILABLE naming the address when the port
  // cannot be bound. `handler` must be thread-safe.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const HttpServerOptions& options, HttpHandler handler);
  // Stops: closes the listener and waits for the handlers to return.
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

 private:
  HttpServer(const HttpServerOptions& options, HttpHandler handler)
      : options_(options), handler_(std::move(handler)) {}
  static int OnRequest(mg_connection* conn);

  const HttpServerOptions options_;
  const HttpHandler handler_;
  mg_context* context_ = nullptr;
  int port_ = 0;
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_HTTP_SERVER_H_

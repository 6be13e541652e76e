#include "clients/bench/load_generator.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "proto/generation.grpc.pb.h"

namespace ringmoe::bench {
namespace {

struct HostPort {
  std::string host;
  int port = 0;
};

absl::StatusOr<HostPort> ParseHostPort(const std::string& server) {
  const size_t colon = server.rfind(':');
  HostPort hp;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(server.substr(colon + 1), &hp.port) || hp.port < 1 ||
      hp.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("server '", server, "' is not HOST:PORT"));
  }
  hp.host = server.substr(0, colon);
  return hp;
}

struct Job {
  std::vector<int32_t> prompt;
  int max_tokens = 0;
};

struct Outcome {
  bool ok = false;
  std::string error;  // gRPC status code name when !ok
  double ttft = 0;
  double e2e = 0;
  std::vector<double> gaps;  // between token-carrying messages
  int output_tokens = 0;
  int prompt_tokens = 0;
};

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    default:
      return "OTHER";
  }
}

Outcome RunOneGrpc(v1::Generation::Stub& stub, const LoadOptions& options,
                   const Job& job) {
  v1::GenerateRequest request;
  request.set_model(options.model);
  request.mutable_input_ids()->Add(job.prompt.begin(), job.prompt.end());
  request.set_max_tokens(job.max_tokens);
  request.set_ignore_eos(true);
  request.mutable_sampling()->set_temperature(0);
  grpc::ClientContext context;
  context.set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1e3)));
  Outcome out;
  out.prompt_tokens = static_cast<int>(job.prompt.size());
  const absl::Time start = absl::Now();
  absl::Time last = start;
  auto reader = stub.Generate(&context, request);
  v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.token_ids_size() == 0) continue;
    const absl::Time now = absl::Now();
    if (out.output_tokens == 0) {
      out.ttft = absl::ToDoubleSeconds(now - start);
    } else {
      out.gaps.push_back(absl::ToDoubleSeconds(now - last));
    }
    last = now;
    out.output_tokens += response.token_ids_size();
  }
  grpc::Status status = reader->Finish();
  out.e2e = absl::ToDoubleSeconds(absl::Now() - start);
  out.ok = status.ok();
  if (!out.ok) out.error = CodeName(status.error_code());
  return out;
}

// A blocking TCP connection with a receive timeout; closed on destruction.
class Socket {
 public:
  static absl::StatusOr<Socket> Connect(const HostPort& server,
                                        double timeout_s) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = absl::StrCat(server.port);
    if (getaddrinfo(server.host.c_str(), port.c_str(), &hints, &found) != 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot resolve ", server.host));
    }
    Socket socket;
    for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
      socket.fd_ = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (socket.fd_ < 0) continue;
      if (::connect(socket.fd_, a->ai_addr, a->ai_addrlen) == 0) break;
      ::close(socket.fd_);
      socket.fd_ = -1;
    }
    freeaddrinfo(found);
    if (socket.fd_ < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", server.host, ":", server.port));
    }
    timeval tv = absl::ToTimeval(absl::Seconds(timeout_s));
    setsockopt(socket.fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    const int one = 1;
    setsockopt(socket.fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return socket;
  }
  Socket() = default;
  Socket(Socket&& other) : fd_(other.fd_) { other.fd_ = -1; }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }

  bool Send(absl::string_view data) {
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Appends what arrives to `buffer`; false at the end or on a timeout.
  bool Receive(std::string& buffer) {
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    buffer.append(buf, static_cast<size_t>(n));
    return true;
  }

 private:
  int fd_ = -1;
};

// GET /v1/models: the served model's card ({"id", "vocab_size", ...}).
absl::StatusOr<nlohmann::json> FetchModelCard(const HostPort& server) {
  ASSIGN_OR_RETURN(Socket socket, Socket::Connect(server, 30));
  socket.Send(absl::StrCat("GET /v1/models HTTP/1.1\r\nHost: ", server.host,
                           "\r\nConnection: close\r\n\r\n"));
  std::string response;
  while (socket.Receive(response)) {
  }
  const size_t body = response.find("\r\n\r\n");
  const nlohmann::json list =
      body == std::string::npos
          ? nlohmann::json()
          : nlohmann::json::parse(response.substr(body + 4), nullptr,
                                  /*allow_exceptions=*/false);
  if (!list.is_object() || !list.contains("data") || !list["data"].is_array() ||
      list["data"].empty() || !list["data"][0].is_object()) {
    return absl::UnavailableError(absl::StrCat(
        server.host, ":", server.port, ": GET /v1/models gave no model"));
  }
  return list["data"][0];
}

// One streamed /v1/completions request over a fresh HTTP/1.1 connection
// (what most OpenAI clients do). Each server-sent event that carries a
// choice is one step's tokens; the usage chunk gives the exact count. The
// chunked transfer encoding is not decoded: events are found in the raw
// bytes, and an event's JSON never holds a blank line.
Outcome RunOneOpenAi(const HostPort& server, const LoadOptions& options,
                     const Job& job) {
  Outcome out;
  out.prompt_tokens = static_cast<int>(job.prompt.size());
  const nlohmann::json body = {
      {"model", options.model.empty() ? nlohmann::json(nullptr)
                                      : nlohmann::json(options.model)},
      {"prompt", job.prompt},
      {"max_tokens", job.max_tokens},
      {"ignore_eos", true},
      {"temperature", 0},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}}};
  const std::string text = body.dump();
  const absl::Time start = absl::Now();
  absl::StatusOr<Socket> socket = Socket::Connect(server, options.timeout_s);
  if (!socket.ok() ||
      !socket->Send(absl::StrCat(
          "POST /v1/completions HTTP/1.1\r\nHost: ", server.host,
          "\r\nContent-Type: application/json\r\nContent-Length: ", text.size(),
          "\r\nConnection: close\r\n\r\n", text))) {
    out.error = "UNAVAILABLE";
    return out;
  }
  std::string pending;
  int status = 0;
  bool done = false;
  absl::Time last = start;
  while (!done && socket->Receive(pending)) {
    if (status == 0) {
      const size_t head = pending.find("\r\n\r\n");
      if (head == std::string::npos) continue;
      // "HTTP/1.1 200 OK"
      if (pending.size() < 12 ||
          !absl::SimpleAtoi(pending.substr(9, 3), &status)) {
        status = -1;
        break;
      }
      pending.erase(0, head + 4);
    }
    size_t begin;
    while ((begin = pending.find("data: ")) != std::string::npos) {
      const size_t end = pending.find("\n\n", begin);
      if (end == std::string::npos) break;
      const std::string data = pending.substr(begin + 6, end - begin - 6);
      pending.erase(0, end + 2);
      if (data == "[DONE]") {
        done = true;
        break;
      }
      const nlohmann::json chunk =
          nlohmann::json::parse(data, nullptr, /*allow_exceptions=*/false);
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        out.output_tokens = chunk["usage"].value("completion_tokens", 0);
        continue;
      }
      if (!chunk.contains("choices") || chunk["choices"].empty() ||
          !chunk["choices"][0]["finish_reason"].is_null()) {
        continue;
      }
      const absl::Time now = absl::Now();
      if (last == start) {
        out.ttft = absl::ToDoubleSeconds(now - start);
      } else {
        out.gaps.push_back(absl::ToDoubleSeconds(now - last));
      }
      last = now;
    }
  }
  out.e2e = absl::ToDoubleSeconds(absl::Now() - start);
  out.ok = status == 200 && done;
  if (!out.ok) {
    out.error = status == 429   ? "RESOURCE_EXHAUSTED"
                : status == 400 ? "INVALID_ARGUMENT"
                : status == 503 ? "UNAVAILABLE"
                : status == 200 ? "INCOMPLETE"
                                : absl::StrCat("HTTP_", status);
  }
  return out;
}

nlohmann::json Summary(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return {{"mean", v.empty() ? 0 : sum / v.size()},
          {"p50", Percentile(v, 50)},
          {"p90", Percentile(v, 90)},
          {"p99", Percentile(v, 99)},
          {"count", v.size()}};
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * values.size());
  const size_t index = static_cast<size_t>(std::max(1.0, rank)) - 1;
  return values[std::min(index, values.size() - 1)];
}

absl::StatusOr<nlohmann::json> RunLoad(const LoadOptions& options) {
  if (options.num_requests < 1 || options.concurrency < 1 || options.rate < 0 ||
      options.prompt_tokens_min < 1 ||
      options.prompt_tokens_max < options.prompt_tokens_min ||
      options.output_tokens_min < 1 ||
      options.output_tokens_max < options.output_tokens_min) {
    return absl::InvalidArgumentError(
        "need num_requests, concurrency, prompt and output lengths >= 1, min "
        "<= max, rate >= 0");
  }
  std::string model_name;
  int64_t vocab_size = 0;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Generation::Stub> stub;
  HostPort http;
  if (options.api == Api::kOpenAi) {
    ASSIGN_OR_RETURN(http, ParseHostPort(options.server));
    ASSIGN_OR_RETURN(const nlohmann::json card, FetchModelCard(http));
    model_name = card.value("id", "");
    vocab_size = card.value("vocab_size", int64_t{0});
  } else {
    channel =
        grpc::CreateChannel(options.server, grpc::InsecureChannelCredentials());
    stub = v1::Generation::NewStub(channel);
    v1::GetModelInfoResponse info;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    context.set_wait_for_ready(true);
    v1::GetModelInfoRequest request;
    request.set_model(options.model);
    grpc::Status s = stub->GetModelInfo(&context, request, &info);
    if (!s.ok()) {
      return absl::UnavailableError(absl::StrCat(
          options.server, ": GetModelInfo failed: ", s.error_message()));
    }
    model_name = info.name();
    vocab_size = info.vocab_size();
  }
  if (vocab_size <= options.first_token_id) {
    return absl::FailedPreconditionError(
        absl::StrCat(options.server, ": the model's vocabulary size (",
                     vocab_size, ") leaves no ids for random prompts"));
  }
  auto run_one = [&](const Job& job) {
    return options.api == Api::kOpenAi ? RunOneOpenAi(http, options, job)
                                       : RunOneGrpc(*stub, options, job);
  };
  std::mt19937_64 rng(options.seed);
  auto uniform = [&rng](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  const int total = options.warmup_requests + options.num_requests;
  std::vector<Job> jobs(total);
  for (Job& job : jobs) {
    const int n = uniform(options.prompt_tokens_min, options.prompt_tokens_max);
    for (int i = 0; i < n; ++i) {
      job.prompt.push_back(
          uniform(options.first_token_id, static_cast<int>(vocab_size - 1)));
    }
    job.max_tokens =
        uniform(options.output_tokens_min, options.output_tokens_max);
  }
  // Warm-up: sequential, not measured.
  for (int i = 0; i < options.warmup_requests; ++i) run_one(jobs[i]);

  std::vector<Outcome> outcomes(options.num_requests);
  const absl::Time start = absl::Now();
  if (options.rate <= 0) {
    std::atomic<int> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < options.concurrency; ++w) {
      workers.emplace_back([&] {
        for (int i = next++; i < options.num_requests; i = next++) {
          outcomes[i] = run_one(jobs[options.warmup_requests + i]);
        }
      });
    }
    for (auto& t : workers) t.join();
  } else {
    // Open loop: arrivals do not wait for earlier requests to finish.
    std::exponential_distribution<double> gap(options.rate);
    std::vector<std::thread> requests;
    absl::Time arrival = start;
    for (int i = 0; i < options.num_requests; ++i) {
      absl::SleepFor(arrival - absl::Now());
      requests.emplace_back(
          [&, i] { outcomes[i] = run_one(jobs[options.warmup_requests + i]); });
      arrival += absl::Seconds(gap(rng));
    }
    for (auto& t : requests) t.join();
  }
  const double duration = absl::ToDoubleSeconds(absl::Now() - start);

  std::vector<double> ttft, itl, e2e;
  std::map<std::string, int> errors;
  int64_t prompt_tokens = 0, output_tokens = 0;
  int ok = 0;
  for (const Outcome& o : outcomes) {
    if (!o.ok) {
      ++errors[o.error];
      continue;
    }
    ++ok;
    ttft.push_back(o.ttft);
    e2e.push_back(o.e2e);
    itl.insert(itl.end(), o.gaps.begin(), o.gaps.end());
    prompt_tokens += o.prompt_tokens;
    output_tokens += o.output_tokens;
  }
  nlohmann::json report = {
      {"server", options.server},
      {"api", options.api == Api::kOpenAi ? "openai" : "grpc"},
      {"model", model_name},
      {"mode", options.rate > 0 ? "open_loop" : "closed_loop"},
      {"concurrency", options.rate > 0 ? 0 : options.concurrency},
      {"rate", options.rate},
      {"num_requests", options.num_requests},
      {"warmup_requests", options.warmup_requests},
      {"prompt_tokens_range",
       {options.prompt_tokens_min, options.prompt_tokens_max}},
      {"output_tokens_range",
       {options.output_tokens_min, options.output_tokens_max}},
      {"completed", ok},
      {"errors", options.num_requests - ok},
      {"error_codes", errors},
      {"duration_s", duration},
      {"requests_per_s", ok / duration},
      {"output_tokens_per_s", output_tokens / duration},
      {"total_tokens_per_s", (prompt_tokens + output_tokens) / duration},
      {"prompt_tokens", prompt_tokens},
      {"output_tokens", output_tokens},
      {"ttft_s", Summary(ttft)},
      {"itl_s", Summary(itl)},
      {"e2e_s", Summary(e2e)},
  };
  return report;
}

}  // namespace ringmoe::bench

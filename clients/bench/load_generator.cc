#include "clients/bench/load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "proto/generation.grpc.pb.h"

namespace ringmoe::bench {
namespace {

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

Outcome RunOne(v1::Generation::Stub& stub, const LoadOptions& options,
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
  auto channel =
      grpc::CreateChannel(options.server, grpc::InsecureChannelCredentials());
  auto stub = v1::Generation::NewStub(channel);
  v1::GetModelInfoResponse info;
  {
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
  }
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
          uniform(options.first_token_id, info.vocab_size() - 1));
    }
    job.max_tokens =
        uniform(options.output_tokens_min, options.output_tokens_max);
  }
  // Warm-up: sequential, not measured.
  for (int i = 0; i < options.warmup_requests; ++i)
    RunOne(*stub, options, jobs[i]);

  std::vector<Outcome> outcomes(options.num_requests);
  const absl::Time start = absl::Now();
  if (options.rate <= 0) {
    std::atomic<int> next{0};
    std::vector<std::thread> workers;
    for (int w = 0; w < options.concurrency; ++w) {
      workers.emplace_back([&] {
        for (int i = next++; i < options.num_requests; i = next++) {
          outcomes[i] =
              RunOne(*stub, options, jobs[options.warmup_requests + i]);
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
      requests.emplace_back([&, i] {
        outcomes[i] = RunOne(*stub, options, jobs[options.warmup_requests + i]);
      });
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
      {"model", info.name()},
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

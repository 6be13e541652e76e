// A load generator for ringmoe_server's streaming APIs (the Generate RPC, or
// OpenAI's /v1/completions with server-sent events): closed loop
// (N streams, each starting its next request when the last one ends) or
// open loop (Poisson arrivals at a fixed rate), random prompts and output
// lengths from uniform ranges, warm-up requests left out of the figures.
// Reports time to first token, inter-token latency and end-to-end latency
// percentiles, throughput and errors.
#ifndef RINGMOE_CLIENTS_BENCH_LOAD_GENERATOR_H_
#define RINGMOE_CLIENTS_BENCH_LOAD_GENERATOR_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace ringmoe::bench {

enum class Api { kGrpc, kOpenAi };

struct LoadOptions {
  Api api = Api::kGrpc;
  // HOST:PORT of the gRPC port, or of the HTTP port for Api::kOpenAi.
  std::string server;
  std::string model;   // empty: the server's model
  int num_requests = 64;
  int warmup_requests = 4;
  // Closed loop with this many concurrent streams, unless rate > 0.
  int concurrency = 8;
  // Open loop: requests per second (Poisson arrivals); 0 = closed loop.
  double rate = 0;
  // Prompt and output lengths in tokens, uniform in [min, max]. Prompts are
  // random ids in [first_token_id, vocab); outputs ignore EOS so they have
  // exactly the drawn length.
  int prompt_tokens_min = 32;
  int prompt_tokens_max = 32;
  int output_tokens_min = 32;
  int output_tokens_max = 32;
  int first_token_id = 3;
  uint64_t seed = 1;
  double timeout_s = 300;  // per-request deadline
};

// Nearest-rank percentile of unsorted `values`; 0 when empty.
double Percentile(std::vector<double> values, double p);

// Runs the benchmark; the JSON holds the configuration and the figures
// (seconds, tokens per second, requests per second). Fails only when the
// server cannot be reached; request errors are counted in the report.
absl::StatusOr<nlohmann::json> RunLoad(const LoadOptions& options);

}  // namespace ringmoe::bench

#endif  // RINGMOE_CLIENTS_BENCH_LOAD_GENERATOR_H_

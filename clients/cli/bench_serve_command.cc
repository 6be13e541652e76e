// ringmoe bench-serve --server HOST:PORT [--api grpc|openai]
//   [--concurrency N | --rate R]
//   [--num_requests N] [--warmup_requests N] [--prompt_tokens_min/max N]
//   [--output_tokens_min/max N]: prints one JSON report (see
//   clients/bench/load_generator.h).
#include <iostream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "clients/bench/load_generator.h"
#include "clients/cli/cli_util.h"
#include "clients/cli/remote_generate.h"

ABSL_DECLARE_FLAG(std::string, server);
ABSL_DECLARE_FLAG(int64_t, seed);

ABSL_FLAG(std::string, api, "grpc",
          "bench-serve: grpc (the Generate RPC; --server is the gRPC port) or "
          "openai (streamed /v1/completions; --server is the HTTP port).");
ABSL_FLAG(std::string, model_name, "",
          "bench-serve: model name; empty = the server's.");
ABSL_FLAG(int, num_requests, 64, "bench-serve: measured requests.");
ABSL_FLAG(int, warmup_requests, 4,
          "bench-serve: requests sent first and not measured.");
ABSL_FLAG(int, concurrency, 8,
          "bench-serve: closed loop with N concurrent streams.");
ABSL_FLAG(double, rate, 0,
          "bench-serve: open loop at R requests/s (Poisson arrivals); 0 = "
          "closed loop.");
ABSL_FLAG(int, prompt_tokens_min, 32, "bench-serve: shortest random prompt.");
ABSL_FLAG(int, prompt_tokens_max, 32, "bench-serve: longest random prompt.");
ABSL_FLAG(int, output_tokens_min, 32,
          "bench-serve: fewest tokens to generate.");
ABSL_FLAG(int, output_tokens_max, 32, "bench-serve: most tokens to generate.");
ABSL_FLAG(double, request_timeout_s, 300, "bench-serve: per-request deadline.");

namespace ringmoe::cli {

int RunBenchServe() {
  bench::LoadOptions options;
  options.server = absl::GetFlag(FLAGS_server);
  if (options.server.empty()) {
    return Fail("bench-serve",
                absl::InvalidArgumentError("--server HOST:PORT is required"));
  }
  const std::string api = absl::GetFlag(FLAGS_api);
  if (api == "openai") {
    options.api = bench::Api::kOpenAi;
  } else if (api != "grpc") {
    return Fail("bench-serve",
                absl::InvalidArgumentError(absl::StrCat(
                    "--api must be grpc or openai, got '", api, "'")));
  }
  options.model = absl::GetFlag(FLAGS_model_name);
  options.num_requests = absl::GetFlag(FLAGS_num_requests);
  options.warmup_requests = absl::GetFlag(FLAGS_warmup_requests);
  options.concurrency = absl::GetFlag(FLAGS_concurrency);
  options.rate = absl::GetFlag(FLAGS_rate);
  options.prompt_tokens_min = absl::GetFlag(FLAGS_prompt_tokens_min);
  options.prompt_tokens_max = absl::GetFlag(FLAGS_prompt_tokens_max);
  options.output_tokens_min = absl::GetFlag(FLAGS_output_tokens_min);
  options.output_tokens_max = absl::GetFlag(FLAGS_output_tokens_max);
  options.timeout_s = absl::GetFlag(FLAGS_request_timeout_s);
  if (absl::GetFlag(FLAGS_seed) >= 0) options.seed = absl::GetFlag(FLAGS_seed);
  absl::StatusOr<nlohmann::json> report = bench::RunLoad(options);
  if (!report.ok()) return Fail("bench-serve", report.status());
  std::cout << report->dump(2) << "\n";
  return 0;
}

}  // namespace ringmoe::cli

// ringmoe generate --model DIR (--prompt TEXT | --input_ids 1,2,3)
//   --max_tokens N [sampling flags] [--stream] [--json]
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "clients/cli/cli_util.h"
#include "clients/cli/commands.h"
#include "engine/runtime/expert_parallel_job.h"
#include "clients/cli/remote_generate.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/engine_flags.h"
#include "engine/runtime/generation.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, prompt, "",
          "generate: prompt text (tokenized with the model's tokenizer).");
ABSL_FLAG(std::string, input_ids, "",
          "generate, logits: comma-separated token ids.");
ABSL_FLAG(std::string, server, "",
          "generate: HOST:PORT of a ringmoe server instead of --model.");
ABSL_FLAG(int32_t, max_tokens, 16, "generate: new tokens at most.");
ABSL_FLAG(double, temperature, 0.0, "generate: 0 = greedy.");
ABSL_FLAG(int32_t, top_k, 0, "generate: 0 = off.");
ABSL_FLAG(double, top_p, 1.0, "generate: 1 = off.");
ABSL_FLAG(double, min_p, 0.0, "generate: 0 = off.");
ABSL_FLAG(double, repetition_penalty, 1.0, "generate: 1 = off.");
ABSL_FLAG(double, presence_penalty, 0.0, "generate: 0 = off.");
ABSL_FLAG(double, frequency_penalty, 0.0, "generate: 0 = off.");
ABSL_FLAG(int64_t, seed, -1, "generate: sampling seed; -1 = random.");
ABSL_FLAG(std::vector<std::string>, stop, {},
          "generate: stop strings (comma-separated).");
ABSL_FLAG(std::string, stop_token_ids, "", "generate: extra stop token ids.");
ABSL_FLAG(bool, ignore_eos, false, "generate: keep going past EOS.");
ABSL_FLAG(bool, stream, false, "generate: print text as it is generated.");
ABSL_FLAG(bool, json, false,
          "generate: print one JSON object {ids, text, finish_reason}.");

namespace ringmoe::cli {
namespace {

absl::StatusOr<runtime::SamplingParams> SamplingFromFlags() {
  runtime::SamplingParams p;
  p.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
  p.top_k = absl::GetFlag(FLAGS_top_k);
  p.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
  p.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
  p.repetition_penalty =
      static_cast<float>(absl::GetFlag(FLAGS_repetition_penalty));
  p.presence_penalty =
      static_cast<float>(absl::GetFlag(FLAGS_presence_penalty));
  p.frequency_penalty =
      static_cast<float>(absl::GetFlag(FLAGS_frequency_penalty));
  if (absl::GetFlag(FLAGS_seed) >= 0) p.seed = absl::GetFlag(FLAGS_seed);
  p.max_new_tokens = absl::GetFlag(FLAGS_max_tokens);
  p.stop_strings = absl::GetFlag(FLAGS_stop);
  ASSIGN_OR_RETURN(p.stop_token_ids,
                   ParseIdList(absl::GetFlag(FLAGS_stop_token_ids)));
  p.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  return p;
}

}  // namespace

int RunGenerate() {
  if (!absl::GetFlag(FLAGS_server).empty()) {
    auto params = SamplingFromFlags();
    if (!params.ok()) return Fail("generate", params.status());
    return RunGenerateOnServer(
        absl::GetFlag(FLAGS_server), absl::GetFlag(FLAGS_prompt),
        absl::GetFlag(FLAGS_input_ids), *params, absl::GetFlag(FLAGS_stream),
        absl::GetFlag(FLAGS_json));
  }
  auto options = runtime::EngineOptionsFromFlags();
  if (!options.ok()) return Fail("generate", options.status());
  auto params = SamplingFromFlags();
  if (!params.ok()) return Fail("generate", params.status());
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  const std::string id_text = absl::GetFlag(FLAGS_input_ids);
  if (prompt.empty() == id_text.empty()) {
    return Fail("generate",
                absl::InvalidArgumentError(
                    "give exactly one of --prompt TEXT and --input_ids 1,2,3"));
  }
  auto job = runtime::ExpertParallelJob::Join(&*options);
  if (!job.ok()) return Fail("generate", job.status());
  auto engine = runtime::Engine::Load(*options);
  if (!engine.ok()) return job->Fail("ringmoe generate", engine.status());
  runtime::GenerationRequest request;
  request.params = *params;
  auto seed = job->SharedSeed(params->seed);
  if (!seed.ok()) return job->Fail("ringmoe generate", seed.status());
  request.params.seed = *seed;
  if (!prompt.empty()) {
    const tokenizer::Tokenizer* tok = (*engine)->tokenizer();
    if (tok == nullptr) {
      return job->Fail("ringmoe generate",
                       absl::FailedPreconditionError(
                           "--prompt needs tokenizer.json in the model "
                           "directory; use --input_ids"));
    }
    request.prompt_ids = tok->Encode(prompt, /*add_special_tokens=*/true);
  } else {
    auto ids = ParseIdList(id_text);
    if (!ids.ok()) return job->Fail("ringmoe generate", ids.status());
    request.prompt_ids = *ids;
  }
  const bool stream = absl::GetFlag(FLAGS_stream) &&
                      !absl::GetFlag(FLAGS_json) && job->writes_output();
  auto on_token = [stream](size_t, int32_t, const std::string& text) {
    if (stream && !text.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
  };
  auto results = runtime::Generate(**engine, {request}, on_token);
  if (!results.ok()) return job->Fail("ringmoe generate", results.status());
  if (absl::Status finished = job->Finish(**engine); !finished.ok()) {
    return job->Fail("ringmoe generate", finished);
  }
  if (!job->writes_output()) return 0;
  MaybePrintRingStats((*engine)->ring_stats());
  const runtime::GenerationResult& r = (*results)[0];
  const std::string reason(runtime::FinishReasonName(r.finish_reason));
  if (absl::GetFlag(FLAGS_json)) {
    nlohmann::json out = {
        {"ids", r.ids}, {"text", r.text}, {"finish_reason", reason}};
    std::cout << out.dump(-1, ' ', false,
                          nlohmann::json::error_handler_t::replace)
              << "\n";
    return 0;
  }
  if (!stream) std::cout << r.text;
  std::cout << "\nids: " << absl::StrJoin(r.ids, ",")
            << "\nfinish_reason: " << reason << "\n";
  return 0;
}

}  // namespace ringmoe::cli

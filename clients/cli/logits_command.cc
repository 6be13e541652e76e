// ringmoe logits --model DIR --input_ids 1,2,3 --out FILE.safetensors
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "clients/cli/cli_util.h"
#include "clients/cli/commands.h"
#include "engine/runtime/expert_parallel_job.h"
#include "engine/checkpoint/safetensors.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/engine_flags.h"

ABSL_DECLARE_FLAG(std::string, input_ids);
ABSL_FLAG(std::string, out, "", "logits: output .safetensors file.");

namespace ringmoe::cli {

int RunLogits() {
  auto options = runtime::EngineOptionsFromFlags();
  if (!options.ok()) return Fail("logits", options.status());
  auto ids = ParseIdList(absl::GetFlag(FLAGS_input_ids));
  if (!ids.ok()) return Fail("logits", ids.status());
  if (ids->empty())
    return Fail("logits",
                absl::InvalidArgumentError("--input_ids is required"));
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty())
    return Fail("logits", absl::InvalidArgumentError("--out FILE is required"));
  if (options->kv_cache_tokens == 0) {
    options->kv_cache_tokens = static_cast<int64_t>(ids->size());
  }
  auto job = runtime::ExpertParallelJob::Join(&*options);
  if (!job.ok()) return Fail("logits", job.status());
  auto engine = runtime::Engine::Load(*options);
  if (!engine.ok()) return job->Fail("ringmoe logits", engine.status());
  std::vector<float> logits;
  absl::Status status =
      (*engine)->Step({{0, *ids, /*all_logits=*/true}}, &logits);
  if (!status.ok()) return job->Fail("ringmoe logits", status);
  if (absl::Status finished = job->Finish(**engine); !finished.ok()) {
    return job->Fail("ringmoe logits", finished);
  }
  if (!job->writes_output()) return 0;
  MaybePrintRingStats((*engine)->ring_stats());
  const int64_t vocab = (*engine)->spec().vocab_size;
  status = checkpoint::WriteSafetensors(
      out, {{"logits",
             checkpoint::DType::kF32,
             {static_cast<int64_t>(ids->size()), vocab},
             absl::string_view(reinterpret_cast<const char*>(logits.data()),
                               logits.size() * sizeof(float))}});
  if (!status.ok()) return Fail("logits", status);
  return 0;
}

}  // namespace ringmoe::cli

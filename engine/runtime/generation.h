// Offline generation: prefill a set of prompts together, then decode them
// together one token per step until each finishes. The CLI's `generate`
// uses it; the server's scheduler generalises it to requests that come and
// go between steps.
#ifndef RINGMOE_ENGINE_RUNTIME_GENERATION_H_
#define RINGMOE_ENGINE_RUNTIME_GENERATION_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/stop_criteria.h"

namespace ringmoe::runtime {

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
};

struct GenerationResult {
  std::vector<int32_t> ids;  // generated ids, including a final stop token
  std::string text;          // their text, cut before any stop string
  FinishReason finish_reason = FinishReason::kNone;
};

// Called after each generated token of request `index` with the text that
// became final (possibly empty).
using TokenCallback =
    std::function<void(size_t index, int32_t token, const std::string& text)>;

// Generates for every request in one batch. Text needs the engine's
// tokenizer; without one, `text` stays empty and stop strings are refused.
absl::StatusOr<std::vector<GenerationResult>> Generate(
    Engine& engine, const std::vector<GenerationRequest>& requests,
    const TokenCallback& on_token = nullptr);

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_GENERATION_H_

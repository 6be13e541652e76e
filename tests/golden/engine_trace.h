// What the golden exactness tests compare bit for bit between two ways of
// running one model (every ring configuration, several ranks, a device):
// each case's prompt and greedy decode logits, and all cases in one step.
#ifndef RINGMOE_TESTS_GOLDEN_ENGINE_TRACE_H_
#define RINGMOE_TESTS_GOLDEN_ENGINE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"

namespace ringmoe::golden {

struct Trace {
  std::vector<std::vector<float>> logits;  // per case: prompt + decode rows
  std::vector<std::vector<int32_t>> greedy;
  std::vector<float> batched;  // every case in one step
  // Then one decode step of every case (its greedy token from `batched`),
  // the even cases asking for their greedy token only
  // (SequenceChunk::greedy_token): the odd cases' logits and the even
  // cases' tokens.
  std::vector<float> batched_decode;
  std::vector<int32_t> batched_greedy;
};

// Runs every input as its own sequence (prompt, then `greedy_steps` greedy
// tokens), then all prompts in one step and one decode step after it; frees
// their KV blocks. A failed step is a test failure and ends the trace
// there.
Trace RunTrace(runtime::Engine& engine,
               const std::vector<std::vector<int32_t>>& inputs,
               int greedy_steps);

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b);

// The first `cases` golden cases' input ids of the model in `dir`; empty on
// error (a test failure).
std::vector<std::vector<int32_t>> GoldenInputs(const std::string& dir,
                                               int cases);

}  // namespace ringmoe::golden

#endif  // RINGMOE_TESTS_GOLDEN_ENGINE_TRACE_H_

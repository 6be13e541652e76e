#include "tests/golden/engine_trace.h"

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "engine/checkpoint/safetensors.h"
#include "gtest/gtest.h"

namespace ringmoe::golden {

Trace RunTrace(runtime::Engine& engine,
               const std::vector<std::vector<int32_t>>& inputs,
               int greedy_steps) {
  Trace trace;
  const int64_t vocab = engine.spec().vocab_size;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<float> logits;
    const runtime::SequenceId seq = 100 + i;
    // Stop at a failure: a communicator refuses every later collective.
    if (absl::Status s = engine.Step({{seq, inputs[i], true}}, &logits);
        !s.ok()) {
      ADD_FAILURE() << s;
      return trace;
    }
    std::vector<float> all = logits;
    std::vector<int32_t> greedy;
    for (int step = 0; step < greedy_steps; ++step) {
      const float* last = &logits[logits.size() - vocab];
      greedy.push_back(
          static_cast<int32_t>(std::max_element(last, last + vocab) - last));
      const std::vector<int32_t> next = {greedy.back()};
      if (absl::Status s = engine.Step({{seq, next, false}}, &logits);
          !s.ok()) {
        ADD_FAILURE() << s;
        return trace;
      }
      all.insert(all.end(), logits.begin(), logits.end());
    }
    engine.Release(seq);
    trace.logits.push_back(std::move(all));
    trace.greedy.push_back(std::move(greedy));
  }
  std::vector<runtime::SequenceChunk> chunks;
  for (size_t i = 0; i < inputs.size(); ++i) {
    chunks.push_back(
        {static_cast<runtime::SequenceId>(200 + i), inputs[i], true});
  }
  if (absl::Status s = engine.Step(chunks, &trace.batched); !s.ok()) {
    ADD_FAILURE() << s;
    return trace;
  }
  std::vector<std::vector<int32_t>> next(inputs.size());
  const float* last = trace.batched.data();
  for (size_t i = 0; i < inputs.size(); ++i) {
    last += inputs[i].size() * vocab;
    next[i] = {static_cast<int32_t>(std::max_element(last - vocab, last) -
                                    (last - vocab))};
    chunks[i] = {static_cast<runtime::SequenceId>(200 + i), next[i]};
    chunks[i].greedy_token = i % 2 == 0;
  }
  EXPECT_TRUE(engine
                  .Step(chunks, &trace.batched_decode, /*work=*/nullptr,
                        &trace.batched_greedy)
                  .ok());
  for (size_t i = 0; i < inputs.size(); ++i) engine.Release(200 + i);
  return trace;
}

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::vector<int32_t>> GoldenInputs(const std::string& dir,
                                               int cases) {
  auto golden = checkpoint::SafetensorsFile::Open(dir + "/golden.safetensors");
  EXPECT_TRUE(golden.ok()) << golden.status();
  std::vector<std::vector<int32_t>> inputs;
  for (int i = 0; golden.ok() && i < cases; ++i) {
    auto ids = checkpoint::CopyAsInt64(
        *(*golden)->Find("case" + std::to_string(i) + ".input_ids"));
    EXPECT_TRUE(ids.ok());
    if (!ids.ok()) return {};
    inputs.emplace_back(ids->begin(), ids->end());
  }
  return inputs;
}

}  // namespace ringmoe::golden

// What only the CPU backend has: attention threaded and not (with fewer
// tokens than threads a token's positions are split over threads and
// merged), and uploads that keep host weights. Every operation against
// double-precision references, on every backend, is in
// backend_conformance_test.cc; both run on whichever kernel path this CPU
// takes (//tests/isa runs the engine's tests on the others).
#include "engine/backend/cpu_backend.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend_test_util.h"
#include "gtest/gtest.h"

namespace ringmoe::backend {
namespace {

// A step of several sequences in a paged cache: one gets a chunk of new
// tokens, the others one token each.
struct AttentionCase {
  int64_t heads, kv_heads, head_dim, block_size, window;
  std::vector<int64_t> lengths;  // per sequence, after the step
  std::vector<int64_t> new_tokens;
  bool sinks = false;
};

void CheckAttention(const AttentionCase& c, ThreadPool* pool,
                    std::mt19937* rng) {
  CpuBackend backend(pool);
  const int64_t kvw = c.kv_heads * c.head_dim, qw = c.heads * c.head_dim;
  std::vector<HostKv> kv(c.lengths.size());
  std::vector<std::vector<const float*>> k_blocks, v_blocks;
  std::vector<KvBlocks> sequences;
  std::vector<int32_t> sequence_of;
  std::vector<int64_t> position_of;
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    const int64_t blocks = (c.lengths[s] + c.block_size - 1) / c.block_size;
    kv[s].keys = Random(blocks * c.block_size * kvw, rng);
    kv[s].values = Random(blocks * c.block_size * kvw, rng);
  }
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    const int64_t blocks = (c.lengths[s] + c.block_size - 1) / c.block_size;
    k_blocks.emplace_back();
    v_blocks.emplace_back();
    for (int64_t b = 0; b < blocks; ++b) {
      k_blocks[s].push_back(kv[s].keys.data() + b * c.block_size * kvw);
      v_blocks[s].push_back(kv[s].values.data() + b * c.block_size * kvw);
    }
    for (int64_t p = c.lengths[s] - c.new_tokens[s]; p < c.lengths[s]; ++p) {
      sequence_of.push_back(static_cast<int32_t>(s));
      position_of.push_back(p);
    }
  }
  for (size_t s = 0; s < c.lengths.size(); ++s) {
    sequences.push_back({k_blocks[s].data(), v_blocks[s].data(), c.block_size});
  }
  const int64_t n = static_cast<int64_t>(position_of.size());
  std::vector<float> q = Random(n * qw, rng), out(n * qw);
  const std::vector<float> sinks = Random(c.heads, rng, 2.f);
  AttentionJob job;
  job.q = Of(q, n, qw);
  job.heads = c.heads;
  job.kv_heads = c.kv_heads;
  job.head_dim = c.head_dim;
  job.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
  job.window = c.window;
  job.sequences = sequences;
  job.sequence_of = sequence_of;
  job.position_of = position_of;
  if (c.sinks) job.sinks = {sinks.data(), c.heads};
  job.out = Of(out, n, qw);
  backend.Attend(job);

  ExpectNear(
      out,
      ReferenceAttention(job, q, kv, c.sinks ? sinks : std::vector<float>()),
      2e-5,
      "heads " + std::to_string(c.heads) + " window " +
          std::to_string(c.window) + " tokens " + std::to_string(n) +
          (c.sinks ? " sinks" : ""));
}

TEST(CpuBackendTest, AttendMatchesADoubleReference) {
  std::mt19937 rng(3);
  ThreadPool pool(3);
  const AttentionCase cases[] = {
      // Prefill chunk beside decode tokens: runs of query blocks.
      {4, 2, 12, 4, 0, {37, 5, 90}, {20, 1, 1}},
      {4, 2, 12, 4, 7, {37, 5, 90}, {20, 1, 1}},
      {6, 6, 9, 8, 16, {50}, {50}},
      // Fewer tokens than threads: long positions split and merged.
      {4, 1, 16, 16, 0, {300}, {1}},
      {4, 1, 16, 16, 150, {300, 200}, {1, 1}},
      {2, 2, 5, 3, 0, {1}, {1}},
  };
  for (AttentionCase c : cases) {
    for (bool sinks : {false, true}) {
      c.sinks = sinks;
      CheckAttention(c, &pool, &rng);
      CheckAttention(c, nullptr, &rng);
    }
  }
}

TEST(CpuBackendTest, UploadKeepsHostWeightsAndRefusesDeviceOnes) {
  CpuBackend backend(nullptr);
  std::vector<float> data(6, 1.f);
  Weight w = F32Weight(data, 2, 3);
  absl::StatusOr<Weight> uploaded = backend.Upload(w);
  ASSERT_TRUE(uploaded.ok());
  EXPECT_EQ(uploaded->data, w.data);
  w.memory = MemorySpace::kDevice;
  EXPECT_FALSE(backend.Upload(w).ok());
  const Vector v{data.data(), 6, MemorySpace::kDevice};
  EXPECT_FALSE(backend.Upload(v).ok());
}

}  // namespace
}  // namespace ringmoe::backend

// SiLU-gated MLPs (experts, shared experts, dense feed-forward layers) run
// together: the gate and up products of all of a step's MLPs in one
// parallel loop, then their down products in another, so each weight matrix
// is read once per step for all the rows it applies to and the threads split
// the work of all MLPs at once (over MLPs and output rows).
#ifndef RINGMOE_ENGINE_MOE_MLP_H_
#define RINGMOE_ENGINE_MOE_MLP_H_

#include <cstdint>

#include "absl/types/span.h"
#include "base/thread_pool.h"
#include "engine/model/model_weights.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::moe {

// out[n, hidden] = down(silu(gate(x)) * up(x)) for x[n, hidden].
struct MlpTask {
  const model::MlpWeights* weights;
  const float* x;
  int64_t n;
  float* out;
};

// Where products run and what they are counted against.
struct ComputeContext {
  ThreadPool* pool = nullptr;            // null: single-threaded
  kernels::ProductWork* work = nullptr;  // null: not counted
};

// Runs every task. Each output row depends only on its task's weights and
// input row, never on which other tasks run beside it.
void RunMlps(absl::Span<const MlpTask> tasks, const ComputeContext& compute);

}  // namespace ringmoe::moe

#endif  // RINGMOE_ENGINE_MOE_MLP_H_

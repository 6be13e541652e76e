// The routed experts of a MoE layer on the device, routing included, so a
// decode step never waits for the host between layers: route (a warp per
// token) and group the (token, expert) pairs by expert (one block, one
// launch for both), the gate
// and up products with the activation and the down products (a block per
// expert and kDotWeightRows weight rows, each expert's weights read once for
// up to eight of its rows at a time; for more than one token, a block per
// expert and kMmaWeightRows weight rows on the tensor cores, up to 32 rows
// at a time), and the weighted combine.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/block_dot.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/mma_dot.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/weight_decode.cuh"

namespace ringmoe::cuda {
namespace {

constexpr int kGroupThreads = 1024;

size_t Aligned(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

// Where LaunchRoutedExperts keeps its intermediate results in the scratch.
struct Scratch {
  int32_t* pair_expert;   // [P]: token t's j-th expert at t * top_k + j
  float* pair_weight;     // [P]
  int32_t* pair_row;      // [P]: the pair's row in expert order
  int32_t* row_token;     // [P]: the token of each row in expert order
  int32_t* slot_expert;   // [S]: the distinct experts, ascending
  int32_t* slot_first;    // [S]: their first row
  int32_t* slot_rows;     // [S]
  int32_t* active_slots;  // [1]
  float* hidden;          // [P, intermediate]
  float* expert_out;      // [P, hidden]

  // `base` null: only `bytes` is meaningful.
  Scratch(void* base, int64_t pairs, int64_t slots, int64_t hidden_size,
          int64_t intermediate) {
    bytes = 0;
    const auto take = [&](size_t size) {
      const uintptr_t at = reinterpret_cast<uintptr_t>(base) + bytes;
      bytes += Aligned(size);
      return reinterpret_cast<char*>(at);
    };
    pair_expert = reinterpret_cast<int32_t*>(take(pairs * 4));
    pair_weight = reinterpret_cast<float*>(take(pairs * 4));
    pair_row = reinterpret_cast<int32_t*>(take(pairs * 4));
    row_token = reinterpret_cast<int32_t*>(take(pairs * 4));
    slot_expert = reinterpret_cast<int32_t*>(take(slots * 4));
    slot_first = reinterpret_cast<int32_t*>(take(slots * 4));
    slot_rows = reinterpret_cast<int32_t*>(take(slots * 4));
    active_slots = reinterpret_cast<int32_t*>(take(4));
    hidden = reinterpret_cast<float*>(take(pairs * intermediate * 4));
    expert_out = reinterpret_cast<float*>(take(pairs * hidden_size * 4));
  }
  size_t bytes;
};

int64_t Slots(int64_t pairs, int64_t num_experts) {
  return std::min(pairs, num_experts);
}

// Whether (v, i) ranks before (best_v, best_i): higher value, ties to the
// lower index; best_i < 0 is no candidate yet.
__device__ __forceinline__ bool Better(float v, int i, float best_v,
                                       int best_i) {
  return i >= 0 && (best_i < 0 || v > best_v || (v == best_v && i < best_i));
}

// Shared memory one routing warp works in, in 4-byte words: scores and
// selection scores [E], group scores [G], then eligibility flags [E] and
// kept groups [G].
int64_t RouteWords(const DeviceRouting& r) {
  return 3 * int64_t{r.num_experts} + 2 * int64_t{r.num_groups};
}

// Token t's experts and weights, by one whole warp in `shared`
// (RouteWords); lane 0 writes them.
__device__ void RouteToken(const float* __restrict__ logits,
                           const DeviceRouting& r, int64_t t, float* shared,
                           int32_t* __restrict__ pair_expert,
                           float* __restrict__ pair_weight) {
  const int experts = r.num_experts, groups = r.num_groups;
  float* score = shared;
  float* select = score + experts;
  float* group_score = select + experts;
  int* eligible = reinterpret_cast<int*>(group_score + groups);
  int* kept_group = eligible + experts;
  const int lane = threadIdx.x & 31;
  const float* l = logits + t * experts;

  const bool softmax = !r.top_k_first && !r.sigmoid;
  float max_logit = -INFINITY;
  if (softmax) {
    for (int e = lane; e < experts; e += 32) max_logit = fmaxf(max_logit, l[e]);
    for (int offset = 16; offset > 0; offset >>= 1) {
      max_logit =
          fmaxf(max_logit, __shfl_xor_sync(0xffffffffu, max_logit, offset));
    }
  }
  float sum = 0.f;
  for (int e = lane; e < experts; e += 32) {
    float s = l[e];
    if (softmax) {
      s = expf(s - max_logit);
      sum += s;
    } else if (!r.top_k_first) {
      s = 1.f / (1.f + expf(-s));
    }
    score[e] = s;
  }
  const float inverse = softmax ? 1.f / WarpSum(sum) : 1.f;
  for (int e = lane; e < experts; e += 32) {
    if (softmax) score[e] *= inverse;
    select[e] = score[e] + (r.d_selection_bias ? r.d_selection_bias[e] : 0.f);
    eligible[e] = 1;
  }
  __syncwarp();

  if (groups > 1) {
    const int per_group = experts / groups;
    for (int g = lane; g < groups; g += 32) {
      const float* s = select + g * per_group;
      float first = -INFINITY, second = -INFINITY;
      for (int i = 0; i < per_group; ++i) {
        if (s[i] > first) {
          second = first;
          first = s[i];
        } else if (s[i] > second) {
          second = s[i];
        }
      }
      group_score[g] =
          r.group_sum_of_two && per_group > 1 ? first + second : first;
      kept_group[g] = 0;
    }
    __syncwarp();
    if (lane == 0) {
      for (int j = 0; j < r.topk_groups; ++j) {
        int best = -1;
        for (int g = 0; g < groups; ++g) {
          if (!kept_group[g] &&
              Better(group_score[g], g, best < 0 ? 0.f : group_score[best],
                     best)) {
            best = g;
          }
        }
        if (best >= 0) kept_group[best] = 1;
      }
    }
    __syncwarp();
    for (int e = lane; e < experts; e += 32) {
      eligible[e] = kept_group[e / per_group];
    }
    __syncwarp();
  }

  // The top_k eligible experts, best first; lane 0 keeps them.
  int chosen[kMaxRoutedTopK];
  for (int j = 0; j < r.top_k; ++j) {
    float best_v = 0.f;
    int best_i = -1;
    for (int e = lane; e < experts; e += 32) {
      if (eligible[e] && Better(select[e], e, best_v, best_i)) {
        best_v = select[e];
        best_i = e;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
      const int i = __shfl_xor_sync(0xffffffffu, best_i, offset);
      if (Better(v, i, best_v, best_i)) {
        best_v = v;
        best_i = i;
      }
    }
    chosen[j] = best_i;
    if (best_i >= 0 && lane == (best_i & 31)) eligible[best_i] = 0;
    __syncwarp();
  }
  if (lane != 0) return;
  float weight[kMaxRoutedTopK];
  for (int j = 0; j < r.top_k; ++j) {
    weight[j] = chosen[j] >= 0 ? score[chosen[j]] : 0.f;
  }
  if (r.top_k_first) {
    float max_w = weight[0];
    for (int j = 1; j < r.top_k; ++j) max_w = fmaxf(max_w, weight[j]);
    float total = 0.f;
    for (int j = 0; j < r.top_k; ++j) {
      weight[j] = expf(weight[j] - max_w);
      total += weight[j];
    }
    const float inv = 1.f / total;
    for (int j = 0; j < r.top_k; ++j) weight[j] *= inv;
  }
  float total = 0.f;
  for (int j = 0; j < r.top_k; ++j) total += weight[j];
  for (int j = 0; j < r.top_k; ++j) {
    float w = weight[j];
    if (r.renormalize) w /= total + 1e-20f;
    pair_expert[t * r.top_k + j] = max(chosen[j], 0);
    pair_weight[t * r.top_k + j] = w * r.scaling_factor;
  }
}

// Exclusive prefix sums over the block (kGroupThreads threads) of a and b,
// and their totals.
__device__ void BlockExclusiveScan2(int a, int b, int* a_before, int* b_before,
                                    int* a_total, int* b_total) {
  __shared__ int warp_a[32], warp_b[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int ia = a, ib = b;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int va = __shfl_up_sync(0xffffffffu, ia, offset);
    const int vb = __shfl_up_sync(0xffffffffu, ib, offset);
    if (lane >= offset) {
      ia += va;
      ib += vb;
    }
  }
  if (lane == 31) {
    warp_a[warp] = ia;
    warp_b[warp] = ib;
  }
  __syncthreads();
  int sa = 0, sb = 0, ta = 0, tb = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) {
    if (w < warp) {
      sa += warp_a[w];
      sb += warp_b[w];
    }
    ta += warp_a[w];
    tb += warp_b[w];
  }
  *a_before = sa + ia - a;
  *b_before = sb + ib - b;
  *a_total = ta;
  *b_total = tb;
}

// The pairs grouped by expert (Scratch's rows and slots), by the whole
// block of kGroupThreads threads.
__device__ void GroupPairs(int pairs, int top_k, int experts, const Scratch& s,
                           uint64_t expert_bytes,
                           unsigned long long* weight_bytes) {
  __shared__ int count[kMaxRoutedExperts];
  __shared__ int first_row[kMaxRoutedExperts];
  const int e = threadIdx.x;
  if (e < experts) count[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    atomicAdd(&count[s.pair_expert[i]], 1);
  }
  __syncthreads();
  const int rows = e < experts ? count[e] : 0;
  int rows_before, slots_before, total_rows, total_slots;
  BlockExclusiveScan2(rows, rows > 0 ? 1 : 0, &rows_before, &slots_before,
                      &total_rows, &total_slots);
  if (e < experts) first_row[e] = rows_before;
  if (rows > 0) {
    s.slot_expert[slots_before] = e;
    s.slot_first[slots_before] = rows_before;
    s.slot_rows[slots_before] = rows;
  }
  if (threadIdx.x == 0) {
    *s.active_slots = total_slots;
    if (weight_bytes != nullptr) {
      atomicAdd(weight_bytes,
                static_cast<unsigned long long>(total_slots) * expert_bytes);
    }
  }
  __syncthreads();
  // Tokens ascending within an expert: the pairs come in token order.
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int expert = s.pair_expert[i];
    int rank = 0;
    for (int j = 0; j < i; ++j) rank += s.pair_expert[j] == expert;
    const int row = first_row[expert] + rank;
    s.pair_row[i] = row;
    s.row_token[row] = i / top_k;
  }
}

// Dynamic shared memory of RouteAndGroupKernel's routing warps: with the
// grouping's static arrays, within the 48 KB a block gets without opting in.
constexpr int64_t kRouteSharedBytes = 32 << 10;

// Routes the n tokens, `route_warps` warps taking them in turn (each in its
// own `route_words` of the dynamic shared memory), then groups their pairs:
// one block of kGroupThreads, one launch.
__global__ void __launch_bounds__(kGroupThreads)
    RouteAndGroupKernel(const float* __restrict__ logits, DeviceRouting r,
                        int n, int route_warps, int route_words, Scratch s,
                        uint64_t expert_bytes,
                        unsigned long long* weight_bytes) {
  extern __shared__ float route_shared[];
  const int warp = static_cast<int>(threadIdx.x >> 5);
  if (warp < route_warps) {
    for (int t = warp; t < n; t += route_warps) {
      RouteToken(logits, r, t, route_shared + warp * route_words, s.pair_expert,
                 s.pair_weight);
      // Lane 0 reads the scores after the others are done with the token.
      __syncwarp();
    }
  }
  // Every token's pairs, written by other warps, visible to the block.
  __syncthreads();
  GroupPairs(n * r.top_k, r.top_k, r.num_experts, s, expert_bytes,
             weight_bytes);
}

// The activation rows [done, done + kDotActivationRows) of a slot whose
// rows start at `first` (the last repeated past `m`).
__device__ __forceinline__ void PassRows(
    const float* base, int64_t stride, const int32_t* index, int first,
    int done, int m, const float* (&x)[kDotActivationRows]) {
#pragma unroll
  for (int t = 0; t < kDotActivationRows; ++t) {
    const int row = first + done + min(t, m - 1);
    x[t] = base + static_cast<int64_t>(index ? index[row] : row) * stride;
  }
}

// hidden[row, j] = act(gate_j · x[token of row], up_j · x[...]) for every
// row of the block's expert and its kGateUpColumns values of j.
constexpr int kGateUpColumns = kDotWeightRows / 2;

// kActs: the most rows an expert has (1 or kDotActivationRows).
template <WeightType kType, int kActs>
__global__ void __launch_bounds__(kMaxDotThreads)
    GateUpKernel(RoutedExpertsParams p, Scratch s) {
  __shared__ BlockDotShared shared;
  const int slot = blockIdx.y;
  if (slot >= *s.active_slots) return;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kGateUpColumns;
  const int columns = static_cast<int>(
      min(static_cast<int64_t>(kGateUpColumns), p.intermediate - j0));
  const DeviceExpert& expert = p.d_experts[s.slot_expert[slot]];
  const DeviceWeight* const gate = p.fused ? &expert.gate_up : &expert.gate;
  const DeviceWeight* const up = p.fused ? &expert.gate_up : &expert.up;
  // Weight rows gate j0, up j0, gate j0 + 1, up j0 + 1.
  const DeviceWeight* const weights[kDotWeightRows] = {gate, up, gate, up};
  int64_t row[kDotWeightRows];
#pragma unroll
  for (int i = 0; i < kDotWeightRows; ++i) {
    const int64_t j = j0 + i / 2;
    row[i] = p.fused ? 2 * j + i % 2 : j;
  }
  const int first = s.slot_first[slot], rows = s.slot_rows[slot];
  // The epilogue's thread: column j0 + c of activation row t.
  const int c = threadIdx.x / kDotActivationRows;
  const int t = threadIdx.x % kDotActivationRows;
  float gate_bias = 0.f, up_bias = 0.f;
  if (c < columns && p.fused && expert.gate_up_bias != nullptr) {
    gate_bias = expert.gate_up_bias[2 * (j0 + c)];
    up_bias = expert.gate_up_bias[2 * (j0 + c) + 1];
  }
  for (int done = 0; done < rows; done += kActs) {
    const int m = min(kActs, rows - done);
    const float* x[kDotActivationRows];
    PassRows(p.d_x, p.hidden, s.row_token, first, done, m, x);
    BlockDot<kType, kActs>(weights, row, 2 * columns, x, m,
                           p.vectorized_gate_up, shared);
    if (c < columns && t < m) {
      s.hidden[static_cast<int64_t>(first + done + t) * p.intermediate + j0 +
               c] =
          GatedActivation(shared.result[2 * c][t] + gate_bias,
                          shared.result[2 * c + 1][t] + up_bias, p.activation);
    }
  }
}

// expert_out[row, r] = down_r · hidden[row] (+ bias) for every row of the
// block's expert and its kDotWeightRows values of r.
template <WeightType kType, int kActs>
__global__ void __launch_bounds__(kMaxDotThreads)
    DownKernel(RoutedExpertsParams p, Scratch s) {
  __shared__ BlockDotShared shared;
  const int slot = blockIdx.y;
  if (slot >= *s.active_slots) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kDotWeightRows;
  const int out_rows = static_cast<int>(
      min(static_cast<int64_t>(kDotWeightRows), p.hidden - r0));
  const DeviceExpert& expert = p.d_experts[s.slot_expert[slot]];
  const DeviceWeight* const down = &expert.down;
  const DeviceWeight* const weights[kDotWeightRows] = {down, down, down, down};
  const int64_t row[kDotWeightRows] = {r0, r0 + 1, r0 + 2, r0 + 3};
  const int i = threadIdx.x / kDotActivationRows;
  const int t = threadIdx.x % kDotActivationRows;
  const float bias = i < out_rows && expert.down_bias != nullptr
                         ? expert.down_bias[r0 + i]
                         : 0.f;
  const int first = s.slot_first[slot], rows = s.slot_rows[slot];
  for (int done = 0; done < rows; done += kActs) {
    const int m = min(kActs, rows - done);
    const float* h[kDotActivationRows];
    PassRows(s.hidden, p.intermediate, nullptr, first, done, m, h);
    BlockDot<kType, kActs>(weights, row, out_rows, h, m, p.vectorized_down,
                           shared);
    if (i < out_rows && t < m) {
      s.expert_out[static_cast<int64_t>(first + done + t) * p.hidden + r0 + i] =
          shared.result[i][t] + bias;
    }
  }
}

// GateUpKernel on the tensor cores: the block's 16 weight rows are the gate
// and up rows of kMmaGateUpColumns values of j, 8 · kTiles rows a pass.
constexpr int kMmaGateUpColumns = kMmaWeightRows / 2;

// Lane g's activation row of each tile of a pass: row done + 8k + g of the
// slot whose rows start at `first` (the pass's last where that is past m).
template <int kTiles>
__device__ __forceinline__ void MmaPassRows(const float* base, int64_t stride,
                                            const int32_t* index, int first,
                                            int done, int m,
                                            const float* (&x)[kTiles]) {
  const int g = (threadIdx.x & 31) >> 2;
#pragma unroll
  for (int t = 0; t < kTiles; ++t) {
    const int row = first + done + min(kMmaTileRows * t + g, m - 1);
    x[t] = base + static_cast<int64_t>(index ? index[row] : row) * stride;
  }
}

template <WeightType kType, int kTiles>
__global__ void __launch_bounds__(kMmaThreads)
    MmaGateUpKernel(RoutedExpertsParams p, Scratch s) {
  __shared__ MmaDotShared<kTiles> shared;
  const int slot = blockIdx.y;
  if (slot >= *s.active_slots) return;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * kMmaGateUpColumns;
  const int columns = static_cast<int>(
      min(static_cast<int64_t>(kMmaGateUpColumns), p.intermediate - j0));
  const DeviceExpert& expert = p.d_experts[s.slot_expert[slot]];
  // Rows 0-7 gate j0 + i, rows 8-15 up j0 + i.
  const MmaRows rows = p.fused ? MmaRows{{&expert.gate_up, &expert.gate_up},
                                         {2 * j0, 2 * j0 + 1},
                                         {2, 2},
                                         {columns, columns}}
                               : MmaRows{{&expert.gate, &expert.up},
                                         {j0, j0},
                                         {1, 1},
                                         {columns, columns}};
  const int first = s.slot_first[slot], total = s.slot_rows[slot];
  constexpr int kPassRows = kMmaTileRows * kTiles;
  for (int done = 0; done < total; done += kPassRows) {
    const int m = min(kPassRows, total - done);
    const float* x[kTiles];
    MmaPassRows(p.d_x, p.hidden, s.row_token, first, done, m, x);
    MmaDot<kType, kTiles>(rows, p.hidden, x, m, shared);
    for (int e = threadIdx.x; e < kMmaGateUpColumns * kPassRows;
         e += kMmaThreads) {
      const int c = e % kMmaGateUpColumns, t = e / kMmaGateUpColumns;
      if (c >= columns || t >= m) continue;
      float gate_bias = 0.f, up_bias = 0.f;
      if (p.fused && expert.gate_up_bias != nullptr) {
        gate_bias = expert.gate_up_bias[2 * (j0 + c)];
        up_bias = expert.gate_up_bias[2 * (j0 + c) + 1];
      }
      s.hidden[static_cast<int64_t>(first + done + t) * p.intermediate + j0 +
               c] =
          GatedActivation(shared.partial[0][c][t] + gate_bias,
                          shared.partial[0][kMmaTileRows + c][t] + up_bias,
                          p.activation);
    }
  }
}

// DownKernel on the tensor cores: kMmaWeightRows values of r a block.
template <WeightType kType, int kTiles>
__global__ void __launch_bounds__(kMmaThreads)
    MmaDownKernel(RoutedExpertsParams p, Scratch s) {
  __shared__ MmaDotShared<kTiles> shared;
  const int slot = blockIdx.y;
  if (slot >= *s.active_slots) return;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x) * kMmaWeightRows;
  const int64_t left = p.hidden - r0;
  const DeviceExpert& expert = p.d_experts[s.slot_expert[slot]];
  const MmaRows rows{{&expert.down, &expert.down},
                     {r0, r0 + kMmaTileRows},
                     {1, 1},
                     {static_cast<int>(min(left, int64_t{kMmaTileRows})),
                      static_cast<int>(min(max(left - kMmaTileRows, int64_t{0}),
                                           int64_t{kMmaTileRows}))}};
  const int first = s.slot_first[slot], total = s.slot_rows[slot];
  constexpr int kPassRows = kMmaTileRows * kTiles;
  for (int done = 0; done < total; done += kPassRows) {
    const int m = min(kPassRows, total - done);
    const float* h[kTiles];
    MmaPassRows(s.hidden, p.intermediate, nullptr, first, done, m, h);
    MmaDot<kType, kTiles>(rows, p.intermediate, h, m, shared);
    for (int e = threadIdx.x; e < kMmaWeightRows * kPassRows;
         e += kMmaThreads) {
      const int i = e % kMmaWeightRows, t = e / kMmaWeightRows;
      if (i >= left || t >= m) continue;
      const float bias =
          expert.down_bias != nullptr ? expert.down_bias[r0 + i] : 0.f;
      s.expert_out[static_cast<int64_t>(first + done + t) * p.hidden + r0 + i] =
          shared.partial[0][i][t] + bias;
    }
  }
}

// out[t] = Σ weight · expert_out[row] over token t's pairs, in ascending
// expert order (a token's pairs in their own order where experts repeat);
// block (t, y) the columns y·blockDim.x + i·gridDim.y·blockDim.x.
__global__ void CombineKernel(int top_k, int64_t hidden, Scratch s,
                              float* __restrict__ out) {
  __shared__ int row[kMaxRoutedTopK];
  __shared__ float weight[kMaxRoutedTopK];
  const int64_t t = blockIdx.x;
  const int j = threadIdx.x;
  if (j < top_k) {
    const int32_t* experts = s.pair_expert + t * top_k;
    const int e = experts[j];
    int rank = 0;
    for (int i = 0; i < top_k; ++i) {
      rank += experts[i] < e || (experts[i] == e && i < j);
    }
    row[rank] = s.pair_row[t * top_k + j];
    weight[rank] = s.pair_weight[t * top_k + j];
  }
  __syncthreads();
  for (int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
       c < hidden; c += static_cast<int64_t>(gridDim.y) * blockDim.x) {
    float acc = 0.f;
    for (int k = 0; k < top_k; ++k) {
      acc +=
          weight[k] * s.expert_out[static_cast<int64_t>(row[k]) * hidden + c];
    }
    out[t * hidden + c] = acc;
  }
}

unsigned Blocks(int64_t size, int64_t per_block) {
  return static_cast<unsigned>((size + per_block - 1) / per_block);
}

template <WeightType kType, int kTiles>
void LaunchMmaGateUp(const RoutedExpertsParams& p, const Scratch& s,
                     unsigned slots, cudaStream_t stream) {
  MmaGateUpKernel<kType, kTiles>
      <<<dim3(Blocks(p.intermediate, kMmaGateUpColumns), slots), kMmaThreads, 0,
         stream>>>(p, s);
}

template <WeightType kType, int kTiles>
void LaunchMmaDown(const RoutedExpertsParams& p, const Scratch& s,
                   unsigned slots, cudaStream_t stream) {
  MmaDownKernel<kType, kTiles><<<dim3(Blocks(p.hidden, kMmaWeightRows), slots),
                                 kMmaThreads, 0, stream>>>(p, s);
}

// The experts' MLPs: one token on CUDA cores (kActs 1); more on the tensor
// cores where the matrices allow (vectorized), on CUDA cores eight rows a
// pass where not.
template <WeightType kType, int kActs>
cudaError_t LaunchExpertMlps(const RoutedExpertsParams& p, const Scratch& s,
                             unsigned slots, cudaStream_t stream) {
  const bool tensor_cores = kActs > 1;
  if (tensor_cores && p.vectorized_gate_up) {
    WithMmaTiles(p.n, [&](auto tiles) {
      LaunchMmaGateUp<kType, decltype(tiles)::value>(p, s, slots, stream);
    });
  } else {
    GateUpKernel<kType, kActs>
        <<<dim3(Blocks(p.intermediate, kGateUpColumns), slots),
           BlockDotThreads(p.hidden, p.vectorized_gate_up), 0, stream>>>(p, s);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  if (tensor_cores && p.vectorized_down) {
    WithMmaTiles(p.n, [&](auto tiles) {
      LaunchMmaDown<kType, decltype(tiles)::value>(p, s, slots, stream);
    });
  } else {
    DownKernel<kType, kActs>
        <<<dim3(Blocks(p.hidden, kDotWeightRows), slots),
           BlockDotThreads(p.intermediate, p.vectorized_down), 0, stream>>>(p,
                                                                            s);
  }
  return cudaGetLastError();
}

}  // namespace

size_t RoutedExpertsScratchBytes(int64_t n, int64_t top_k, int64_t num_experts,
                                 int64_t hidden, int64_t intermediate) {
  const int64_t pairs = n * top_k;
  return Scratch(nullptr, pairs, Slots(pairs, num_experts), hidden,
                 intermediate)
      .bytes;
}

cudaError_t LaunchRoutedExperts(const RoutedExpertsParams& p,
                                cudaStream_t stream) {
  const DeviceRouting& r = p.routing;
  if (p.n <= 0) return cudaSuccess;
  if (p.n > kMaxRoutedTokens || r.num_experts <= 0 ||
      r.num_experts > kMaxRoutedExperts || r.top_k <= 0 ||
      r.top_k > kMaxRoutedTopK || r.top_k > r.num_experts ||
      r.num_groups <= 0 || r.num_experts % r.num_groups != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t pairs = p.n * r.top_k;
  const int64_t slots = Slots(pairs, r.num_experts);
  const Scratch s(p.d_scratch, pairs, slots, p.hidden, p.intermediate);
  const int64_t route_words = RouteWords(r);
  const int route_warps = static_cast<int>(
      std::clamp<int64_t>(kRouteSharedBytes / (4 * route_words), 1,
                          std::min<int64_t>(p.n, kGroupThreads / 32)));
  RouteAndGroupKernel<<<1, kGroupThreads, 4 * route_warps * route_words,
                        stream>>>(p.d_logits, r, static_cast<int>(p.n),
                                  route_warps, static_cast<int>(route_words), s,
                                  p.expert_bytes, p.d_weight_bytes);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  const auto slots_grid = static_cast<unsigned>(slots);
  if (cudaError_t e = WithWeightType(
          p.type,
          [&](auto type) {
            // One token: every expert has one row.
            return p.n == 1 ? LaunchExpertMlps<decltype(type)::value, 1>(
                                  p, s, slots_grid, stream)
                            : LaunchExpertMlps<decltype(type)::value,
                                               kDotActivationRows>(
                                  p, s, slots_grid, stream);
          });
      e != cudaSuccess) {
    return e;
  }
  constexpr int kCombineThreads = 256;
  static_assert(kCombineThreads >= kMaxRoutedTopK);
  const auto column_blocks = static_cast<unsigned>(std::min<int64_t>(
      (p.hidden + kCombineThreads - 1) / kCombineThreads, 64));
  CombineKernel<<<dim3(static_cast<unsigned>(p.n), column_blocks),
                  kCombineThreads, 0, stream>>>(r.top_k, p.hidden, s, p.d_out);
  return cudaGetLastError();
}

}  // namespace ringmoe::cuda

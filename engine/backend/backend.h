// Backend: the operations the forward pass is built from, on whichever
// device runs them. Models, the MoE block and the expert executors call
// only this interface, on tensors in the backend's memory and weights in
// its memory space, so nothing above it knows which device runs. The CPU
// backend (cpu_backend.h) wraps kernels/cpu; a CUDA backend implements the
// same operations on a stream.
//
// Ordering: operations take effect in the order they are called (a device
// backend queues them on one stream); host memory handed to an operation
// (spans of indices, weights) may be reused once it returns. Results reach
// the host through CopyToHost, which waits for everything before it;
// failures through TakeError.
#ifndef RINGMOE_ENGINE_BACKEND_BACKEND_H_
#define RINGMOE_ENGINE_BACKEND_BACKEND_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/backend/weight.h"
#include "engine/model/model_spec.h"
#include "memory_ring/tier.h"

namespace ringmoe::backend {

// Activations: float32, row-major [rows, cols], in the backend's memory.
struct Tensor {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  int64_t size() const { return rows * cols; }
  float* row(int64_t r) const { return data + r * cols; }
  // Rows [first, first + count).
  Tensor Rows(int64_t first, int64_t count) const {
    return {row(first), count, cols};
  }
  // The same floats seen as [new_rows, new_cols] (same size).
  Tensor Reshaped(int64_t new_rows, int64_t new_cols) const {
    return {data, new_rows, new_cols};
  }
};

// What kernels did: weight bytes read and FLOPs (two per multiply-add), and
// the weight bytes by the kernel that read them (the CPU backend: its
// instruction-set path, "scalar", "avx2" or "avx512").
struct Work {
  int64_t weight_bytes = 0;
  double flops = 0;
  std::map<std::string, int64_t> weight_bytes_by_kernel;

  // Adds `other`'s counts to these.
  void Add(const Work& other) {
    weight_bytes += other.weight_bytes;
    flops += other.flops;
    for (const auto& [kernel, bytes] : other.weight_bytes_by_kernel) {
      weight_bytes_by_kernel[kernel] += bytes;
    }
  }
};

// y[n, w.rows] = x[n, w.cols] · wᵀ.
struct Product {
  Tensor x;
  const Weight* w = nullptr;
  Tensor y;
  // The rows of the whole batch that x's rows are a share of (0: x.rows;
  // else at least x.rows): the CPU backend sums each row as in a product of
  // that many rows (kernels::MatMulJob::batch_rows), so a rank's share of a
  // step under data-parallel attention gives the whole step's rows bitwise.
  // Device backends may ignore it.
  int64_t batch_rows = 0;
};

// x[n, hidden] through down(silu(gate(x)) * up(x)) into out[n, hidden].
struct MlpTask {
  const MlpWeights* weights = nullptr;
  Tensor x;
  Tensor out;
  int64_t batch_rows = 0;  // Product::batch_rows of its products
};

// The routed experts of one MoE layer, from its router's logits.
struct RoutedExpertsJob {
  Tensor x;       // [n, hidden]: the MoE block's normalised input
  Tensor logits;  // [n, experts.size()]: router logits, bias added
  int64_t top_k = 0;
  const model::RoutingSpec* routing = nullptr;
  // [experts.size()] in host memory, or null (RoutingSpec::selection_bias).
  const float* selection_bias = nullptr;
  // Every expert of the layer, in this backend's weight memory. They and
  // the selection bias must not change while the backend lives (a device
  // backend keeps a table of them).
  absl::Span<const MlpWeights> experts;
  Tensor out;  // [n, hidden]
};

// Where a rotary embedding applies in each row of a tensor: `count` vectors
// of `dim` dimensions, vector i starting at column offset + i * stride.
// Pairs are (j, j + dim/2) (rotate-half, Llama) or (2j, 2j + 1)
// (interleaved, DeepSeek).
struct RotarySlots {
  int64_t count = 0;
  int64_t stride = 0;
  int64_t offset = 0;
  int64_t dim = 0;
  bool interleaved = false;
};

// A tensor and the slots of its rows a rotary embedding turns.
struct RotaryTarget {
  Tensor x;
  RotarySlots slots;
};

// Rows of a tensor and where they go: dst[i] (host-side pointers into the
// backend's memory, such as KV-cache rows) = row i of src.
struct RowWrite {
  Tensor src;
  absl::Span<float* const> dst;
};

// One sequence's keys and values of one layer, in fixed-size blocks:
// position p lives in block p / block_size at row p % block_size. Blocks
// below the attended range may be null.
struct KvBlocks {
  const float* const* k_blocks = nullptr;
  const float* const* v_blocks = nullptr;
  int64_t block_size = 0;
};

// Causal attention of a step's query tokens over their sequences' cached
// keys and values of one layer (already holding the step's own keys). Query
// head h reads kv head h / (heads / kv_heads). Tokens of one sequence come
// in consecutive rows, in position order.
struct AttentionJob {
  Tensor q;  // [n, heads * head_dim]
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 1.f;  // applied to q·k
  // > 0: the query at position p attends positions [p + 1 - window, p]
  // (clipped at 0); 0: [0, p].
  int64_t window = 0;
  absl::Span<const KvBlocks> sequences;
  absl::Span<const int32_t> sequence_of;  // [n]: index into sequences
  absl::Span<const int64_t> position_of;  // [n]
  // Empty, or one learned logit per query head (gpt-oss's sinks) that
  // joins every softmax denominator (in scaled-score units) and attends to
  // nothing: head h's output is scaled by Z / (Z + exp(sinks[h])), Z its
  // softmax denominator.
  Vector sinks;
  Tensor out;  // [n, heads * head_dim]
  // Product::batch_rows for the tokens: the CPU backend splits the work as
  // for a step of that many tokens (every token's result alike).
  int64_t batch_rows = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu", "cuda:0", ...
  virtual std::string name() const = 0;
  // Where the weights this backend reads must lie.
  virtual MemorySpace weight_memory() const = 0;

  // Work counted from now on accumulates into `work` (null: not counted).
  virtual void set_work(Work* work) = 0;

  // The first failure of an operation since the last call (a device
  // backend's operations fail asynchronously, and their results are then
  // unspecified), and clears it; OK when every operation succeeded.
  virtual absl::Status TakeError() = 0;

  // The weight (vector) in this backend's weight memory: `host` itself when
  // the backend reads host memory, else a copy the backend owns until it is
  // destroyed. Fails when the device has no room.
  virtual absl::StatusOr<Weight> Upload(const Weight& host) = 0;
  virtual absl::StatusOr<Vector> Upload(const Vector& host) = 0;

  // Streaming weights into this backend's weight memory (the memory ring's
  // compute tier), for a backend whose weights live apart from the host's:
  // host memory the copy path reads fastest (pinned, for a GPU), and the
  // copy path itself, reading `sources` (which must outlive it) on a copy
  // engine of its own, ordered after this backend's compute by its fences.
  // Slots it allocates count against the backend's weight budget where it
  // keeps one. UNIMPLEMENTED for a backend that reads host memory.
  virtual absl::StatusOr<std::unique_ptr<memory_ring::TierBuffer>>
  AllocateStreamingSource(size_t bytes) {
    return absl::UnimplementedError(name() + " reads weights in host memory");
  }
  virtual absl::StatusOr<std::unique_ptr<memory_ring::Tier>>
  CreateStreamingTier(std::vector<memory_ring::TierBuffer*> sources) {
    return absl::UnimplementedError(name() + " reads weights in host memory");
  }

  // Bytes of the backend's weight memory in use (uploads, ring slots,
  // cache); 0 for a backend that reads host memory.
  virtual uint64_t weight_memory_used() const { return 0; }

  // Memory for n floats (uninitialised) and its release.
  virtual float* Allocate(int64_t n) = 0;
  virtual void Free(float* data) = 0;
  // Copies between host memory and a tensor; CopyToHost returns when every
  // operation before it has finished.
  virtual void CopyToHost(const Tensor& src, float* dst) = 0;
  virtual void CopyFromHost(const float* src, const Tensor& dst) = 0;
  // Waits until every operation called so far has finished.
  virtual void Synchronize() = 0;

  // Products, all independent of each other: one parallel loop.
  virtual void MatMul(absl::Span<const Product> products) = 0;
  // Every task's MLP: each output row depends only on its task's weights
  // and input row, never on which other tasks run beside it.
  virtual void RunMlps(absl::Span<const MlpTask> tasks) = 0;

  // out[i] = row tokens[i] of `table` ([vocab, hidden]), widened.
  virtual void Embed(const Weight& table, absl::Span<const int32_t> tokens,
                     const Tensor& out) = 0;
  // y = x / sqrt(mean(x²) + eps) * weight per row; weight.size == x.cols;
  // y may be x.
  virtual void RmsNorm(const Tensor& x, const Vector& weight, float eps,
                       const Tensor& y) = 0;
  // x += delta, then y = RmsNorm(x): a residual stream's add and the next
  // sub-layer's norm, one pass on a device. y aliases neither x nor delta.
  virtual void AddRmsNorm(const Tensor& x, const Tensor& delta,
                          const Vector& weight, float eps, const Tensor& y) {
    Add(x, delta);
    RmsNorm(x, weight, eps, y);
  }
  // y[i, :] += bias.
  virtual void AddBias(const Tensor& y, const Vector& bias) = 0;
  // y += x.
  virtual void Add(const Tensor& y, const Tensor& x) = 0;
  // Every value of y clamped to [-limit, limit].
  virtual void Clamp(const Tensor& y, float limit) = 0;
  // y = 0.
  virtual void SetZero(const Tensor& y) = 0;
  // Rotates each target's slots of every row i by row i of cos and sin
  // ([rows, dim / 2] each; every target has their rows and slots of that
  // dim): a layer's queries and keys in one call.
  virtual void ApplyRotary(absl::Span<const RotaryTarget> targets,
                           const Tensor& cos, const Tensor& sin) = 0;

  // Every write's rows (a layer's keys and values in one call).
  virtual void WriteRows(absl::Span<const RowWrite> writes) = 0;
  // out[i] = x[rows[i]].
  virtual void GatherRows(const Tensor& x, absl::Span<const int32_t> rows,
                          const Tensor& out) = 0;
  // tokens[r] = kernels::GreedyToken(row r of logits): greedy decoding's
  // token found where the logits lie, so that only it need reach the host.
  // tokens is [logits.rows, 1], each value an int32 held in a float's bits.
  virtual void GreedyTokens(const Tensor& logits, const Tensor& tokens) = 0;
  // y[rows[i]] += scales[i] * src[i], in order of i.
  virtual void AddScaledRows(const Tensor& src, absl::Span<const int32_t> rows,
                             absl::Span<const float> scales,
                             const Tensor& y) = 0;
  // y[t] += sigmoid(x[t] · gate) * src[t] (a gated shared expert).
  virtual void AddSigmoidGated(const Tensor& src, const Tensor& x,
                               const Vector& gate, const Tensor& y) = 0;

  virtual void Attend(const AttentionJob& job) = 0;

  // out[t] = Σ weight · expert(x[t]) over token t's top_k experts in
  // ascending expert order, the experts and weights moe::Router's for the
  // logits: what routing on the host, RunMlps and AddScaledRows compute,
  // up to the rounding of the routing scores, without the host learning
  // the routing, so a device backend need not synchronise. Returns false,
  // doing nothing, where the backend does not (the CPU backend, whose host
  // routes anyway; a device backend past the bounds of its kernels): the
  // caller then routes on the host.
  virtual bool RunRoutedExperts(const RoutedExpertsJob& job) { return false; }

  // Multi-head latent attention around Attend, with kv_b ([heads *
  // (qk_nope_head_dim + v_head_dim), kv_lora_rank]) absorbed: each head's
  // query taken into latent space, absorbed[t, h] = [W_UK_hᵀ q_nope[t, h],
  // q_rope[t, h]] (q [n, heads * qk_head_dim], absorbed [n, heads *
  // cache_width]); and each head's attended latent taken back out,
  // values[t, h] = W_UV_h attended[t, h, :kv_lora_rank] (attended [n, heads
  // * cache_width], values [n, heads * v_head_dim]).
  virtual void AbsorbMlaQueries(const Tensor& q, const Weight& kv_b,
                                const model::MlaSpec& mla, int64_t heads,
                                const Tensor& absorbed) = 0;
  // `batch_rows`: Product::batch_rows of the value products.
  virtual void ExpandMlaValues(const Tensor& attended, const Weight& kv_b,
                               const model::MlaSpec& mla, int64_t heads,
                               const Tensor& values, int64_t batch_rows) = 0;

  // Step graphs: a device backend may record a step's operations once and
  // replay them as one launch, sparing the host a call per operation.
  // BeginGraphStep(phase, tokens) starts one for a step of `tokens` rows
  // (false: not here, or not for so many); until EndGraphStep the caller
  // issues the step's operations (no CopyToHost or Synchronize); they
  // - kReplay: are not run. They stage their host arguments (token ids,
  //   positions, KV block tables) where a graph recorded from the same
  //   operations reads them; EndGraphStep launches that graph, if any.
  // - kRecord: are recorded; EndGraphStep launches the recording and keeps
  //   it for replays.
  // Tensors allocated in the step stay valid until the next BeginGraphStep
  // (their release is free). EndGraphStep returns whether the operations
  // ran; when not, the caller issues them again: recording when it says
  // kRecord, else as usual. The CPU backends record nothing.
  enum class GraphPhase { kReplay, kRecord };
  enum class GraphOutcome {
    kLaunched,  // the step ran
    kRecord,    // issue it again in a kRecord step
    kEager,     // issue it again outside a graph step
  };
  virtual bool BeginGraphStep(GraphPhase phase, int64_t tokens) {
    return false;
  }
  virtual GraphOutcome EndGraphStep() { return GraphOutcome::kEager; }

  // A [rows, cols] tensor owned by the caller, released here.
  class Buffer;
  Buffer NewTensor(int64_t rows, int64_t cols);
};

// Owns a tensor allocated by a backend; move-only.
class Backend::Buffer {
 public:
  Buffer() = default;
  Buffer(Backend* backend, Tensor tensor)
      : backend_(backend), tensor_(tensor) {}
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    Reset();
    backend_ = other.backend_;
    tensor_ = other.tensor_;
    other.backend_ = nullptr;
    other.tensor_ = {};
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Reset(); }

  const Tensor& tensor() const { return tensor_; }
  operator const Tensor&() const { return tensor_; }  // NOLINT
  // The backend that allocated it; null when empty.
  const Backend* backend() const { return backend_; }

 private:
  void Reset() {
    if (backend_ != nullptr && tensor_.data != nullptr) {
      backend_->Free(tensor_.data);
    }
    backend_ = nullptr;
  }
  Backend* backend_ = nullptr;
  Tensor tensor_;
};

inline Backend::Buffer Backend::NewTensor(int64_t rows, int64_t cols) {
  return Buffer(this, Tensor{Allocate(rows * cols), rows, cols});
}

}  // namespace ringmoe::backend

#endif  // RINGMOE_ENGINE_BACKEND_BACKEND_H_

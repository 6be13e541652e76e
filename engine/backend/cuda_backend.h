// CudaBackend: the Backend on one CUDA device, over kernels/cuda. Weights
// are uploaded once in their stored format (within a budget); activations
// are float32 in device memory from the stream-ordered allocator; every
// operation is enqueued on one stream, host arguments (token ids, row
// indices, KV block tables) staged through pinned memory, so nothing but
// CopyToHost and Synchronize waits for the device.
#ifndef RINGMOE_ENGINE_BACKEND_CUDA_BACKEND_H_
#define RINGMOE_ENGINE_BACKEND_CUDA_BACKEND_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "engine/backend/backend.h"
#include "kernels/cuda/ops.h"
#include "memory_ring/memory_budget.h"

namespace ringmoe::backend {

class CudaBackend : public Backend {
 public:
  // Binds CUDA device `device`; uploads may take up to `weight_budget`
  // bytes of its memory (0: no limit other than the device's). Fails when
  // the device does not exist or cannot be initialised.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(
      int device, int64_t weight_budget = 0);
  ~CudaBackend() override;

  std::string name() const override;
  // The CUDA device index it binds.
  int device() const { return device_; }
  MemorySpace weight_memory() const override { return MemorySpace::kDevice; }
  void set_work(Work* work) override;
  absl::Status TakeError() override;

  absl::StatusOr<Weight> Upload(const Weight& host) override;
  absl::StatusOr<Vector> Upload(const Vector& host) override;
  float* Allocate(int64_t n) override;
  void Free(float* data) override;
  void CopyToHost(const Tensor& src, float* dst) override;
  void CopyFromHost(const float* src, const Tensor& dst) override;
  void Synchronize() override;

  void MatMul(absl::Span<const Product> products) override;
  void RunMlps(absl::Span<const MlpTask> tasks) override;

  void Embed(const Weight& table, absl::Span<const int32_t> tokens,
             const Tensor& out) override;
  void RmsNorm(const Tensor& x, const Vector& weight, float eps,
               const Tensor& y) override;
  void AddRmsNorm(const Tensor& x, const Tensor& delta, const Vector& weight,
                  float eps, const Tensor& y) override;
  void AddBias(const Tensor& y, const Vector& bias) override;
  void Add(const Tensor& y, const Tensor& x) override;
  void Clamp(const Tensor& y, float limit) override;
  void SetZero(const Tensor& y) override;
  void ApplyRotary(absl::Span<const RotaryTarget> targets, const Tensor& cos,
                   const Tensor& sin) override;

  void WriteRows(absl::Span<const RowWrite> writes) override;
  void GatherRows(const Tensor& x, absl::Span<const int32_t> rows,
                  const Tensor& out) override;
  void GreedyTokens(const Tensor& logits, const Tensor& tokens) override;
  void AddScaledRows(const Tensor& src, absl::Span<const int32_t> rows,
                     absl::Span<const float> scales, const Tensor& y) override;
  void AddSigmoidGated(const Tensor& src, const Tensor& x, const Vector& gate,
                       const Tensor& y) override;

  void Attend(const AttentionJob& job) override;
  bool RunRoutedExperts(const RoutedExpertsJob& job) override;
  void AbsorbMlaQueries(const Tensor& q, const Weight& kv_b,
                        const model::MlaSpec& mla, int64_t heads,
                        const Tensor& absorbed) override;
  void ExpandMlaValues(const Tensor& attended, const Weight& kv_b,
                       const model::MlaSpec& mla, int64_t heads,
                       const Tensor& values, int64_t batch_rows) override;

  absl::StatusOr<std::unique_ptr<memory_ring::TierBuffer>>
  AllocateStreamingSource(size_t bytes) override;
  absl::StatusOr<std::unique_ptr<memory_ring::Tier>> CreateStreamingTier(
      std::vector<memory_ring::TierBuffer*> sources) override;

  uint64_t weight_memory_used() const override { return budget_.used(); }

  // Graph steps (Backend): recorded with stream capture; a replay step's
  // operations note their parameters (every launch argument but the staged
  // host arguments) and the graph recorded from the same parameters is
  // launched. Tensors come from a device arena in stack order, so the
  // same operations get the same addresses. Steps of more than
  // cuda::kMaxMmaProductRows tokens are not recorded, nor steps with a
  // product through cuBLAS (cuda::ProductUsesCublas).
  bool BeginGraphStep(GraphPhase phase, int64_t tokens) override;
  GraphOutcome EndGraphStep() override;

 private:
  CudaBackend(int device, int64_t weight_budget)
      : device_(device),
        budget_(absl::StrCat("cuda:", device),
                static_cast<uint64_t>(weight_budget)) {}

  // Makes device_ current on the calling thread: steps may run on another
  // thread than the one that created the backend.
  void Bind();
  // Records the first failure (kept until TakeError).
  void Check(cudaError_t error, const char* what);
  // Host arguments of launches (token ids, row indices, KV block tables)
  // go through pinned staging memory mirrored on the device at the same
  // offsets: a launch's arguments are staged, sent up in one copy
  // (SendArguments) and read by its kernels from the mirror. Space is
  // reused once the stream has passed them (at the next Synchronize).
  static size_t StagingBytes(size_t bytes) {
    return (bytes + 255) & ~size_t{255};
  }
  // Room for `bytes` (a sum of StagingBytes) more: a launch reserves for
  // all of its arguments before staging the first. May synchronise.
  void ReserveStaging(size_t bytes);
  // A pinned copy of `bytes` host bytes (within the reservation).
  void* StagePinned(const void* host, size_t bytes);
  // Where the kernels will find `host` once sent (null when empty).
  template <typename T>
  const T* Stage(absl::Span<const T> host) {
    if (host.empty()) return nullptr;
    const char* pinned = static_cast<const char*>(
        StagePinned(host.data(), host.size() * sizeof(T)));
    if (pinned == nullptr) return nullptr;
    return reinterpret_cast<const T*>(d_staging_ + (pinned - staging_));
  }
  // Copies what was staged since the last send to the mirror.
  void SendArguments();
  // A device copy of a weight's part of `bytes` (> 0) host bytes, within
  // the budget (released with the backend).
  absl::StatusOr<const void*> UploadBytes(const void* host, int64_t bytes,
                                          const char* what);
  void RunProduct(const Tensor& x, const Weight& w, const Tensor& y);
  // Independent products: decode-sized ones of one weight type and width
  // (q, k and v of one input) as one launch each, the rest one by one.
  void RunProducts(absl::Span<const Product> products);
  void CountProduct(const Weight& w, int64_t n);

  // A layer's experts as the routed-experts kernels read them: a device
  // table, uploaded at the layer's first job and kept.
  struct ExpertTable {
    cuda::DeviceExpert* d_experts = nullptr;
    float* d_selection_bias = nullptr;
    kernels::WeightType type = kernels::WeightType::kF32;
    bool fused = false;
    bool vectorized_gate_up = false;
    bool vectorized_down = false;
    int64_t intermediate = 0;
    uint64_t expert_bytes = 0;
  };
  // The job's table; null when its experts differ in type, layout or
  // shape (the host routes then).
  const ExpertTable* TableFor(const RoutedExpertsJob& job);
  // Adds the weight bytes the routed-experts kernels counted on the
  // device to work_.
  void CollectRoutedWork();

  enum class Mode { kEager, kReplay, kRecord };
  // In a graph step, appends an operation's parameters to the step's.
  void Note(std::initializer_list<uint64_t> params);
  void NoteWeight(const Weight& w);
  // Whether operations run (or are recorded): not in a replay step.
  bool Running() const { return mode_ != Mode::kReplay; }
  // The graph step cannot be a graph (it runs again outside one).
  void FailGraphStep() {
    if (mode_ != Mode::kEager) graph_failed_ = true;
  }
  float* ArenaAllocate(int64_t floats);
  void ArenaRelease(const char* p);
  void DropGraphs();

  int device_;
  memory_ring::MemoryBudget budget_;  // weights, ring slots, expert cache
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  Work* work_ = nullptr;
  absl::Status error_;
  std::vector<void*> uploads_;
  // Pinned staging of host arguments and its device mirror: bump-allocated
  // (used), sent up to `sent`.
  char* staging_ = nullptr;
  char* d_staging_ = nullptr;
  size_t staging_capacity_ = 0;
  size_t staging_used_ = 0;
  size_t staging_sent_ = 0;
  // By the experts' span, first and last down matrix and selection bias.
  std::map<std::tuple<const MlpWeights*, size_t, const void*, const void*,
                      const float*>,
           ExpertTable>
      expert_tables_;
  // Weight bytes of routed experts run while work_ was set, counted on the
  // device (the host never learns which experts ran).
  unsigned long long* d_routed_bytes_ = nullptr;
  bool routed_bytes_pending_ = false;

  Mode mode_ = Mode::kEager;
  bool graph_failed_ = false;
  std::vector<uint64_t> step_params_;  // the graph step's operations
  struct StepGraph {
    std::vector<uint64_t> params;
    cudaGraphExec_t exec = nullptr;
    uint64_t last_used = 0;
  };
  std::unordered_map<uint64_t, StepGraph> graphs_;  // by hash of params
  std::unordered_set<uint64_t> replayed_once_;      // steps not yet recorded
  uint64_t graph_steps_ = 0;
  // The graph steps' tensors: [offset, offset + bytes) blocks in stack
  // order; `arena_needed_` the most a step has asked for.
  struct ArenaBlock {
    size_t offset = 0;
    size_t bytes = 0;
    bool released = false;
  };
  char* d_arena_ = nullptr;
  size_t arena_capacity_ = 0;
  size_t arena_needed_ = 0;
  std::vector<ArenaBlock> arena_blocks_;
};

}  // namespace ringmoe::backend

#endif  // RINGMOE_ENGINE_BACKEND_CUDA_BACKEND_H_

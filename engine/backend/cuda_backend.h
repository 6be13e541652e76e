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
#include <map>
#include <memory>
#include <string>
#include <tuple>
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
  void AddBias(const Tensor& y, const Vector& bias) override;
  void Add(const Tensor& y, const Tensor& x) override;
  void Clamp(const Tensor& y, float limit) override;
  void SetZero(const Tensor& y) override;
  void ApplyRotary(const Tensor& x, const RotarySlots& slots, const Tensor& cos,
                   const Tensor& sin) override;

  void WriteRows(const Tensor& src, absl::Span<float* const> dst) override;
  void GatherRows(const Tensor& x, absl::Span<const int32_t> rows,
                  const Tensor& out) override;
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
                       const Tensor& values) override;

  absl::StatusOr<std::unique_ptr<memory_ring::TierBuffer>>
  AllocateStreamingSource(size_t bytes) override;
  absl::StatusOr<std::unique_ptr<memory_ring::Tier>> CreateStreamingTier(
      std::vector<memory_ring::TierBuffer*> sources) override;

  uint64_t weight_memory_used() const override { return budget_.used(); }

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
  // A pinned copy of `bytes` host bytes, reusable once the stream passes
  // the copies enqueued from it (at the next Synchronize).
  void* StagePinned(const void* host, size_t bytes);
  // A device copy of `bytes` host bytes, valid for the operations enqueued
  // next and released, stream-ordered, by ReleaseArguments.
  const void* StageArgument(const void* host, size_t bytes);
  template <typename T>
  const T* Stage(absl::Span<const T> host) {
    return static_cast<const T*>(
        StageArgument(host.data(), host.size() * sizeof(T)));
  }
  void ReleaseArguments();
  // A device copy of a weight's part of `bytes` (> 0) host bytes, within
  // the budget (released with the backend).
  absl::StatusOr<const void*> UploadBytes(const void* host, int64_t bytes,
                                          const char* what);
  void RunProduct(const Tensor& x, const Weight& w, const Tensor& y);
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

  int device_;
  memory_ring::MemoryBudget budget_;  // weights, ring slots, expert cache
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  Work* work_ = nullptr;
  absl::Status error_;
  std::vector<void*> uploads_;
  // Pinned staging of host arguments: bump-allocated, reused once the
  // stream has passed every copy out of it.
  char* staging_ = nullptr;
  size_t staging_capacity_ = 0;
  size_t staging_used_ = 0;
  std::vector<void*> arguments_;  // device copies awaiting release
  // By the experts' span, first and last down matrix and selection bias.
  std::map<std::tuple<const MlpWeights*, size_t, const void*, const void*,
                      const float*>,
           ExpertTable>
      expert_tables_;
  // Weight bytes of routed experts run while work_ was set, counted on the
  // device (the host never learns which experts ran).
  unsigned long long* d_routed_bytes_ = nullptr;
  bool routed_bytes_pending_ = false;
};

}  // namespace ringmoe::backend

#endif  // RINGMOE_ENGINE_BACKEND_CUDA_BACKEND_H_

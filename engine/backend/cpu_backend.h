// CpuBackend: the Backend on this machine's CPU, over kernels/cpu, with the
// work of each operation split over a thread pool. Tensors and weights are
// in host memory; operations run when called.
#ifndef RINGMOE_ENGINE_BACKEND_CPU_BACKEND_H_
#define RINGMOE_ENGINE_BACKEND_CPU_BACKEND_H_

#include <string>

#include "base/thread_pool.h"
#include "engine/backend/backend.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::backend {

class CpuBackend : public Backend {
 public:
  // `pool` (null: single-threaded) must outlive the backend and is used by
  // one step at a time. `precision`: that of the activations in products of
  // bf16 and mxfp4 weights (kernels::ActivationPrecision).
  explicit CpuBackend(ThreadPool* pool, kernels::ActivationPrecision precision =
                                            kernels::ActivationPrecision::kF32)
      : pool_(pool), precision_(precision) {}

  std::string name() const override { return "cpu"; }
  MemorySpace weight_memory() const override { return MemorySpace::kHost; }
  void set_work(Work* work) override { work_ = work; }
  absl::Status TakeError() override { return absl::OkStatus(); }

  absl::StatusOr<Weight> Upload(const Weight& host) override;
  absl::StatusOr<Vector> Upload(const Vector& host) override;
  float* Allocate(int64_t n) override;
  void Free(float* data) override;
  void CopyToHost(const Tensor& src, float* dst) override;
  void CopyFromHost(const float* src, const Tensor& dst) override;
  void Synchronize() override {}

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
  void AbsorbMlaQueries(const Tensor& q, const Weight& kv_b,
                        const model::MlaSpec& mla, int64_t heads,
                        const Tensor& absorbed) override;
  void ExpandMlaValues(const Tensor& attended, const Weight& kv_b,
                       const model::MlaSpec& mla, int64_t heads,
                       const Tensor& values, int64_t batch_rows) override;

  ThreadPool* pool() const { return pool_; }

 protected:
  void set_pool(ThreadPool* pool) { pool_ = pool; }

 private:
  // One target of ApplyRotary.
  void ApplyRotary(const Tensor& x, const RotarySlots& slots, const Tensor& cos,
                   const Tensor& sin);
  // Counts `job`, a product against w.
  void CountProduct(const Weight& w, const kernels::MatMulJob& job);

  ThreadPool* pool_;
  const kernels::ActivationPrecision precision_;
  Work* work_ = nullptr;
};

}  // namespace ringmoe::backend

#endif  // RINGMOE_ENGINE_BACKEND_CPU_BACKEND_H_

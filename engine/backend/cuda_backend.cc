#include "engine/backend/cuda_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/cublas_loader.h"
#include "kernels/cuda/rms_norm.h"
#include "memory_ring/cuda_tier.h"

namespace ringmoe::backend {
namespace {

constexpr size_t kInitialStagingBytes = size_t{16} << 20;

cuda::DeviceWeight AsDevice(const Weight& w) {
  cuda::DeviceWeight d;
  d.data = w.data;
  d.type = w.type;
  d.rows = w.rows;
  d.cols = w.cols;
  d.row_bytes = kernels::RowBytes(w.type, w.cols, w.group_size);
  d.scales = w.scales;
  d.group_size = w.group_size;
  d.block_scales = w.block_scales;
  d.block_rows = w.block_rows;
  d.block_cols = w.block_cols;
  d.exponents = w.exponents;
  return d;
}

uint64_t Bits(const void* p) { return reinterpret_cast<uintptr_t>(p); }
uint64_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
uint64_t Bits(int64_t v) { return static_cast<uint64_t>(v); }

// What each operation of a graph step notes first.
enum Op : uint64_t {
  kOpSend = 1,
  kOpCopyFromHost,
  kOpProduct,
  kOpActivation,
  kOpEmbed,
  kOpRmsNorm,
  kOpAddRmsNorm,
  kOpAddBias,
  kOpAdd,
  kOpClamp,
  kOpZero,
  kOpRotary,
  kOpWriteRows,
  kOpGatherRows,
  kOpGreedyTokens,
  kOpAddScaledRows,
  kOpSigmoidGated,
  kOpAttention,
  kOpRoutedExperts,
  kOpAbsorb,
  kOpExpand,
};

// The graph steps' tensor arena starts at this size.
constexpr size_t kInitialArenaBytes = size_t{64} << 20;
// Recorded graphs kept; past it, the least recently used go.
constexpr size_t kMaxGraphs = 32;
// Steps remembered as seen once, not yet recorded.
constexpr size_t kMaxReplayedOnce = 1024;

cuda::GatedActivationParams AsParams(const GatedActivation& act) {
  return {act.kind == GatedActivation::Kind::kClampedSwiglu, act.alpha,
          act.limit};
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(
    int device, int64_t weight_budget) {
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat("cuda:", device, ": ", cudaGetErrorString(e)));
  }
  if (device < 0 || device >= count) {
    return absl::NotFoundError(
        absl::StrCat("cuda:", device, ": ", count, " CUDA device(s) present"));
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend(device, weight_budget));
  const auto fail = [&](const char* what, const std::string& why) {
    return absl::InternalError(
        absl::StrCat("cuda:", device, ": ", what, ": ", why));
  };
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return fail("cudaSetDevice", cudaGetErrorString(e));
  }
  if (cudaError_t e =
          cudaStreamCreateWithFlags(&backend->stream_, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return fail("cudaStreamCreate", cudaGetErrorString(e));
  }
  // Pedantic math: float32 products stay float32 (no TF32 tensor-core
  // rounding, which would move routers' scores enough to flip experts).
  std::string cublas_error;
  const cuda::Cublas* cublas = cuda::LoadCublas(&cublas_error);
  if (cublas == nullptr) return fail("cuBLAS", cublas_error);
  if (cublas->create(&backend->cublas_) != CUBLAS_STATUS_SUCCESS ||
      cublas->set_stream(backend->cublas_, backend->stream_) !=
          CUBLAS_STATUS_SUCCESS ||
      cublas->set_math_mode(backend->cublas_, CUBLAS_PEDANTIC_MATH) !=
          CUBLAS_STATUS_SUCCESS) {
    return fail("cublasCreate", "cuBLAS could not be initialised");
  }
  // Keeps freed activations in the pool between steps instead of returning
  // them to the driver at every synchronisation.
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  if (cudaError_t e = cudaHostAlloc(&backend->staging_, kInitialStagingBytes,
                                    cudaHostAllocDefault);
      e != cudaSuccess) {
    return fail("cudaHostAlloc", cudaGetErrorString(e));
  }
  if (cudaError_t e = cudaMalloc(&backend->d_staging_, kInitialStagingBytes);
      e != cudaSuccess) {
    return fail("cudaMalloc", cudaGetErrorString(e));
  }
  backend->staging_capacity_ = kInitialStagingBytes;
  if (cudaError_t e = cudaMalloc(&backend->d_routed_bytes_,
                                 sizeof(*backend->d_routed_bytes_));
      e != cudaSuccess) {
    return fail("cudaMalloc", cudaGetErrorString(e));
  }
  if (cudaError_t e = cudaMemset(backend->d_routed_bytes_, 0,
                                 sizeof(*backend->d_routed_bytes_));
      e != cudaSuccess) {
    return fail("cudaMemset", cudaGetErrorString(e));
  }
  return backend;
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  DropGraphs();
  cudaFree(d_arena_);
  for (void* p : uploads_) cudaFree(p);
  for (auto& [key, table] : expert_tables_) {
    cudaFree(table.d_experts);
    cudaFree(table.d_selection_bias);
  }
  cudaFree(d_routed_bytes_);
  if (staging_ != nullptr) cudaFreeHost(staging_);
  cudaFree(d_staging_);
  if (cublas_ != nullptr) cuda::LoadCublas()->destroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string CudaBackend::name() const { return absl::StrCat("cuda:", device_); }

void CudaBackend::Bind() {
  // A replay step's thread was bound when it began, and calls nothing.
  if (mode_ == Mode::kReplay) return;
  Check(cudaSetDevice(device_), "cudaSetDevice");
}

void CudaBackend::Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  if (mode_ == Mode::kRecord) {
    // Not a failure of the step: it runs again outside a graph, where a
    // real error shows.
    graph_failed_ = true;
    return;
  }
  if (!error_.ok()) return;
  error_ = absl::InternalError(
      absl::StrCat(name(), ": ", what, ": ", cudaGetErrorString(error)));
}

absl::Status CudaBackend::TakeError() {
  Bind();
  if (const cudaError_t e = cudaStreamQuery(stream_); e != cudaErrorNotReady) {
    Check(e, "stream");
  }
  absl::Status error = std::move(error_);
  error_ = absl::OkStatus();
  return error;
}

absl::StatusOr<const void*> CudaBackend::UploadBytes(const void* host,
                                                     int64_t bytes,
                                                     const char* what) {
  RETURN_IF_ERROR(budget_.Take(bytes, what));
  Bind();
  void* device = nullptr;
  if (cudaError_t e = cudaMalloc(&device, bytes); e != cudaSuccess) {
    cudaGetLastError();  // not sticky: later allocations may succeed
    budget_.Give(bytes);
    return absl::ResourceExhaustedError(
        absl::StrCat(name(), ": no room for ", bytes, " bytes of ", what, " (",
                     budget_.used(),
                     " bytes of weights uploaded): ", cudaGetErrorString(e)));
  }
  uploads_.push_back(device);
  if (cudaError_t e = cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice);
      e != cudaSuccess) {
    return absl::InternalError(
        absl::StrCat(name(), ": copying ", what, ": ", cudaGetErrorString(e)));
  }
  return device;
}

absl::StatusOr<Weight> CudaBackend::Upload(const Weight& host) {
  return UploadWeight(host, name(),
                      [this](const void* h, int64_t bytes, const char* what) {
                        return UploadBytes(h, bytes, what);
                      });
}

absl::StatusOr<Vector> CudaBackend::Upload(const Vector& host) {
  return UploadVector(host, name(),
                      [this](const void* h, int64_t bytes, const char* what) {
                        return UploadBytes(h, bytes, what);
                      });
}

float* CudaBackend::Allocate(int64_t n) {
  Bind();
  if (mode_ != Mode::kEager) return ArenaAllocate(n);
  void* p = nullptr;
  Check(cudaMallocAsync(&p, std::max<int64_t>(n, 1) * sizeof(float), stream_),
        "cudaMallocAsync");
  return static_cast<float*>(p);
}

void CudaBackend::Free(float* data) {
  Bind();
  const char* p = reinterpret_cast<const char*>(data);
  if (p >= d_arena_ && p < d_arena_ + arena_capacity_) {
    ArenaRelease(p);
    return;
  }
  if (data != nullptr) Check(cudaFreeAsync(data, stream_), "cudaFreeAsync");
}

absl::StatusOr<std::unique_ptr<memory_ring::TierBuffer>>
CudaBackend::AllocateStreamingSource(size_t bytes) {
  Bind();
  ASSIGN_OR_RETURN(std::unique_ptr<memory_ring::PinnedBuffer> pinned,
                   memory_ring::PinnedBuffer::Create(bytes));
  return std::unique_ptr<memory_ring::TierBuffer>(std::move(pinned));
}

absl::StatusOr<std::unique_ptr<memory_ring::Tier>>
CudaBackend::CreateStreamingTier(
    std::vector<memory_ring::TierBuffer*> sources) {
  Bind();
  ASSIGN_OR_RETURN(
      std::unique_ptr<memory_ring::Tier> tier,
      memory_ring::CreateCudaTier(std::move(sources), device_, stream_));
  return memory_ring::WithBudget(std::move(tier), &budget_);
}

void CudaBackend::ReserveStaging(size_t bytes) {
  if (staging_used_ + bytes <= staging_capacity_) return;
  if (mode_ != Mode::kEager) {
    FailGraphStep();
    return;
  }
  // Every kernel that reads the staged arguments must finish first.
  SendArguments();
  Synchronize();
  if (bytes <= staging_capacity_) return;
  // Recorded graphs copy from the staging memory that goes here.
  DropGraphs();
  cudaFreeHost(staging_);
  cudaFree(d_staging_);
  staging_ = d_staging_ = nullptr;
  staging_capacity_ = 0;
  const size_t capacity = std::max(bytes, 2 * kInitialStagingBytes);
  Check(cudaHostAlloc(&staging_, capacity, cudaHostAllocDefault),
        "cudaHostAlloc");
  Check(cudaMalloc(&d_staging_, capacity), "cudaMalloc");
  if (staging_ != nullptr && d_staging_ != nullptr) {
    staging_capacity_ = capacity;
    return;
  }
  // Left without staging: launches with host arguments fail (error_ says
  // why).
  cudaFreeHost(staging_);
  cudaFree(d_staging_);
  staging_ = d_staging_ = nullptr;
}

void* CudaBackend::StagePinned(const void* host, size_t bytes) {
  const size_t aligned = StagingBytes(bytes);
  ReserveStaging(aligned);
  if (staging_used_ + aligned > staging_capacity_) return nullptr;
  char* pinned = staging_ + staging_used_;
  staging_used_ += aligned;
  std::memcpy(pinned, host, bytes);
  return pinned;
}

void CudaBackend::SendArguments() {
  if (staging_used_ == staging_sent_) return;
  Note({kOpSend, staging_sent_, staging_used_});
  if (Running()) {
    Check(cudaMemcpyAsync(d_staging_ + staging_sent_, staging_ + staging_sent_,
                          staging_used_ - staging_sent_, cudaMemcpyHostToDevice,
                          stream_),
          "staging host arguments");
  }
  staging_sent_ = staging_used_;
}

void CudaBackend::Synchronize() {
  Bind();
  if (mode_ != Mode::kEager) {
    FailGraphStep();
    return;
  }
  Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  staging_used_ = staging_sent_ = 0;
}

void CudaBackend::CopyToHost(const Tensor& src, float* dst) {
  Bind();
  if (mode_ != Mode::kEager) {
    FailGraphStep();
    return;
  }
  Check(cudaMemcpyAsync(dst, src.data, src.size() * sizeof(float),
                        cudaMemcpyDeviceToHost, stream_),
        "copying to the host");
  Synchronize();
}

void CudaBackend::CopyFromHost(const float* src, const Tensor& dst) {
  Bind();
  const size_t bytes = dst.size() * sizeof(float);
  if (bytes == 0) return;
  SendArguments();
  if (const void* pinned = StagePinned(src, bytes); pinned != nullptr) {
    Note({kOpCopyFromHost, Bits(dst.data), bytes,
          Bits(static_cast<const char*>(pinned) - staging_)});
    if (Running()) {
      Check(cudaMemcpyAsync(dst.data, pinned, bytes, cudaMemcpyHostToDevice,
                            stream_),
            "copying from the host");
    }
  }
  staging_sent_ = staging_used_;
}

void CudaBackend::set_work(Work* work) {
  CollectRoutedWork();
  work_ = work;
}

void CudaBackend::CollectRoutedWork() {
  if (!routed_bytes_pending_) return;
  routed_bytes_pending_ = false;
  Bind();
  unsigned long long bytes = 0;
  Check(cudaMemcpyAsync(&bytes, d_routed_bytes_, sizeof(bytes),
                        cudaMemcpyDeviceToHost, stream_),
        "reading the routed experts' work");
  Synchronize();
  Check(cudaMemsetAsync(d_routed_bytes_, 0, sizeof(bytes), stream_),
        "resetting the routed experts' work");
  if (work_ != nullptr) {
    work_->weight_bytes += static_cast<int64_t>(bytes);
    work_->weight_bytes_by_kernel["cuda"] += static_cast<int64_t>(bytes);
  }
}

void CudaBackend::CountProduct(const Weight& w, int64_t n) {
  if (work_ == nullptr) return;
  const int64_t bytes = StoredBytes(w);
  work_->weight_bytes += bytes;
  work_->weight_bytes_by_kernel["cuda"] += bytes;
  work_->flops += 2.0 * n * w.rows * w.cols;
}

void CudaBackend::RunProduct(const Tensor& x, const Weight& w,
                             const Tensor& y) {
  if (x.rows <= cuda::kMaxFusedProductRows) {
    RunProducts({{x, &w, y}});
    return;
  }
  const cuda::DeviceWeight d = AsDevice(w);
  // cuBLAS's products stay out of graphs.
  if (cuda::ProductUsesCublas(d, x.data, x.rows)) FailGraphStep();
  Note({kOpProduct, Bits(x.data), Bits(x.rows), Bits(y.data)});
  NoteWeight(w);
  if (Running()) {
    float* scratch = nullptr;
    if (const int64_t floats = cuda::ProductScratchFloats(d, x.data, x.rows);
        floats > 0) {
      scratch = Allocate(floats);
    }
    Check(cuda::LaunchProduct(d, x.data, x.rows, y.data, scratch, cublas_,
                              stream_),
          "product");
    Free(scratch);
  }
  CountProduct(w, x.rows);
}

void CudaBackend::RunProducts(absl::Span<const Product> products) {
  const auto fused = [](const Product& p) {
    return p.x.rows <= cuda::kMaxFusedProductRows;
  };
  size_t first = 0;
  while (first < products.size()) {
    const Product& head = products[first];
    if (!fused(head)) {
      RunProduct(head.x, *head.w, head.y);
      ++first;
      continue;
    }
    cuda::ProductOperands operands[cuda::kMaxProductsPerLaunch];
    int count = 0;
    for (size_t i = first;
         i < products.size() && count < cuda::kMaxProductsPerLaunch; ++i) {
      const Product& p = products[i];
      if (p.x.rows != head.x.rows) break;
      operands[count] = {AsDevice(*p.w), p.x.data, p.y.data};
      if (!cuda::CanLaunchTogether(operands[0].w, operands[count].w)) break;
      Note({kOpProduct, Bits(p.x.data), Bits(p.x.rows), Bits(p.y.data)});
      NoteWeight(*p.w);
      CountProduct(*p.w, p.x.rows);
      ++count;
    }
    if (Running()) {
      Check(cuda::LaunchFusedProducts(operands, count, head.x.rows, stream_),
            "product");
    }
    first += count;
  }
}

void CudaBackend::MatMul(absl::Span<const Product> products) {
  Bind();
  RunProducts(products);
}

void CudaBackend::RunMlps(absl::Span<const MlpTask> tasks) {
  Bind();
  for (const MlpTask& t : tasks) {
    const MlpWeights& w = *t.weights;
    const int64_t n = t.x.rows, inter = w.intermediate();
    const Buffer hidden = NewTensor(n, inter);
    if (w.fused()) {
      const Buffer gate_up = NewTensor(n, 2 * inter);
      RunProduct(t.x, w.gate_up, gate_up);
      if (!w.gate_up_bias.empty()) AddBias(gate_up, w.gate_up_bias);
      Note({kOpActivation, Bits(gate_up.tensor().data), 2, Bits(n * inter),
            static_cast<uint64_t>(w.activation.kind), Bits(w.activation.alpha),
            Bits(w.activation.limit), Bits(hidden.tensor().data)});
      if (Running()) {
        Check(cuda::LaunchGatedActivation(gate_up.tensor().data,
                                          gate_up.tensor().data + 1, 2,
                                          n * inter, AsParams(w.activation),
                                          hidden.tensor().data, stream_),
              "gated activation");
      }
    } else {
      const Buffer up = NewTensor(n, inter);
      RunProducts({{t.x, &w.gate, hidden}, {t.x, &w.up, up}});
      Note({kOpActivation, Bits(hidden.tensor().data), Bits(up.tensor().data),
            Bits(n * inter), static_cast<uint64_t>(w.activation.kind),
            Bits(w.activation.alpha), Bits(w.activation.limit)});
      if (Running()) {
        Check(cuda::LaunchGatedActivation(
                  hidden.tensor().data, up.tensor().data, 1, n * inter,
                  AsParams(w.activation), hidden.tensor().data, stream_),
              "gated activation");
      }
    }
    RunProduct(hidden, w.down, t.out);
    if (!w.down_bias.empty()) AddBias(t.out, w.down_bias);
  }
}

void CudaBackend::Embed(const Weight& table, absl::Span<const int32_t> tokens,
                        const Tensor& out) {
  Bind();
  const int32_t* d_tokens = Stage(tokens);
  SendArguments();
  Note({kOpEmbed, Bits(d_tokens), tokens.size(), Bits(out.data)});
  NoteWeight(table);
  if (Running()) {
    Check(cuda::LaunchEmbed(AsDevice(table), d_tokens,
                            static_cast<int64_t>(tokens.size()), out.data,
                            stream_),
          "embedding");
  }
  if (work_ != nullptr) {
    work_->weight_bytes +=
        static_cast<int64_t>(tokens.size()) *
        kernels::RowBytes(table.type, table.cols, table.group_size);
  }
}

void CudaBackend::RmsNorm(const Tensor& x, const Vector& weight, float eps,
                          const Tensor& y) {
  Bind();
  Note({kOpRmsNorm, Bits(x.data), Bits(x.rows), Bits(x.cols), Bits(weight.data),
        Bits(eps), Bits(y.data)});
  if (!Running()) return;
  Check(cuda::LaunchRmsNormF32(x.data, weight.data, y.data,
                               static_cast<int>(x.rows),
                               static_cast<int>(x.cols), eps, stream_),
        "RMSNorm");
}

void CudaBackend::AddRmsNorm(const Tensor& x, const Tensor& delta,
                             const Vector& weight, float eps, const Tensor& y) {
  Bind();
  Note({kOpAddRmsNorm, Bits(x.data), Bits(delta.data), Bits(x.rows),
        Bits(x.cols), Bits(weight.data), Bits(eps), Bits(y.data)});
  if (!Running()) return;
  Check(cuda::LaunchAddRmsNormF32(x.data, delta.data, weight.data, y.data,
                                  static_cast<int>(x.rows),
                                  static_cast<int>(x.cols), eps, stream_),
        "residual add and RMSNorm");
}

void CudaBackend::AddBias(const Tensor& y, const Vector& bias) {
  Bind();
  Note({kOpAddBias, Bits(y.data), Bits(y.rows), Bits(y.cols), Bits(bias.data)});
  if (!Running()) return;
  Check(cuda::LaunchAddBias(y.data, y.rows, y.cols, bias.data, stream_),
        "bias");
}

void CudaBackend::Add(const Tensor& y, const Tensor& x) {
  Bind();
  Note({kOpAdd, Bits(y.data), Bits(x.data), Bits(y.size())});
  if (!Running()) return;
  Check(cuda::LaunchAdd(y.data, x.data, y.size(), stream_), "add");
}

void CudaBackend::Clamp(const Tensor& y, float limit) {
  Bind();
  Note({kOpClamp, Bits(y.data), Bits(y.size()), Bits(limit)});
  if (!Running()) return;
  Check(cuda::LaunchClamp(y.data, y.size(), limit, stream_), "clamp");
}

void CudaBackend::SetZero(const Tensor& y) {
  Bind();
  Note({kOpZero, Bits(y.data), Bits(y.size())});
  if (!Running()) return;
  Check(cudaMemsetAsync(y.data, 0, y.size() * sizeof(float), stream_), "zero");
}

void CudaBackend::ApplyRotary(absl::Span<const RotaryTarget> targets,
                              const Tensor& cos, const Tensor& sin) {
  Bind();
  // Targets of one row count, dim and pairing share a launch.
  size_t first = 0;
  while (first < targets.size()) {
    const RotaryTarget& head = targets[first];
    cuda::RotaryTensor tensors[cuda::kMaxRotaryTensors];
    int count = 0;
    for (size_t i = first;
         i < targets.size() && count < cuda::kMaxRotaryTensors; ++i) {
      const auto& [x, slots] = targets[i];
      if (x.rows != head.x.rows || slots.dim != head.slots.dim ||
          slots.interleaved != head.slots.interleaved) {
        break;
      }
      Note({kOpRotary, Bits(x.data), Bits(x.rows), Bits(x.cols),
            Bits(slots.count), Bits(slots.stride), Bits(slots.offset),
            Bits(slots.dim), slots.interleaved, Bits(cos.data),
            Bits(sin.data)});
      tensors[count++] = {x.data, x.cols, slots.count, slots.stride,
                          slots.offset};
    }
    if (Running()) {
      Check(cuda::LaunchRotary(tensors, count, head.x.rows, head.slots.dim,
                               head.slots.interleaved, cos.data, sin.data,
                               stream_),
            "rotary embedding");
    }
    first += count;
  }
}

void CudaBackend::WriteRows(absl::Span<const RowWrite> writes) {
  Bind();
  for (size_t first = 0; first < writes.size(); first += cuda::kMaxRowWrites) {
    const absl::Span<const RowWrite> part =
        writes.subspan(first, cuda::kMaxRowWrites);
    size_t bytes = 0;
    for (const RowWrite& w : part) {
      bytes += StagingBytes(w.dst.size() * sizeof(float*));
    }
    ReserveStaging(bytes);
    cuda::RowWrites list[cuda::kMaxRowWrites];
    for (size_t k = 0; k < part.size(); ++k) {
      const auto& [src, dst] = part[k];
      list[k] = {src.data, static_cast<int64_t>(dst.size()), src.cols,
                 Stage(dst)};
    }
    SendArguments();
    for (size_t k = 0; k < part.size(); ++k) {
      Note({kOpWriteRows, Bits(list[k].d_src), Bits(list[k].rows),
            Bits(list[k].cols), Bits(list[k].d_dst)});
    }
    if (!Running()) continue;
    Check(cuda::LaunchWriteRows(list, static_cast<int>(part.size()), stream_),
          "writing rows");
  }
}

void CudaBackend::GatherRows(const Tensor& x, absl::Span<const int32_t> rows,
                             const Tensor& out) {
  Bind();
  const int32_t* d_rows = Stage(rows);
  SendArguments();
  Note({kOpGatherRows, Bits(x.data), Bits(x.cols), Bits(d_rows), rows.size(),
        Bits(out.data)});
  if (!Running()) return;
  Check(cuda::LaunchGatherRows(x.data, x.cols, d_rows,
                               static_cast<int64_t>(rows.size()), out.data,
                               stream_),
        "gathering rows");
}

void CudaBackend::GreedyTokens(const Tensor& logits, const Tensor& tokens) {
  Bind();
  Note({kOpGreedyTokens, Bits(logits.data), Bits(logits.rows),
        Bits(logits.cols), Bits(tokens.data)});
  if (!Running()) return;
  Check(cuda::LaunchGreedyTokens(logits.data, logits.rows, logits.cols,
                                 reinterpret_cast<int32_t*>(tokens.data),
                                 stream_),
        "finding greedy tokens");
}

void CudaBackend::AddScaledRows(const Tensor& src,
                                absl::Span<const int32_t> rows,
                                absl::Span<const float> scales,
                                const Tensor& y) {
  Bind();
  ReserveStaging(StagingBytes(rows.size() * sizeof(int32_t)) +
                 StagingBytes(scales.size() * sizeof(float)));
  const int32_t* d_rows = Stage(rows);
  const float* d_scales = Stage(scales);
  SendArguments();
  Note({kOpAddScaledRows, Bits(src.data), Bits(y.cols), Bits(d_rows),
        Bits(d_scales), rows.size(), Bits(y.data)});
  if (!Running()) return;
  Check(cuda::LaunchAddScaledRows(src.data, y.cols, d_rows, d_scales,
                                  static_cast<int64_t>(rows.size()), y.data,
                                  stream_),
        "adding scaled rows");
}

void CudaBackend::AddSigmoidGated(const Tensor& src, const Tensor& x,
                                  const Vector& gate, const Tensor& y) {
  Bind();
  Note({kOpSigmoidGated, Bits(src.data), Bits(x.data), Bits(gate.data),
        Bits(y.rows), Bits(x.cols), Bits(y.cols), Bits(y.data)});
  if (!Running()) return;
  Check(cuda::LaunchAddSigmoidGated(src.data, x.data, gate.data, y.rows, x.cols,
                                    y.cols, y.data, stream_),
        "sigmoid-gated add");
}

void CudaBackend::Attend(const AttentionJob& job) {
  Bind();
  const int64_t n = job.q.rows;
  // Each sequence's block table, as far as its last token reads.
  std::vector<int64_t> blocks_of(job.sequences.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t& blocks = blocks_of[job.sequence_of[i]];
    blocks = std::max(
        blocks,
        job.position_of[i] / job.sequences[job.sequence_of[i]].block_size + 1);
  }
  // In a graph step every table takes the same power of two of entries
  // (null past the sequence's own), so that a step of the same sequences
  // one position on stages as many bytes and replays the same graph.
  int64_t table_entries = 0;
  if (mode_ != Mode::kEager) {
    table_entries = 8;
    for (const int64_t blocks : blocks_of) {
      while (table_entries < blocks) table_entries *= 2;
    }
  }
  std::vector<int64_t> offsets;
  std::vector<const float*> k_blocks, v_blocks;
  for (size_t s = 0; s < job.sequences.size(); ++s) {
    offsets.push_back(static_cast<int64_t>(k_blocks.size()));
    const KvBlocks& kv = job.sequences[s];
    k_blocks.insert(k_blocks.end(), kv.k_blocks, kv.k_blocks + blocks_of[s]);
    v_blocks.insert(v_blocks.end(), kv.v_blocks, kv.v_blocks + blocks_of[s]);
    const size_t padded = offsets.back() + table_entries;
    if (k_blocks.size() < padded) {
      k_blocks.resize(padded, nullptr);
      v_blocks.resize(padded, nullptr);
    }
  }
  cuda::AttentionParams p;
  p.d_q = job.q.data;
  p.n = n;
  p.heads = job.heads;
  p.kv_heads = job.kv_heads;
  p.head_dim = job.head_dim;
  p.scale = job.scale;
  p.window = job.window;
  ReserveStaging(2 * StagingBytes(k_blocks.size() * sizeof(const float*)) +
                 StagingBytes(offsets.size() * sizeof(int64_t)) +
                 StagingBytes(job.sequence_of.size() * sizeof(int32_t)) +
                 StagingBytes(job.position_of.size() * sizeof(int64_t)));
  p.d_k_blocks = Stage<const float*>(k_blocks);
  p.d_v_blocks = Stage<const float*>(v_blocks);
  p.d_table_offset = Stage<int64_t>(offsets);
  p.block_size = job.sequences.empty() ? 0 : job.sequences[0].block_size;
  for (const KvBlocks& kv : job.sequences) {
    // One paged cache serves a job: the kernel takes one block size.
    if (kv.block_size != p.block_size)
      Check(cudaErrorInvalidValue,
            "attention over caches of different block sizes");
  }
  p.d_sequence_of = Stage(job.sequence_of);
  p.d_position_of = Stage(job.position_of);
  p.d_sinks = job.sinks.empty() ? nullptr : job.sinks.data;
  p.d_out = job.out.data;
  SendArguments();
  Note({kOpAttention, Bits(p.d_q), Bits(p.n), Bits(p.heads), Bits(p.kv_heads),
        Bits(p.head_dim), Bits(p.scale), Bits(p.window), Bits(p.d_k_blocks),
        Bits(p.d_v_blocks), Bits(p.d_table_offset), Bits(p.block_size),
        Bits(p.d_sequence_of), Bits(p.d_position_of), Bits(p.d_sinks),
        Bits(p.d_out)});
  if (Running()) Check(cuda::LaunchAttention(p, stream_), "attention");
  if (work_ != nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t end = job.position_of[i] + 1;
      const int64_t first =
          job.window > 0 ? std::max<int64_t>(0, end - job.window) : 0;
      work_->flops += 4.0 * job.heads * job.head_dim * (end - first);
    }
  }
}

void CudaBackend::Note(std::initializer_list<uint64_t> params) {
  if (mode_ == Mode::kEager) return;
  step_params_.insert(step_params_.end(), params.begin(), params.end());
}

void CudaBackend::NoteWeight(const Weight& w) {
  Note({Bits(w.data), static_cast<uint64_t>(w.type), Bits(w.rows), Bits(w.cols),
        Bits(w.scales), static_cast<uint64_t>(w.group_size),
        Bits(w.block_scales), static_cast<uint64_t>(w.block_rows),
        static_cast<uint64_t>(w.block_cols), Bits(w.exponents)});
}

float* CudaBackend::ArenaAllocate(int64_t floats) {
  const size_t bytes = StagingBytes(std::max<int64_t>(floats, 1) * 4);
  const size_t offset = arena_blocks_.empty() ? 0
                                              : arena_blocks_.back().offset +
                                                    arena_blocks_.back().bytes;
  arena_blocks_.push_back({offset, bytes, false});
  arena_needed_ = std::max(arena_needed_, offset + bytes);
  Note({Bits(static_cast<int64_t>(offset)), Bits(static_cast<int64_t>(bytes))});
  if (offset + bytes > arena_capacity_) {
    // The step runs again outside a graph; the next graph step has room.
    FailGraphStep();
    return reinterpret_cast<float*>(d_arena_);
  }
  return reinterpret_cast<float*>(d_arena_ + offset);
}

void CudaBackend::ArenaRelease(const char* p) {
  for (size_t i = arena_blocks_.size(); i-- > 0;) {
    ArenaBlock& block = arena_blocks_[i];
    if (!block.released && d_arena_ + block.offset == p) {
      block.released = true;
      break;
    }
  }
  while (!arena_blocks_.empty() && arena_blocks_.back().released) {
    arena_blocks_.pop_back();
  }
}

void CudaBackend::DropGraphs() {
  for (auto& [hash, graph] : graphs_) cudaGraphExecDestroy(graph.exec);
  graphs_.clear();
  replayed_once_.clear();
}

bool CudaBackend::BeginGraphStep(GraphPhase phase, int64_t tokens) {
  // cuBLAS's products (more rows) stay out of graphs.
  if (mode_ != Mode::kEager || tokens > cuda::kMaxMmaProductRows) {
    return false;
  }
  Bind();
  // The last step's staged arguments and tensors are free once it ends.
  Synchronize();
  if (!error_.ok()) return false;
  if (d_arena_ == nullptr || arena_needed_ > arena_capacity_) {
    DropGraphs();
    cudaFree(d_arena_);
    d_arena_ = nullptr;
    arena_capacity_ = 0;
    const size_t capacity =
        std::max(kInitialArenaBytes, arena_needed_ + arena_needed_ / 4);
    if (cudaMalloc(&d_arena_, capacity) != cudaSuccess) {
      cudaGetLastError();
      d_arena_ = nullptr;
      return false;
    }
    arena_capacity_ = capacity;
  }
  arena_blocks_.clear();
  step_params_.clear();
  graph_failed_ = false;
  if (phase == GraphPhase::kRecord) {
    if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) !=
        cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    mode_ = Mode::kRecord;
  } else {
    mode_ = Mode::kReplay;
  }
  return true;
}

Backend::GraphOutcome CudaBackend::EndGraphStep() {
  const Mode mode = mode_;
  mode_ = Mode::kEager;
  const uint64_t hash = absl::HashOf(absl::MakeConstSpan(step_params_));
  ++graph_steps_;
  if (mode == Mode::kReplay) {
    if (graph_failed_) return GraphOutcome::kEager;
    if (auto it = graphs_.find(hash);
        it != graphs_.end() && it->second.params == step_params_) {
      it->second.last_used = graph_steps_;
      Check(cudaGraphLaunch(it->second.exec, stream_), "launching a graph");
      return GraphOutcome::kLaunched;
    }
    // Recorded the second time its operations come: a one-off step is
    // not worth an instantiation.
    if (replayed_once_.size() >= kMaxReplayedOnce) replayed_once_.clear();
    return replayed_once_.insert(hash).second ? GraphOutcome::kEager
                                              : GraphOutcome::kRecord;
  }
  if (mode != Mode::kRecord) return GraphOutcome::kEager;
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  const bool recorded = ended == cudaSuccess && graph != nullptr &&
                        !graph_failed_ &&
                        cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!recorded) {
    cudaGetLastError();  // capture errors are not the step's
    return GraphOutcome::kEager;
  }
  if (graphs_.size() >= kMaxGraphs) {
    auto oldest = graphs_.begin();
    for (auto it = graphs_.begin(); it != graphs_.end(); ++it) {
      if (it->second.last_used < oldest->second.last_used) oldest = it;
    }
    cudaGraphExecDestroy(oldest->second.exec);
    graphs_.erase(oldest);
  }
  StepGraph& slot = graphs_[hash];
  if (slot.exec != nullptr) cudaGraphExecDestroy(slot.exec);
  slot.params = std::move(step_params_);
  slot.exec = exec;
  slot.last_used = graph_steps_;
  Check(cudaGraphLaunch(exec, stream_), "launching a graph");
  return GraphOutcome::kLaunched;
}

const CudaBackend::ExpertTable* CudaBackend::TableFor(
    const RoutedExpertsJob& job) {
  const absl::Span<const MlpWeights> experts = job.experts;
  const auto key =
      std::make_tuple(experts.data(), experts.size(), experts.front().down.data,
                      experts.back().down.data, job.selection_bias);
  if (const auto it = expert_tables_.find(key); it != expert_tables_.end()) {
    return &it->second;
  }
  // Uploading synchronises: not while recording.
  if (mode_ == Mode::kRecord) {
    FailGraphStep();
    return nullptr;
  }
  const MlpWeights& first = experts.front();
  const auto same_shape = [](const Weight& a, const Weight& b) {
    return a.type == b.type && a.rows == b.rows && a.cols == b.cols &&
           a.group_size == b.group_size && a.block_rows == b.block_rows &&
           a.block_cols == b.block_cols;
  };
  const auto same_activation = [](const GatedActivation& a,
                                  const GatedActivation& b) {
    return a.kind == b.kind && a.alpha == b.alpha && a.limit == b.limit;
  };
  ExpertTable table;
  table.fused = first.fused();
  table.type = first.down.type;
  table.intermediate = first.intermediate();
  table.vectorized_gate_up = table.vectorized_down = true;
  // The kernels read gate, up and down as one type.
  if ((table.fused ? first.gate_up.type : first.gate.type) != table.type ||
      (!table.fused && first.up.type != table.type)) {
    return nullptr;
  }
  std::vector<cuda::DeviceExpert> host(experts.size());
  for (size_t e = 0; e < experts.size(); ++e) {
    const MlpWeights& m = experts[e];
    if (m.fused() != table.fused || !same_shape(m.down, first.down) ||
        !same_activation(m.activation, first.activation) ||
        m.gate_up_bias.empty() != first.gate_up_bias.empty() ||
        m.down_bias.empty() != first.down_bias.empty() ||
        (table.fused && !same_shape(m.gate_up, first.gate_up)) ||
        (!table.fused &&
         (!same_shape(m.gate, first.gate) || !same_shape(m.up, first.up)))) {
      return nullptr;
    }
    cuda::DeviceExpert& d = host[e];
    if (table.fused) {
      d.gate_up = AsDevice(m.gate_up);
      table.vectorized_gate_up &= cuda::CanDecodeVectorized(d.gate_up);
    } else {
      d.gate = AsDevice(m.gate);
      d.up = AsDevice(m.up);
      table.vectorized_gate_up &=
          cuda::CanDecodeVectorized(d.gate) && cuda::CanDecodeVectorized(d.up);
    }
    d.down = AsDevice(m.down);
    table.vectorized_down &= cuda::CanDecodeVectorized(d.down);
    d.gate_up_bias = m.gate_up_bias.empty() ? nullptr : m.gate_up_bias.data;
    d.down_bias = m.down_bias.empty() ? nullptr : m.down_bias.data;
  }
  table.expert_bytes = static_cast<uint64_t>(
      StoredBytes(first.gate) + StoredBytes(first.up) +
      StoredBytes(first.gate_up) + StoredBytes(first.down));
  const size_t table_bytes = host.size() * sizeof(cuda::DeviceExpert);
  const size_t bias_bytes =
      job.selection_bias == nullptr ? 0 : experts.size() * sizeof(float);
  if (cudaError_t e = cudaMalloc(&table.d_experts, table_bytes);
      e != cudaSuccess) {
    Check(e, "allocating an expert table");
    return nullptr;
  }
  Check(cudaMemcpy(table.d_experts, host.data(), table_bytes,
                   cudaMemcpyHostToDevice),
        "uploading an expert table");
  if (bias_bytes > 0) {
    if (cudaError_t e = cudaMalloc(&table.d_selection_bias, bias_bytes);
        e != cudaSuccess) {
      cudaFree(table.d_experts);
      Check(e, "allocating a selection bias");
      return nullptr;
    }
    Check(cudaMemcpy(table.d_selection_bias, job.selection_bias, bias_bytes,
                     cudaMemcpyHostToDevice),
          "uploading a selection bias");
  }
  return &expert_tables_.emplace(key, table).first->second;
}

bool CudaBackend::RunRoutedExperts(const RoutedExpertsJob& job) {
  const int64_t n = job.x.rows, num_experts = job.experts.size();
  const model::RoutingSpec& routing = *job.routing;
  if (n <= 0 || n > cuda::kMaxRoutedTokens || num_experts == 0 ||
      num_experts > cuda::kMaxRoutedExperts || job.top_k <= 0 ||
      job.top_k > cuda::kMaxRoutedTopK || job.top_k > num_experts ||
      routing.num_groups <= 0 || num_experts % routing.num_groups != 0 ||
      reinterpret_cast<uintptr_t>(job.x.data) % 16 != 0) {
    return false;
  }
  Bind();
  const ExpertTable* table = TableFor(job);
  if (table == nullptr) return false;
  Note({kOpRoutedExperts, Bits(job.x.data), Bits(n), Bits(job.x.cols),
        Bits(job.logits.data), Bits(job.top_k), Bits(table->d_experts),
        Bits(job.out.data)});
  cuda::RoutedExpertsParams p;
  p.d_x = job.x.data;
  p.d_logits = job.logits.data;
  p.n = n;
  p.hidden = job.x.cols;
  p.intermediate = table->intermediate;
  p.routing.num_experts = static_cast<int32_t>(num_experts);
  p.routing.top_k = static_cast<int32_t>(job.top_k);
  p.routing.sigmoid = routing.scoring == model::RouterScoring::kSigmoid;
  p.routing.top_k_first = routing.order == model::RouterOrder::kTopKThenSoftmax;
  p.routing.num_groups = static_cast<int32_t>(routing.num_groups);
  p.routing.topk_groups = static_cast<int32_t>(routing.topk_groups);
  p.routing.group_sum_of_two =
      routing.group_scoring == model::GroupScoring::kTopTwoSum;
  p.routing.renormalize = routing.renormalize;
  p.routing.scaling_factor = static_cast<float>(routing.scaling_factor);
  p.routing.d_selection_bias = table->d_selection_bias;
  p.d_experts = table->d_experts;
  p.type = table->type;
  p.fused = table->fused;
  p.activation = AsParams(job.experts.front().activation);
  p.vectorized_gate_up = table->vectorized_gate_up;
  p.vectorized_down = table->vectorized_down;
  p.expert_bytes = table->expert_bytes;
  p.d_out = job.out.data;
  // Counted only while work is (a step without it reads nothing back); a
  // graph recorded counting replays only in steps that count.
  if (work_ != nullptr) {
    p.d_weight_bytes = d_routed_bytes_;
    routed_bytes_pending_ = true;
    work_->flops += 2.0 * n * job.top_k * 3 * table->intermediate * p.hidden;
  }
  const size_t scratch_bytes = cuda::RoutedExpertsScratchBytes(
      n, job.top_k, num_experts, p.hidden, p.intermediate);
  float* scratch = Allocate(static_cast<int64_t>((scratch_bytes + 3) / 4));
  p.d_scratch = scratch;
  Note({Bits(scratch), Bits(p.d_weight_bytes)});
  if (scratch != nullptr && Running()) {
    Check(cuda::LaunchRoutedExperts(p, stream_), "routed experts");
  }
  Free(scratch);
  return true;
}

void CudaBackend::AbsorbMlaQueries(const Tensor& q, const Weight& kv_b,
                                   const model::MlaSpec& mla, int64_t heads,
                                   const Tensor& absorbed) {
  Bind();
  const int64_t nope = mla.qk_nope_head_dim, v_dim = mla.v_head_dim;
  Note({kOpAbsorb, Bits(q.data), Bits(q.rows), Bits(heads), Bits(nope),
        Bits(mla.qk_head_dim()), Bits(v_dim), Bits(mla.kv_lora_rank),
        Bits(absorbed.data)});
  NoteWeight(kv_b);
  if (Running()) {
    Check(cuda::LaunchAbsorbMlaQueries(
              q.data, q.rows, AsDevice(kv_b), heads, nope, mla.qk_head_dim(),
              v_dim, mla.kv_lora_rank, absorbed.data, stream_),
          "MLA query absorption");
  }
  if (work_ != nullptr) {
    work_->weight_bytes += StoredBytes(kv_b) * nope / (nope + v_dim);
    work_->flops += 2.0 * q.rows * heads * nope * mla.kv_lora_rank;
  }
}

void CudaBackend::ExpandMlaValues(const Tensor& attended, const Weight& kv_b,
                                  const model::MlaSpec& mla, int64_t heads,
                                  const Tensor& values,
                                  int64_t /*batch_rows*/) {
  Bind();
  const int64_t nope = mla.qk_nope_head_dim, v_dim = mla.v_head_dim;
  Note({kOpExpand, Bits(attended.data), Bits(attended.rows), Bits(heads),
        Bits(nope), Bits(v_dim), Bits(mla.kv_lora_rank),
        Bits(mla.cache_width()), Bits(values.data)});
  NoteWeight(kv_b);
  if (Running()) {
    Check(cuda::LaunchExpandMlaValues(
              attended.data, attended.rows, AsDevice(kv_b), heads, nope, v_dim,
              mla.kv_lora_rank, mla.cache_width(), values.data, stream_),
          "MLA value expansion");
  }
  if (work_ != nullptr) {
    work_->weight_bytes +=
        StoredBytes(kv_b) - StoredBytes(kv_b) * nope / (nope + v_dim);
    work_->flops += 2.0 * attended.rows * heads * v_dim * mla.kv_lora_rank;
  }
}

}  // namespace ringmoe::backend

#include "engine/backend/cuda_backend.h"

#include <algorithm>
#include <cstring>

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
  ReleaseArguments();
  for (void* p : uploads_) cudaFree(p);
  for (auto& [key, table] : expert_tables_) {
    cudaFree(table.d_experts);
    cudaFree(table.d_selection_bias);
  }
  cudaFree(d_routed_bytes_);
  if (staging_ != nullptr) cudaFreeHost(staging_);
  if (cublas_ != nullptr) cuda::LoadCublas()->destroy(cublas_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string CudaBackend::name() const { return absl::StrCat("cuda:", device_); }

void CudaBackend::Bind() { Check(cudaSetDevice(device_), "cudaSetDevice"); }

void CudaBackend::Check(cudaError_t error, const char* what) {
  if (error == cudaSuccess || !error_.ok()) return;
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
  void* p = nullptr;
  Check(cudaMallocAsync(&p, std::max<int64_t>(n, 1) * sizeof(float), stream_),
        "cudaMallocAsync");
  return static_cast<float*>(p);
}

void CudaBackend::Free(float* data) {
  Bind();
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

void* CudaBackend::StagePinned(const void* host, size_t bytes) {
  const size_t aligned = (bytes + 255) & ~size_t{255};
  if (staging_used_ + aligned > staging_capacity_) {
    // Every earlier copy out of the staging memory must finish first.
    Synchronize();
    if (aligned > staging_capacity_) {
      cudaFreeHost(staging_);
      staging_ = nullptr;
      staging_capacity_ = 0;
      const size_t capacity = std::max(aligned, 2 * kInitialStagingBytes);
      Check(cudaHostAlloc(&staging_, capacity, cudaHostAllocDefault),
            "cudaHostAlloc");
      if (staging_ == nullptr) return nullptr;
      staging_capacity_ = capacity;
    }
  }
  char* pinned = staging_ + staging_used_;
  staging_used_ += aligned;
  std::memcpy(pinned, host, bytes);
  return pinned;
}

const void* CudaBackend::StageArgument(const void* host, size_t bytes) {
  if (bytes == 0) return nullptr;
  const void* pinned = StagePinned(host, bytes);
  void* device = nullptr;
  Check(cudaMallocAsync(&device, bytes, stream_), "cudaMallocAsync");
  if (pinned == nullptr || device == nullptr) return device;
  Check(cudaMemcpyAsync(device, pinned, bytes, cudaMemcpyHostToDevice, stream_),
        "staging a host argument");
  arguments_.push_back(device);
  return device;
}

void CudaBackend::ReleaseArguments() {
  for (void* p : arguments_) Check(cudaFreeAsync(p, stream_), "cudaFreeAsync");
  arguments_.clear();
}

void CudaBackend::Synchronize() {
  Bind();
  Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  staging_used_ = 0;
}

void CudaBackend::CopyToHost(const Tensor& src, float* dst) {
  Bind();
  Check(cudaMemcpyAsync(dst, src.data, src.size() * sizeof(float),
                        cudaMemcpyDeviceToHost, stream_),
        "copying to the host");
  Synchronize();
}

void CudaBackend::CopyFromHost(const float* src, const Tensor& dst) {
  Bind();
  const size_t bytes = dst.size() * sizeof(float);
  if (bytes == 0) return;
  if (const void* pinned = StagePinned(src, bytes); pinned != nullptr) {
    Check(cudaMemcpyAsync(dst.data, pinned, bytes, cudaMemcpyHostToDevice,
                          stream_),
          "copying from the host");
  }
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
  const cuda::DeviceWeight d = AsDevice(w);
  float* scratch = nullptr;
  if (x.rows > cuda::kMaxFusedProductRows) {
    if (const int64_t floats = cuda::ProductScratchFloats(d); floats > 0) {
      scratch = Allocate(floats);
    }
  }
  Check(
      cuda::LaunchProduct(d, x.data, x.rows, y.data, scratch, cublas_, stream_),
      "product");
  Free(scratch);
  CountProduct(w, x.rows);
}

void CudaBackend::MatMul(absl::Span<const Product> products) {
  Bind();
  for (const Product& p : products) RunProduct(p.x, *p.w, p.y);
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
      Check(cuda::LaunchGatedActivation(
                gate_up.tensor().data, gate_up.tensor().data + 1, 2, n * inter,
                AsParams(w.activation), hidden.tensor().data, stream_),
            "gated activation");
    } else {
      const Buffer up = NewTensor(n, inter);
      RunProduct(t.x, w.gate, hidden);
      RunProduct(t.x, w.up, up);
      Check(cuda::LaunchGatedActivation(hidden.tensor().data, up.tensor().data,
                                        1, n * inter, AsParams(w.activation),
                                        hidden.tensor().data, stream_),
            "gated activation");
    }
    RunProduct(hidden, w.down, t.out);
    if (!w.down_bias.empty()) AddBias(t.out, w.down_bias);
  }
}

void CudaBackend::Embed(const Weight& table, absl::Span<const int32_t> tokens,
                        const Tensor& out) {
  Bind();
  Check(
      cuda::LaunchEmbed(AsDevice(table), Stage(tokens),
                        static_cast<int64_t>(tokens.size()), out.data, stream_),
      "embedding");
  ReleaseArguments();
  if (work_ != nullptr) {
    work_->weight_bytes +=
        static_cast<int64_t>(tokens.size()) *
        kernels::RowBytes(table.type, table.cols, table.group_size);
  }
}

void CudaBackend::RmsNorm(const Tensor& x, const Vector& weight, float eps,
                          const Tensor& y) {
  Bind();
  Check(cuda::LaunchRmsNormF32(x.data, weight.data, y.data,
                               static_cast<int>(x.rows),
                               static_cast<int>(x.cols), eps, stream_),
        "RMSNorm");
}

void CudaBackend::AddBias(const Tensor& y, const Vector& bias) {
  Bind();
  Check(cuda::LaunchAddBias(y.data, y.rows, y.cols, bias.data, stream_),
        "bias");
}

void CudaBackend::Add(const Tensor& y, const Tensor& x) {
  Bind();
  Check(cuda::LaunchAdd(y.data, x.data, y.size(), stream_), "add");
}

void CudaBackend::Clamp(const Tensor& y, float limit) {
  Bind();
  Check(cuda::LaunchClamp(y.data, y.size(), limit, stream_), "clamp");
}

void CudaBackend::SetZero(const Tensor& y) {
  Bind();
  Check(cudaMemsetAsync(y.data, 0, y.size() * sizeof(float), stream_), "zero");
}

void CudaBackend::ApplyRotary(const Tensor& x, const RotarySlots& slots,
                              const Tensor& cos, const Tensor& sin) {
  Bind();
  Check(cuda::LaunchRotary(x.data, x.rows, x.cols, slots.count, slots.stride,
                           slots.offset, slots.dim, slots.interleaved, cos.data,
                           sin.data, stream_),
        "rotary embedding");
}

void CudaBackend::WriteRows(const Tensor& src, absl::Span<float* const> dst) {
  Bind();
  Check(cuda::LaunchWriteRows(src.data, static_cast<int64_t>(dst.size()),
                              src.cols, Stage(dst), stream_),
        "writing rows");
  ReleaseArguments();
}

void CudaBackend::GatherRows(const Tensor& x, absl::Span<const int32_t> rows,
                             const Tensor& out) {
  Bind();
  Check(cuda::LaunchGatherRows(x.data, x.cols, Stage(rows),
                               static_cast<int64_t>(rows.size()), out.data,
                               stream_),
        "gathering rows");
  ReleaseArguments();
}

void CudaBackend::AddScaledRows(const Tensor& src,
                                absl::Span<const int32_t> rows,
                                absl::Span<const float> scales,
                                const Tensor& y) {
  Bind();
  Check(cuda::LaunchAddScaledRows(src.data, y.cols, Stage(rows), Stage(scales),
                                  static_cast<int64_t>(rows.size()), y.data,
                                  stream_),
        "adding scaled rows");
  ReleaseArguments();
}

void CudaBackend::AddSigmoidGated(const Tensor& src, const Tensor& x,
                                  const Vector& gate, const Tensor& y) {
  Bind();
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
  std::vector<int64_t> offsets;
  std::vector<const float*> k_blocks, v_blocks;
  for (size_t s = 0; s < job.sequences.size(); ++s) {
    offsets.push_back(static_cast<int64_t>(k_blocks.size()));
    const KvBlocks& kv = job.sequences[s];
    k_blocks.insert(k_blocks.end(), kv.k_blocks, kv.k_blocks + blocks_of[s]);
    v_blocks.insert(v_blocks.end(), kv.v_blocks, kv.v_blocks + blocks_of[s]);
  }
  cuda::AttentionParams p;
  p.d_q = job.q.data;
  p.n = n;
  p.heads = job.heads;
  p.kv_heads = job.kv_heads;
  p.head_dim = job.head_dim;
  p.scale = job.scale;
  p.window = job.window;
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
  Check(cuda::LaunchAttention(p, stream_), "attention");
  ReleaseArguments();
  if (work_ != nullptr) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t end = job.position_of[i] + 1;
      const int64_t first =
          job.window > 0 ? std::max<int64_t>(0, end - job.window) : 0;
      work_->flops += 4.0 * job.heads * job.head_dim * (end - first);
    }
  }
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
  if (work_ != nullptr) {
    p.d_weight_bytes = d_routed_bytes_;
    routed_bytes_pending_ = true;
    work_->flops += 2.0 * n * job.top_k * 3 * table->intermediate * p.hidden;
  }
  const size_t scratch_bytes = cuda::RoutedExpertsScratchBytes(
      n, job.top_k, num_experts, p.hidden, p.intermediate);
  float* scratch = Allocate(static_cast<int64_t>((scratch_bytes + 3) / 4));
  p.d_scratch = scratch;
  if (scratch != nullptr) {
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
  Check(cuda::LaunchAbsorbMlaQueries(q.data, q.rows, AsDevice(kv_b), heads,
                                     nope, mla.qk_head_dim(), v_dim,
                                     mla.kv_lora_rank, absorbed.data, stream_),
        "MLA query absorption");
  if (work_ != nullptr) {
    work_->weight_bytes += StoredBytes(kv_b) * nope / (nope + v_dim);
    work_->flops += 2.0 * q.rows * heads * nope * mla.kv_lora_rank;
  }
}

void CudaBackend::ExpandMlaValues(const Tensor& attended, const Weight& kv_b,
                                  const model::MlaSpec& mla, int64_t heads,
                                  const Tensor& values) {
  Bind();
  const int64_t nope = mla.qk_nope_head_dim, v_dim = mla.v_head_dim;
  Check(cuda::LaunchExpandMlaValues(
            attended.data, attended.rows, AsDevice(kv_b), heads, nope, v_dim,
            mla.kv_lora_rank, mla.cache_width(), values.data, stream_),
        "MLA value expansion");
  if (work_ != nullptr) {
    work_->weight_bytes +=
        StoredBytes(kv_b) - StoredBytes(kv_b) * nope / (nope + v_dim);
    work_->flops += 2.0 * attended.rows * heads * v_dim * mla.kv_lora_rank;
  }
}

}  // namespace ringmoe::backend

#include "memory_ring/cuda_tier.h"

#include "absl/strings/str_cat.h"

namespace ringmoe::memory_ring {
namespace {

absl::Status CudaError(cudaError_t err, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

class DeviceBuffer : public TierBuffer {
 public:
  DeviceBuffer(uint8_t* data, size_t size) : data_(data), size_(size) {}
  ~DeviceBuffer() override { cudaFree(data_); }
  uint8_t* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  uint8_t* data_;
  size_t size_;
};

class CudaTier : public Tier {
 public:
  CudaTier(std::vector<TierBuffer*> sources, int device, cudaStream_t compute,
           cudaStream_t copy)
      : sources_(std::move(sources)), device_(device), compute_(compute), copy_(copy) {}

  ~CudaTier() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(copy_);
    cudaStreamDestroy(copy_);
  }

  absl::string_view name() const override { return "host_to_device"; }

  absl::StatusOr<std::unique_ptr<TierBuffer>> Allocate(size_t bytes) override {
    cudaSetDevice(device_);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate ", bytes, " bytes on cuda:", device_, ": ", cudaGetErrorString(err)));
    }
    return std::unique_ptr<TierBuffer>(new DeviceBuffer(static_cast<uint8_t*>(p), bytes));
  }

  Fence RecordComputeFence() override {
    cudaSetDevice(device_);
    cudaEvent_t event;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess) return nullptr;
    if (cudaEventRecord(event, compute_) != cudaSuccess) {
      cudaEventDestroy(event);
      return nullptr;
    }
    return Fence(event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  }

  void CopyAsync(std::vector<CopyPiece> pieces, uint8_t* dst, Fence after,
                 Done done) override {
    absl::Status status = Enqueue(pieces, dst, after);
    if (!status.ok()) {
      done(std::move(status));
      return;
    }
    // Runs on a CUDA driver thread once the copies have landed; it calls
    // back into the ring only (no CUDA calls allowed there).
    auto* callback = new Done(std::move(done));
    cudaError_t err = cudaLaunchHostFunc(
        copy_,
        [](void* arg) {
          std::unique_ptr<Done> d(static_cast<Done*>(arg));
          (*d)(absl::OkStatus());
        },
        callback);
    if (err != cudaSuccess) {
      std::unique_ptr<Done> d(callback);
      (*d)(CudaError(err, "cudaLaunchHostFunc"));
    }
  }

  absl::Status CopyWithin(uint8_t* dst, const uint8_t* src, size_t bytes) override {
    // On the compute stream: ordered after the compute that produced the
    // slot's contents and before any that reads the copy.
    cudaError_t err = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_);
    return err == cudaSuccess ? absl::OkStatus() : CudaError(err, "device-to-device copy");
  }

 private:
  absl::Status Enqueue(const std::vector<CopyPiece>& pieces, uint8_t* dst, const Fence& after) {
    cudaSetDevice(device_);
    if (after) {
      cudaError_t err = cudaStreamWaitEvent(copy_, static_cast<cudaEvent_t>(after.get()), 0);
      if (err != cudaSuccess) return CudaError(err, "cudaStreamWaitEvent");
    }
    for (const CopyPiece& p : pieces) {
      if (p.source < 0 || p.source >= static_cast<int>(sources_.size()) ||
          p.offset + p.size > sources_[p.source]->size()) {
        return absl::OutOfRangeError(absl::StrCat("host source ", p.source, " has no bytes [",
                                                  p.offset, ", ", p.offset + p.size, ")"));
      }
      cudaError_t err = cudaMemcpyAsync(dst + p.dst_offset, sources_[p.source]->data() + p.offset,
                                        p.size, cudaMemcpyHostToDevice, copy_);
      if (err != cudaSuccess) return CudaError(err, "host-to-device copy");
    }
    return absl::OkStatus();
  }

  std::vector<TierBuffer*> sources_;
  const int device_;
  cudaStream_t compute_;
  cudaStream_t copy_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PinnedBuffer>> PinnedBuffer::Create(size_t bytes) {
  void* p = nullptr;
  cudaError_t err = cudaMallocHost(&p, bytes);
  if (err != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot pin ", bytes, " bytes of host memory: ", cudaGetErrorString(err)));
  }
  return std::unique_ptr<PinnedBuffer>(new PinnedBuffer(static_cast<uint8_t*>(p), bytes));
}

PinnedBuffer::~PinnedBuffer() { cudaFreeHost(data_); }

absl::StatusOr<std::unique_ptr<Tier>> CreateCudaTier(std::vector<TierBuffer*> sources,
                                                     int device, cudaStream_t compute_stream) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaError(err, absl::StrCat("cuda:", device));
  cudaStream_t copy;
  err = cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking);
  if (err != cudaSuccess) return CudaError(err, "creating the copy stream");
  return std::unique_ptr<Tier>(new CudaTier(std::move(sources), device, compute_stream, copy));
}

}  // namespace ringmoe::memory_ring

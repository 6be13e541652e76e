#include "memory_ring/cuda_tier.h"

#include <functional>

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

// What both CUDA tiers share: device memory, fences on the compute stream,
// copies within the device, and the ordered upload path on the copy stream.
class CudaTierBase : public Tier {
 public:
  CudaTierBase(int device, cudaStream_t compute, cudaStream_t copy)
      : device_(device), compute_(compute), copy_(copy) {}

  ~CudaTierBase() override {
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
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes on cuda:", device_,
                       ": ", cudaGetErrorString(err)));
    }
    return std::unique_ptr<TierBuffer>(
        new DeviceBuffer(static_cast<uint8_t*>(p), bytes));
  }

  Fence RecordComputeFence() override {
    cudaSetDevice(device_);
    cudaEvent_t event;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) !=
        cudaSuccess) {
      return nullptr;
    }
    if (cudaEventRecord(event, compute_) != cudaSuccess) {
      cudaEventDestroy(event);
      return nullptr;
    }
    return Fence(
        event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  }

  absl::Status CopyWithin(uint8_t* dst, const uint8_t* src,
                          size_t bytes) override {
    // On the compute stream: ordered after the compute that produced the
    // slot's contents and before any that reads the copy.
    cudaError_t err =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_);
    return err == cudaSuccess ? absl::OkStatus()
                              : CudaError(err, "device-to-device copy");
  }

 protected:
  // One host-to-device copy of an upload.
  struct Upload {
    uint8_t* dst;
    const uint8_t* src;
    size_t bytes;
  };

  // Enqueues `uploads` on the copy stream after `after`, then `landed`
  // (which must not call CUDA: it runs on a driver thread) once they are
  // done. `landed` gets the error instead if enqueueing fails.
  void UploadThen(const std::vector<Upload>& uploads, const Fence& after,
                  std::function<void(absl::Status)> landed) {
    cudaSetDevice(device_);
    cudaError_t err = cudaSuccess;
    if (after) {
      err =
          cudaStreamWaitEvent(copy_, static_cast<cudaEvent_t>(after.get()), 0);
    }
    for (size_t i = 0; i < uploads.size() && err == cudaSuccess; ++i) {
      err = cudaMemcpyAsync(uploads[i].dst, uploads[i].src, uploads[i].bytes,
                            cudaMemcpyHostToDevice, copy_);
    }
    if (err != cudaSuccess) {
      cudaStreamSynchronize(copy_);
      landed(CudaError(err, "host-to-device copy"));
      return;
    }
    auto* callback = new std::function<void(absl::Status)>(std::move(landed));
    err = cudaLaunchHostFunc(
        copy_,
        [](void* arg) {
          std::unique_ptr<std::function<void(absl::Status)>> f(
              static_cast<std::function<void(absl::Status)>*>(arg));
          (*f)(absl::OkStatus());
        },
        callback);
    if (err != cudaSuccess) {
      std::unique_ptr<std::function<void(absl::Status)>> f(callback);
      cudaStreamSynchronize(copy_);
      (*f)(CudaError(err, "cudaLaunchHostFunc"));
    }
  }

  const int device_;
  cudaStream_t compute_;
  cudaStream_t copy_;
};

// Pinned host sources -> device.
class CudaTier : public CudaTierBase {
 public:
  CudaTier(std::vector<TierBuffer*> sources, int device, cudaStream_t compute,
           cudaStream_t copy)
      : CudaTierBase(device, compute, copy), sources_(std::move(sources)) {}

  void CopyAsync(std::vector<CopyPiece> pieces, uint8_t* dst, Fence after,
                 Done done) override {
    std::vector<Upload> uploads;
    for (const CopyPiece& p : pieces) {
      if (p.source < 0 || p.source >= static_cast<int>(sources_.size()) ||
          p.offset + p.size > sources_[p.source]->size()) {
        done(absl::OutOfRangeError(absl::StrCat("host source ", p.source,
                                                " has no bytes [", p.offset,
                                                ", ", p.offset + p.size, ")")));
        return;
      }
      uploads.push_back(
          {dst + p.dst_offset, sources_[p.source]->data() + p.offset, p.size});
    }
    UploadThen(uploads, after, std::move(done));
  }

 private:
  std::vector<TierBuffer*> sources_;
};

absl::StatusOr<cudaStream_t> CreateCopyStream(int device) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaError(err, absl::StrCat("cuda:", device));
  cudaStream_t copy;
  err = cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking);
  if (err != cudaSuccess) return CudaError(err, "creating the copy stream");
  return copy;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PinnedBuffer>> PinnedBuffer::Create(
    size_t bytes) {
  void* p = nullptr;
  cudaError_t err = cudaMallocHost(&p, bytes);
  if (err != cudaSuccess) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot pin ", bytes,
                     " bytes of host memory: ", cudaGetErrorString(err)));
  }
  return std::unique_ptr<PinnedBuffer>(
      new PinnedBuffer(static_cast<uint8_t*>(p), bytes));
}

PinnedBuffer::~PinnedBuffer() { cudaFreeHost(data_); }

absl::StatusOr<std::unique_ptr<Tier>> CreateCudaTier(
    std::vector<TierBuffer*> sources, int device, cudaStream_t compute_stream) {
  absl::StatusOr<cudaStream_t> copy = CreateCopyStream(device);
  if (!copy.ok()) return copy.status();
  return std::unique_ptr<Tier>(
      new CudaTier(std::move(sources), device, compute_stream, *copy));
}

}  // namespace ringmoe::memory_ring

#include "memory_ring/cuda_tier.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace ringmoe::memory_ring {
namespace {

absl::Status CudaError(cudaError_t err, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(err)));
}

// An event recorded on `stream` after the work issued so far, as a fence.
Tier::Fence RecordEvent(int device, cudaStream_t stream) {
  cudaSetDevice(device);
  cudaEvent_t event;
  if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess)
    return nullptr;
  if (cudaEventRecord(event, stream) != cudaSuccess) {
    cudaEventDestroy(event);
    return nullptr;
  }
  return Tier::Fence(
      event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
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
      : sources_(std::move(sources)),
        device_(device),
        compute_(compute),
        copy_(copy) {}

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
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes on cuda:", device_,
                       ": ", cudaGetErrorString(err)));
    }
    return std::unique_ptr<TierBuffer>(
        new DeviceBuffer(static_cast<uint8_t*>(p), bytes));
  }

  Fence RecordComputeFence() override { return RecordEvent(device_, compute_); }

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

  absl::Status CopyWithin(uint8_t* dst, const uint8_t* src,
                          size_t bytes) override {
    // On the compute stream: ordered after the compute that produced the
    // slot's contents and before any that reads the copy.
    cudaError_t err =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_);
    return err == cudaSuccess ? absl::OkStatus()
                              : CudaError(err, "device-to-device copy");
  }

 private:
  absl::Status Enqueue(const std::vector<CopyPiece>& pieces, uint8_t* dst,
                       const Fence& after) {
    cudaSetDevice(device_);
    if (after) {
      cudaError_t err =
          cudaStreamWaitEvent(copy_, static_cast<cudaEvent_t>(after.get()), 0);
      if (err != cudaSuccess) return CudaError(err, "cudaStreamWaitEvent");
    }
    for (const CopyPiece& p : pieces) {
      if (p.source < 0 || p.source >= static_cast<int>(sources_.size()) ||
          p.offset + p.size > sources_[p.source]->size()) {
        return absl::OutOfRangeError(
            absl::StrCat("host source ", p.source, " has no bytes [", p.offset,
                         ", ", p.offset + p.size, ")"));
      }
      cudaError_t err = cudaMemcpyAsync(dst + p.dst_offset,
                                        sources_[p.source]->data() + p.offset,
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

// Disk -> pinned staging -> device. Reads run on the disk tier's threads;
// each staged section is then copied up on the copy stream, and the staging
// buffer returns to the pool from a host callback after that copy.
class StagedCudaTier : public Tier {
 public:
  StagedCudaTier(std::unique_ptr<Tier> disk,
                 std::vector<std::unique_ptr<PinnedBuffer>> staging, int device,
                 cudaStream_t compute, cudaStream_t copy)
      : disk_(std::move(disk)),
        staging_(std::move(staging)),
        free_(staging_.size(), true),
        device_(device),
        compute_(compute),
        copy_(copy) {}

  ~StagedCudaTier() override {
    std::unique_lock<std::mutex> lock(mu_);
    returned_.wait(lock, [this] {
      return std::all_of(free_.begin(), free_.end(), [](bool f) { return f; });
    });
    lock.unlock();
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

  Fence RecordComputeFence() override { return RecordEvent(device_, compute_); }

  void CopyAsync(std::vector<CopyPiece> pieces, uint8_t* dst, Fence after,
                 Done done) override {
    int stage;
    {
      // Waits for a staging buffer: at most `stages` sections are in flight.
      std::unique_lock<std::mutex> lock(mu_);
      returned_.wait(lock, [this] {
        return std::find(free_.begin(), free_.end(), true) != free_.end();
      });
      stage = static_cast<int>(std::find(free_.begin(), free_.end(), true) -
                               free_.begin());
      free_[stage] = false;
    }
    uint64_t span = 0;
    for (const CopyPiece& p : pieces)
      span = std::max(span, p.dst_offset + p.size);
    if (span > staging_[stage]->size()) {
      Return(stage);
      done(absl::OutOfRangeError(absl::StrCat(
          "section of ", span, " bytes exceeds the staging buffer")));
      return;
    }
    // Read into the staging buffer at the pieces' slot offsets, then copy
    // the same ranges up.
    std::vector<CopyPiece> up = pieces;
    disk_->CopyAsync(
        std::move(pieces), staging_[stage]->data(), nullptr,
        [this, stage, up = std::move(up), dst, after = std::move(after),
         done = std::move(done)](absl::Status status) mutable {
          if (!status.ok()) {
            Return(stage);
            done(std::move(status));
            return;
          }
          status = Upload(up, staging_[stage]->data(), dst, after);
          if (!status.ok()) {
            Return(stage);
            done(std::move(status));
            return;
          }
          struct Landed {
            StagedCudaTier* tier;
            int stage;
            Done done;
          };
          auto* landed = new Landed{this, stage, std::move(done)};
          cudaError_t err = cudaLaunchHostFunc(
              copy_,
              [](void* arg) {
                std::unique_ptr<Landed> l(static_cast<Landed*>(arg));
                l->tier->Return(l->stage);
                l->done(absl::OkStatus());
              },
              landed);
          if (err != cudaSuccess) {
            std::unique_ptr<Landed> l(landed);
            cudaStreamSynchronize(copy_);
            Return(stage);
            l->done(CudaError(err, "cudaLaunchHostFunc"));
          }
        });
  }

  absl::Status CopyWithin(uint8_t* dst, const uint8_t* src,
                          size_t bytes) override {
    cudaError_t err =
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, compute_);
    return err == cudaSuccess ? absl::OkStatus()
                              : CudaError(err, "device-to-device copy");
  }

 private:
  absl::Status Upload(const std::vector<CopyPiece>& pieces,
                      const uint8_t* staging, uint8_t* dst,
                      const Fence& after) {
    cudaSetDevice(device_);
    if (after) {
      cudaError_t err =
          cudaStreamWaitEvent(copy_, static_cast<cudaEvent_t>(after.get()), 0);
      if (err != cudaSuccess) return CudaError(err, "cudaStreamWaitEvent");
    }
    for (const CopyPiece& p : pieces) {
      cudaError_t err =
          cudaMemcpyAsync(dst + p.dst_offset, staging + p.dst_offset, p.size,
                          cudaMemcpyHostToDevice, copy_);
      if (err != cudaSuccess) return CudaError(err, "host-to-device copy");
    }
    return absl::OkStatus();
  }

  void Return(int stage) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      free_[stage] = true;
    }
    returned_.notify_all();
  }

  std::unique_ptr<Tier> disk_;
  std::vector<std::unique_ptr<PinnedBuffer>> staging_;
  std::mutex mu_;
  std::condition_variable returned_;
  std::vector<bool> free_;  // guarded by mu_
  const int device_;
  cudaStream_t compute_;
  cudaStream_t copy_;
};

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

absl::StatusOr<std::unique_ptr<Tier>> CreateStagedCudaTier(
    std::unique_ptr<Tier> disk, int device, cudaStream_t compute_stream,
    size_t staging_bytes, int stages) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaError(err, absl::StrCat("cuda:", device));
  std::vector<std::unique_ptr<PinnedBuffer>> staging;
  for (int i = 0; i < std::max(1, stages); ++i) {
    absl::StatusOr<std::unique_ptr<PinnedBuffer>> b =
        PinnedBuffer::Create(staging_bytes);
    if (!b.ok()) return b.status();
    staging.push_back(std::move(*b));
  }
  cudaStream_t copy;
  err = cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking);
  if (err != cudaSuccess) return CudaError(err, "creating the copy stream");
  return std::unique_ptr<Tier>(new StagedCudaTier(
      std::move(disk), std::move(staging), device, compute_stream, copy));
}

absl::StatusOr<std::unique_ptr<Tier>> CreateCudaTier(
    std::vector<TierBuffer*> sources, int device, cudaStream_t compute_stream) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return CudaError(err, absl::StrCat("cuda:", device));
  cudaStream_t copy;
  err = cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking);
  if (err != cudaSuccess) return CudaError(err, "creating the copy stream");
  return std::unique_ptr<Tier>(
      new CudaTier(std::move(sources), device, compute_stream, copy));
}

}  // namespace ringmoe::memory_ring

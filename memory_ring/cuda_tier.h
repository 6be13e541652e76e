// CudaTier: the CUDA backend's tier. Compute memory is GPU memory; the
// source is pinned host memory (regions the caller registered and filled,
// e.g. from the checkpoint); copies run as cudaMemcpyAsync on a dedicated
// copy stream, ordered after the compute that last read a slot by a CUDA
// event (the copy stream waits on it; the host never does).
#ifndef RINGMOE_MEMORY_RING_CUDA_TIER_H_
#define RINGMOE_MEMORY_RING_CUDA_TIER_H_

#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "memory_ring/tier.h"

namespace ringmoe::memory_ring {

// A pinned host buffer (cudaMallocHost) the CUDA tier copies from.
class PinnedBuffer : public TierBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<PinnedBuffer>> Create(size_t bytes);
  ~PinnedBuffer() override;
  uint8_t* data() override { return data_; }
  size_t size() const override { return size_; }

 private:
  PinnedBuffer(uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t* data_;
  size_t size_;
};

// Source i of a CopyPiece is sources[i] (which must outlive the tier).
// Compute runs on `compute_stream` (fences are recorded there).
absl::StatusOr<std::unique_ptr<Tier>> CreateCudaTier(
    std::vector<TierBuffer*> sources, int device, cudaStream_t compute_stream);

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_CUDA_TIER_H_

// Tier: the memory the model computes from (RAM for the CPU backend, GPU
// memory for CUDA) and the copy path that fills it from the tier below (the
// checkpoint on disk, or pinned host memory). The ring and the expert cache
// are written against this interface only, so the same code drives both.
#ifndef RINGMOE_MEMORY_RING_TIER_H_
#define RINGMOE_MEMORY_RING_TIER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringmoe::memory_ring {

// Bytes [offset, offset + size) of source `source` (a file of the disk
// tier, a pinned buffer of the CUDA tier), copied to dst_offset in a slot.
struct CopyPiece {
  int source = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t dst_offset = 0;
};

// Compute-tier memory owned by a tier.
class TierBuffer {
 public:
  virtual ~TierBuffer() = default;
  virtual uint8_t* data() = 0;
  virtual size_t size() const = 0;
};

class Tier {
 public:
  using Done = std::function<void(absl::Status)>;

  virtual ~Tier() = default;

  // The tier pair this path moves bytes between, e.g. "disk_to_host".
  virtual absl::string_view name() const = 0;

  virtual absl::StatusOr<std::unique_ptr<TierBuffer>> Allocate(
      size_t bytes) = 0;

  // An opaque marker after the compute issued so far (a CUDA event on the
  // compute stream); null where compute is synchronous (CPU).
  using Fence = std::shared_ptr<void>;
  virtual Fence RecordComputeFence() { return nullptr; }

  // Starts copying `pieces` into `dst` and returns at once. The copy does
  // not begin before `after` (the fence of the compute that last read `dst`)
  // is reached; it waits on the copy path, never on the caller's thread.
  // `done` runs exactly once, on a thread of the tier, with OK or the first
  // error (which names the source and offset).
  virtual void CopyAsync(std::vector<CopyPiece> pieces, uint8_t* dst,
                         Fence after, Done done) = 0;

  // Copies between two compute-tier addresses (ring slot -> expert cache),
  // complete when it returns.
  virtual absl::Status CopyWithin(uint8_t* dst, const uint8_t* src,
                                  size_t bytes) = 0;
};

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_TIER_H_

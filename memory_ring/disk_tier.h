// DiskTier: the CPU backend's tier. Compute memory is host RAM; the source is
// the checkpoint's files, read with pread on I/O threads — with O_DIRECT
// where the file system allows it, so the page cache neither hides the disk
// nor holds a second copy of streamed weights.
#ifndef RINGMOE_MEMORY_RING_DISK_TIER_H_
#define RINGMOE_MEMORY_RING_DISK_TIER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "memory_ring/tier.h"

namespace ringmoe::memory_ring {

struct DiskTierOptions {
  int io_threads = 2;
  bool direct_io = true;
};

// Source index i of a CopyPiece is paths[i].
absl::StatusOr<std::unique_ptr<Tier>> CreateDiskTier(
    std::vector<std::string> paths, DiskTierOptions options = {});

}  // namespace ringmoe::memory_ring

#endif  // RINGMOE_MEMORY_RING_DISK_TIER_H_

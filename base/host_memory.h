// Host memory for large buffers that the CPU reads from end to end: weights
// converted at load, memory-ring sections, the bandwidth probe's buffer.
// A buffer of at least kHugePageBytes is an anonymous mapping that starts
// on a kHugePageBytes boundary with transparent huge pages requested
// (MADV_HUGEPAGE, which is all a kernel in the common `madvise` THP mode
// needs): streaming reads over 4 KiB pages miss the TLB every 4 KiB, and on
// the machines measured they reached less of memory's bandwidth
// (docs/PERFORMANCE.md, "Huge pages"). Smaller buffers come from
// std::aligned_alloc. Either way a buffer is page aligned, so O_DIRECT
// reads may land in it.
#ifndef RINGMOE_BASE_HOST_MEMORY_H_
#define RINGMOE_BASE_HOST_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

namespace ringmoe {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;
inline constexpr size_t kHostPageBytes = 4096;

// Releases a HostMemory buffer the way AllocateHostMemory made it.
struct HostMemoryDeleter {
  size_t mapped_bytes = 0;  // 0: from std::aligned_alloc
  void operator()(uint8_t* data) const;
};

using HostMemory = std::unique_ptr<uint8_t[], HostMemoryDeleter>;

// max(bytes, 1) bytes of unspecified contents, addressable up to the next
// multiple of kHostPageBytes (whole pages for O_DIRECT), aligned to
// kHostPageBytes, and to kHugePageBytes with huge pages requested when
// bytes >= kHugePageBytes (a request the kernel may decline: the memory is
// usable either way). A huge page backs only whole 2 MiB: the rest stays
// in ordinary pages, so a buffer never holds more than a page past its
// bytes. nullptr when the system has no memory to give.
HostMemory AllocateHostMemory(size_t bytes);

// Whether `data` (a buffer from AllocateHostMemory) is a mapping with huge
// pages requested.
inline bool HugePagesRequested(const HostMemory& data) {
  return data != nullptr && data.get_deleter().mapped_bytes > 0;
}

// Whether the kernel backs memory that asks for them (MADV_HUGEPAGE) with
// transparent huge pages: its THP mode is `always` or `madvise`.
bool TransparentHugePagesAvailable();

// Of the mappings that overlap [p, p + bytes) (whole mappings counted), the
// bytes resident in memory and, of those, the bytes mapped as huge pages
// (anonymous, file or shmem), as /proc/self/smaps reports them; nullopt
// where it cannot be read.
struct ResidentPages {
  int64_t bytes = 0;
  int64_t huge_bytes = 0;
};
std::optional<ResidentPages> ResidentPagesOf(const void* p, size_t bytes);

}  // namespace ringmoe

#endif  // RINGMOE_BASE_HOST_MEMORY_H_

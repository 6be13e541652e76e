#include "base/host_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

namespace ringmoe {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// A kHugePageBytes-aligned mapping of RoundUp(bytes, kHostPageBytes) bytes
// with huge pages requested, or nullptr. Maps kHugePageBytes more than it
// keeps and unmaps the slack on either side of the aligned start.
HostMemory MapAligned(size_t bytes) {
  const size_t keep = RoundUp(bytes, kHostPageBytes);
  const size_t mapped = keep + kHugePageBytes;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const auto begin = reinterpret_cast<uintptr_t>(p);
  const uintptr_t start = RoundUp(begin, kHugePageBytes);
  if (start > begin) ::munmap(p, start - begin);
  const uintptr_t end = begin + mapped;
  if (end > start + keep) {
    ::munmap(reinterpret_cast<void*>(start + keep), end - (start + keep));
  }
#ifdef MADV_HUGEPAGE
  // A hint: kernels without transparent huge pages refuse it, and the
  // memory serves as it is.
  ::madvise(reinterpret_cast<void*>(start), keep, MADV_HUGEPAGE);
#endif
  return HostMemory(reinterpret_cast<uint8_t*>(start), HostMemoryDeleter{keep});
}

}  // namespace

void HostMemoryDeleter::operator()(uint8_t* data) const {
  if (data == nullptr) return;
  if (mapped_bytes > 0) {
    ::munmap(data, mapped_bytes);
  } else {
    std::free(data);
  }
}

HostMemory AllocateHostMemory(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  // Past this, rounding up to whole pages would wrap around.
  if (bytes > std::numeric_limits<size_t>::max() / 2) return nullptr;
  // Where the kernel maps no such range, no allocator has it either.
  if (bytes >= kHugePageBytes) return MapAligned(bytes);
  return HostMemory(static_cast<uint8_t*>(std::aligned_alloc(
                        kHostPageBytes, RoundUp(bytes, kHostPageBytes))),
                    HostMemoryDeleter{0});
}

bool TransparentHugePagesAvailable() {
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(enabled, modes);
  return modes.find("[always]") != std::string::npos ||
         modes.find("[madvise]") != std::string::npos;
}

std::optional<ResidentPages> ResidentPagesOf(const void* p, size_t bytes) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return std::nullopt;
  const auto first = reinterpret_cast<uintptr_t>(p);
  const uintptr_t last = first + bytes;
  ResidentPages pages;
  bool overlaps = false;
  for (std::string line; std::getline(smaps, line);) {
    // A mapping's first line is "begin-end perms ..."; the lines after it
    // are "Field:  value kB".
    std::istringstream in(line);
    std::string name;
    in >> name;
    if (name.empty()) continue;
    if (name.back() != ':') {
      uintptr_t begin = 0, end = 0;
      char dash = 0;
      std::istringstream range(name);
      overlaps = range >> std::hex >> begin >> dash >> end && dash == '-' &&
                 begin < last && first < end;
      continue;
    }
    if (!overlaps) continue;
    int64_t kib = 0;
    if (!(in >> kib)) continue;
    if (name == "Rss:") {
      pages.bytes += kib << 10;
    } else if (name == "AnonHugePages:" || name == "FilePmdMapped:" ||
               name == "ShmemPmdMapped:") {
      pages.huge_bytes += kib << 10;
    }
  }
  return pages;
}

}  // namespace ringmoe

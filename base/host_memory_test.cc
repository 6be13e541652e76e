#include "base/host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace ringmoe {
namespace {

// The VmFlags line of the mapping holding `p` in /proc/self/smaps ("" when
// none is found).
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-' &&
        line.find(':') > line.find(' ')) {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool KernelHasTransparentHugePages() {
  return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0;
}

TEST(HostMemoryTest, SmallBuffersArePageAlignedWithoutHugePages) {
  for (size_t bytes :
       {size_t{0}, size_t{1}, size_t{4097}, kHugePageBytes - 1}) {
    HostMemory m = AllocateHostMemory(bytes);
    ASSERT_NE(m, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m.get()) % kHostPageBytes, 0u);
    EXPECT_FALSE(HugePagesRequested(m)) << bytes;
    for (size_t i = 0; i < bytes; ++i) m[i] = static_cast<uint8_t>(i);
    for (size_t i = 0; i < bytes; i += 977) {
      ASSERT_EQ(m[i], static_cast<uint8_t>(i));
    }
  }
}

TEST(HostMemoryTest, LargeBuffersStartOnAHugePageWithHugePagesRequested) {
  for (size_t bytes : {kHugePageBytes, 5 * kHugePageBytes + 123}) {
    HostMemory m = AllocateHostMemory(bytes);
    ASSERT_NE(m, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m.get()) % kHugePageBytes, 0u);
    EXPECT_TRUE(HugePagesRequested(m));
    EXPECT_EQ(m.get_deleter().mapped_bytes,
              (bytes + kHostPageBytes - 1) / kHostPageBytes * kHostPageBytes);
    for (size_t i = 0; i < bytes; i += 61) m[i] = static_cast<uint8_t>(i);
    m[bytes - 1] = 7;
    for (size_t i = 0; i < bytes - 1; i += 61) {
      ASSERT_EQ(m[i], static_cast<uint8_t>(i));
    }
    EXPECT_EQ(m[bytes - 1], 7);
    if (KernelHasTransparentHugePages()) {
      // "hg": the mapping carries MADV_HUGEPAGE (proc(5)).
      EXPECT_NE(VmFlagsOf(m.get()).find(" hg"), std::string::npos)
          << VmFlagsOf(m.get());
    }
  }
}

// A large buffer's pages, once written, are huge where the kernel gives
// them; a small one's are not, nor those of a mapping without the request.
TEST(HostMemoryTest, ResidentPagesCountHugePages) {
  HostMemory large = AllocateHostMemory(4 * kHugePageBytes);
  ASSERT_NE(large, nullptr);
  for (size_t i = 0; i < 4 * kHugePageBytes; i += kHostPageBytes) large[i] = 1;
  const std::optional<ResidentPages> pages =
      ResidentPagesOf(large.get(), 4 * kHugePageBytes);
  ASSERT_TRUE(pages.has_value());
  EXPECT_GE(pages->bytes, static_cast<int64_t>(4 * kHugePageBytes));
  if (TransparentHugePagesAvailable()) {
    EXPECT_GE(pages->huge_bytes, static_cast<int64_t>(2 * kHugePageBytes));
  }
  EXPECT_LE(pages->huge_bytes, pages->bytes);

  const size_t small_bytes = 16 * kHostPageBytes;
  void* plain = ::mmap(nullptr, small_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(plain, MAP_FAILED);
#ifdef MADV_NOHUGEPAGE
  // Its own flags, so the kernel does not merge it into a neighbouring
  // mapping that may hold huge pages (THP mode `always`).
  ::madvise(plain, small_bytes, MADV_NOHUGEPAGE);
#endif
  for (size_t i = 0; i < small_bytes; i += kHostPageBytes) {
    static_cast<uint8_t*>(plain)[i] = 1;
  }
  const std::optional<ResidentPages> small = ResidentPagesOf(plain, 1);
  ASSERT_TRUE(small.has_value());
  EXPECT_GE(small->bytes, static_cast<int64_t>(small_bytes));
  EXPECT_EQ(small->huge_bytes, 0);
  ::munmap(plain, small_bytes);
}

TEST(HostMemoryTest, ImpossibleSizeIsNull) {
  EXPECT_EQ(AllocateHostMemory(size_t{1} << 62), nullptr);
  EXPECT_EQ(AllocateHostMemory(~size_t{0}), nullptr);
  EXPECT_EQ(AllocateHostMemory(~size_t{0} - kHugePageBytes), nullptr);
}

}  // namespace
}  // namespace ringmoe

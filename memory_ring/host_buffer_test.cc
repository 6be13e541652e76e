#include "memory_ring/host_buffer.h"

#include <cstdint>
#include <memory>

#include "base/host_memory.h"
#include "gtest/gtest.h"

namespace ringmoe::memory_ring {
namespace {

TEST(HostBufferTest, HoldsItsBytesPageAligned) {
  for (size_t bytes : {size_t{0}, size_t{100}, size_t{3} << 20}) {
    std::unique_ptr<TierBuffer> b = NewHostBuffer(bytes);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->size(), bytes);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % kHostPageBytes, 0u);
    for (size_t i = 0; i < bytes; ++i) b->data()[i] = static_cast<uint8_t>(i);
    for (size_t i = 0; i < bytes; i += 4099) {
      ASSERT_EQ(b->data()[i], static_cast<uint8_t>(i));
    }
  }
}

TEST(HostBufferTest, NullWhenTheHostHasNoMemory) {
  EXPECT_EQ(NewHostBuffer(size_t{1} << 62), nullptr);
}

}  // namespace
}  // namespace ringmoe::memory_ring

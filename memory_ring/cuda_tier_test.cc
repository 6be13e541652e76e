// The ring over PCIe: pinned host -> device copies on their own stream,
// checked by reading every section back. Skips without a CUDA device.
#include "memory_ring/cuda_tier.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cuda/device_info.h"
#include "memory_ring/disk_tier.h"
#include "memory_ring/section_ring.h"
#include "memory_ring/staged_tier.h"

namespace ringmoe::memory_ring {
namespace {

TEST(CudaTierTest, RingOverPcieDeliversEverySectionIntact) {
  if (cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  constexpr size_t kSourceBytes = 64 << 20;
  auto source = PinnedBuffer::Create(kSourceBytes);
  ASSERT_TRUE(source.ok()) << source.status();
  std::mt19937 rng(5);
  for (size_t i = 0; i < kSourceBytes; ++i)
    (*source)->data()[i] = static_cast<uint8_t>(rng());
  cudaStream_t compute;
  ASSERT_EQ(cudaStreamCreate(&compute), cudaSuccess);
  auto tier = CreateCudaTier({source->get()}, 0, compute);
  ASSERT_TRUE(tier.ok()) << tier.status();
  RingStats stats;
  for (int slots : {2, 3, 4}) {
    for (int depth = 0; depth < slots; ++depth) {
      auto ring =
          SectionRing::Create(tier->get(), 8 << 20, {slots, depth}, &stats);
      ASSERT_TRUE(ring.ok()) << ring.status();
      std::vector<uint8_t> back(8 << 20);
      for (int i = 0; i < 12; ++i) {
        const uint64_t size = (1 << 20) + i * 4099;
        const uint64_t offset = (i * 5000017ull) % (kSourceBytes - size);
        const auto ticket = (*ring)->Enqueue({{0, offset, size, 17}});
        auto slot = (*ring)->Acquire(ticket);
        ASSERT_TRUE(slot.ok()) << slot.status();
        ASSERT_EQ(cudaMemcpyAsync(back.data(), *slot + 17, size,
                                  cudaMemcpyDeviceToHost, compute),
                  cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
        ASSERT_EQ(std::memcmp(back.data(), (*source)->data() + offset, size), 0)
            << "section " << i << " K=" << slots << " d=" << depth;
        (*ring)->Release(ticket);
      }
    }
  }
  EXPECT_GT(stats.bytes_host_to_device, 0u);
  tier->reset();
  cudaStreamDestroy(compute);
}

TEST(CudaTierTest, StagedFromDiskThroughPinnedBuffersDeliversEverySection) {
  if (cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR")) + "/weights.bin";
  std::vector<uint8_t> bytes(48 << 20);
  std::mt19937 rng(9);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  auto disk = CreateDiskTier({path});
  ASSERT_TRUE(disk.ok()) << disk.status();
  cudaStream_t compute;
  ASSERT_EQ(cudaStreamCreate(&compute), cudaSuccess);
  // Disk -> pinned staging -> device: the staging buffers are the CUDA
  // tier's sources, the file the staged tier's source 0.
  std::vector<std::unique_ptr<PinnedBuffer>> staging;
  for (int i = 0; i < 2; ++i) {
    auto buffer = PinnedBuffer::Create(4 << 20);
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    staging.push_back(std::move(*buffer));
  }
  auto upper = CreateCudaTier({staging[0].get(), staging[1].get()}, 0, compute);
  ASSERT_TRUE(upper.ok()) << upper.status();
  std::unique_ptr<Tier> tier =
      CreateStagedTier(std::move(*upper), /*host_sources=*/0,
                       {staging[0].get(), staging[1].get()}, std::move(*disk));
  RingStats stats;
  auto ring = SectionRing::Create(tier.get(), 4 << 20, {3, 2}, &stats);
  ASSERT_TRUE(ring.ok()) << ring.status();
  std::vector<uint8_t> back(4 << 20);
  for (int i = 0; i < 16; ++i) {
    const uint64_t size = (1 << 20) + i * 7919,
                   offset = (i * 2750011ull) % (bytes.size() - size);
    const auto ticket = (*ring)->Enqueue({{0, offset, size, 3}});
    auto slot = (*ring)->Acquire(ticket);
    ASSERT_TRUE(slot.ok()) << slot.status();
    ASSERT_EQ(cudaMemcpyAsync(back.data(), *slot + 3, size,
                              cudaMemcpyDeviceToHost, compute),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(compute), cudaSuccess);
    ASSERT_EQ(std::memcmp(back.data(), bytes.data() + offset, size), 0)
        << "section " << i;
    (*ring)->Release(ticket);
  }
  ring->reset();
  tier.reset();
  cudaStreamDestroy(compute);
}

}  // namespace
}  // namespace ringmoe::memory_ring

#include "memory_ring/disk_tier.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <future>
#include <string>

#include "gtest/gtest.h"

namespace ringmoe::memory_ring {
namespace {

std::string WriteSource(const std::string& name, size_t n) {
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
  std::ofstream out(path, std::ios::binary);
  for (size_t i = 0; i < n; ++i)
    out.put(static_cast<char>((i * 13 + (i >> 10)) & 0xff));
  return path;
}

uint8_t Expected(uint64_t i) {
  return static_cast<uint8_t>((i * 13 + (i >> 10)) & 0xff);
}

absl::Status Copy(Tier& tier, std::vector<CopyPiece> pieces, uint8_t* dst) {
  // std::promise rather than absl::Notification, so ThreadSanitizer sees
  // the hand-off (Debian's Abseil is not instrumented).
  std::promise<absl::Status> done;
  tier.CopyAsync(std::move(pieces), dst, nullptr,
                 [&](absl::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

class DiskTierTest : public ::testing::TestWithParam<bool> {};

TEST_P(DiskTierTest, ReadsUnalignedPiecesExactly) {
  const std::string path =
      WriteSource(GetParam() ? "direct.bin" : "buffered.bin", 20 << 20);
  auto tier = CreateDiskTier({path}, {2, GetParam()});
  ASSERT_TRUE(tier.ok()) << tier.status();
  auto buffer = (*tier)->Allocate(12 << 20);
  ASSERT_TRUE(buffer.ok());
  uint8_t* dst = (*buffer)->data();
  // Ragged offsets and sizes, one piece over the 8 MiB chunk size.
  std::vector<CopyPiece> pieces = {{0, 3, 1001, 0},
                                   {0, 4097, 9 << 20, 2000},
                                   {0, (19 << 20) + 5, 777, (10 << 20) + 1}};
  ASSERT_TRUE(Copy(**tier, pieces, dst).ok());
  for (const auto& p : pieces) {
    for (uint64_t i = 0; i < p.size; i += 997) {
      ASSERT_EQ(dst[p.dst_offset + i], Expected(p.offset + i)) << p.offset + i;
    }
    ASSERT_EQ(dst[p.dst_offset + p.size - 1], Expected(p.offset + p.size - 1));
  }
}

TEST_P(DiskTierTest, TruncatedFileFailsThenReadsAgain) {
  const std::string path =
      WriteSource(GetParam() ? "trunc_d.bin" : "trunc_b.bin", 1 << 20);
  auto tier = CreateDiskTier({path}, {1, GetParam()});
  ASSERT_TRUE(tier.ok());
  auto buffer = (*tier)->Allocate(1 << 20);
  ASSERT_TRUE(buffer.ok());
  ASSERT_EQ(truncate(path.c_str(), 300000), 0);
  absl::Status status = Copy(**tier, {{0, 299000, 5000, 0}}, (*buffer)->data());
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find(path), std::string::npos) << status;
  EXPECT_NE(status.message().find("short read"), std::string::npos) << status;
  WriteSource(GetParam() ? "trunc_d.bin" : "trunc_b.bin", 1 << 20);  // restored
  ASSERT_TRUE(Copy(**tier, {{0, 299000, 5000, 0}}, (*buffer)->data()).ok());
  EXPECT_EQ((*buffer)->data()[4999], Expected(299000 + 4999));
}

INSTANTIATE_TEST_SUITE_P(DirectAndBuffered, DiskTierTest, ::testing::Bool());

TEST(DiskTierTest, MissingFileIsNamed) {
  auto tier = CreateDiskTier({"/nonexistent/shard.safetensors"});
  ASSERT_FALSE(tier.ok());
  EXPECT_NE(tier.status().message().find("/nonexistent/shard.safetensors"),
            std::string::npos);
}

}  // namespace
}  // namespace ringmoe::memory_ring

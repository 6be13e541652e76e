// The NCCL collectives on one GPU (world size 1, bootstrapped by a
// SingleRankCommunicator): the data path through NCCL and CUDA, checked
// byte for byte. Skips without a CUDA device.
#include "engine/parallel/nccl_communicator.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/parallel/single_rank_communicator.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device_info.h"

namespace ringmoe::parallel {
namespace {

// Device memory holding `bytes` (or `size` bytes of zeros), freed with it.
class DeviceBytes {
 public:
  explicit DeviceBytes(const std::vector<uint8_t>& bytes)
      : DeviceBytes(bytes.size()) {
    if (!bytes.empty()) {
      EXPECT_EQ(
          cudaMemcpy(data_, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
          cudaSuccess);
    }
  }
  explicit DeviceBytes(size_t size) : size_(size) {
    if (size > 0) {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), size),
                cudaSuccess);
      EXPECT_EQ(cudaMemset(data_, 0, size), cudaSuccess);
    }
  }
  ~DeviceBytes() { cudaFree(data_); }

  absl::Span<uint8_t> span() { return absl::MakeSpan(data_, size_); }
  std::vector<uint8_t> Read() const {
    std::vector<uint8_t> bytes(size_);
    if (size_ > 0) {
      EXPECT_EQ(cudaMemcpy(bytes.data(), data_, size_, cudaMemcpyDeviceToHost),
                cudaSuccess);
    }
    return bytes;
  }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

std::vector<uint8_t> Pattern(size_t size, int seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<uint8_t>(i * 131 + seed * 17 + (i >> 9));
  }
  return bytes;
}

class NcclCommunicatorTest : public testing::Test {
 protected:
  void SetUp() override {
    if (cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
    auto comm = NcclCommunicator::Create(bootstrap_, 0, absl::Seconds(30));
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = std::move(*comm);
  }

  SingleRankCommunicator bootstrap_{absl::Seconds(30)};
  std::unique_ptr<NcclCommunicator> comm_;
};

TEST_F(NcclCommunicatorTest, OneRankOnDeviceZero) {
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
  EXPECT_EQ(comm_->device(), 0);
  EXPECT_NE(comm_->stream(), nullptr);
}

TEST_F(NcclCommunicatorTest, AllToAllVCopiesTheBlockToItself) {
  for (uint64_t bytes : {0, 1, 5000, 3 << 20}) {
    const std::vector<uint8_t> sent = Pattern(bytes, 1);
    DeviceBytes send(sent);
    DeviceBytes recv(bytes);
    const std::vector<uint64_t> counts = {bytes};
    ASSERT_TRUE(
        comm_->AllToAllV(send.span(), counts, recv.span(), counts).ok());
    EXPECT_EQ(recv.Read(), sent) << bytes << " bytes";
  }
}

TEST_F(NcclCommunicatorTest, AllToAllBroadcastAllGatherAndBarrier) {
  const std::vector<uint8_t> sent = Pattern(4096, 2);
  DeviceBytes send(sent);
  DeviceBytes recv(sent.size());
  ASSERT_TRUE(comm_->AllToAll(send.span(), recv.span()).ok());
  EXPECT_EQ(recv.Read(), sent);

  DeviceBytes gathered(sent.size());
  ASSERT_TRUE(comm_->AllGather(send.span(), gathered.span()).ok());
  EXPECT_EQ(gathered.Read(), sent);

  DeviceBytes buffer(sent);
  ASSERT_TRUE(comm_->Broadcast(0, buffer.span()).ok());
  EXPECT_EQ(buffer.Read(), sent);

  for (int i = 0; i < 20; ++i) ASSERT_TRUE(comm_->Barrier().ok());
}

TEST_F(NcclCommunicatorTest, RefusesBadArgumentsThenRefusesEverything) {
  DeviceBytes buffer(16);
  const std::vector<uint64_t> counts = {8};
  EXPECT_EQ(
      comm_->AllToAllV(buffer.span(), counts, buffer.span(), counts).code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm_->Barrier().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(NcclCommunicatorTest, RefusesRootsOutsideTheJob) {
  DeviceBytes buffer(16);
  EXPECT_EQ(comm_->Broadcast(1, buffer.span()).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringmoe::parallel

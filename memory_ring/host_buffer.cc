#include "memory_ring/host_buffer.h"

#include <utility>

#include "base/host_memory.h"

namespace ringmoe::memory_ring {
namespace {

class HostBuffer : public TierBuffer {
 public:
  HostBuffer(HostMemory memory, size_t bytes)
      : memory_(std::move(memory)), size_(bytes) {}
  uint8_t* data() override { return memory_.get(); }
  size_t size() const override { return size_; }

 private:
  HostMemory memory_;
  size_t size_;
};

}  // namespace

std::unique_ptr<TierBuffer> NewHostBuffer(size_t bytes) {
  HostMemory memory = AllocateHostMemory(bytes);
  if (memory == nullptr) return nullptr;
  return std::make_unique<HostBuffer>(std::move(memory), bytes);
}

}  // namespace ringmoe::memory_ring

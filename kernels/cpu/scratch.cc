#include "kernels/cpu/scratch.h"

#include <cstdlib>
#include <new>

namespace ringmoe::kernels {
namespace {

constexpr std::size_t kAlignment = 64;

class ThreadBuffers {
 public:
  ThreadBuffers() = default;
  ThreadBuffers(const ThreadBuffers&) = delete;
  ThreadBuffers& operator=(const ThreadBuffers&) = delete;
  ~ThreadBuffers() {
    for (Buffer& b : buffers_) std::free(b.data);
  }

  void* Get(ScratchSlot slot, int64_t bytes) {
    Buffer& b = buffers_[static_cast<int>(slot)];
    if (bytes > b.bytes) {
      // Whole pages, so small growth steps do not reallocate every call.
      const int64_t size = (bytes + 4095) / 4096 * 4096;
      void* data = std::aligned_alloc(kAlignment, static_cast<size_t>(size));
      if (data == nullptr) throw std::bad_alloc();
      std::free(b.data);
      b = {data, size};
    }
    return b.data;
  }

 private:
  struct Buffer {
    void* data = nullptr;
    int64_t bytes = 0;
  };
  Buffer buffers_[static_cast<int>(ScratchSlot::kCount)];
};

}  // namespace

void* ThreadScratch(ScratchSlot slot, int64_t bytes) {
  thread_local ThreadBuffers buffers;
  return buffers.Get(slot, bytes);
}

}  // namespace ringmoe::kernels

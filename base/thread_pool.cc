#include "base/thread_pool.h"

#include <chrono>

namespace ringmoe {
namespace {

// How long an idle worker polls before it sleeps on the condition variable.
constexpr auto kSpinTime = std::chrono::microseconds(300);
// How long the calling thread polls for workers still running before it
// starts yielding its core between polls.
constexpr auto kFinishSpinTime = std::chrono::microseconds(30);

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::thread::hardware_concurrency());
  }
  for (int i = 1; i < num_threads; ++i) {
    workers_.emplace_back([this] { WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::RunTasks() {
  for (int64_t i = next_.fetch_add(1, std::memory_order_relaxed); i < n_;
       i = next_.fetch_add(1, std::memory_order_relaxed)) {
    (*fn_)(i);
  }
}

bool ThreadPool::Join(uint64_t generation) {
  uint64_t admission = admission_.load(std::memory_order_acquire);
  while (true) {
    if (admission >> kGenerationShift != generation ||
        (admission & kClosed) != 0) {
      return false;
    }
    // Acquire: fn_, n_ and next_ were written before the admission opened.
    if (admission_.compare_exchange_weak(admission, admission + 1,
                                         std::memory_order_acquire)) {
      return true;
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, absl::FunctionRef<void(int64_t)> fn) {
  if (workers_.empty() || n <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  fn_ = &fn;
  n_ = n;
  next_.store(0, std::memory_order_relaxed);
  finished_workers_.store(0, std::memory_order_relaxed);
  const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
  admission_.store(generation << kGenerationShift, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.store(generation, std::memory_order_release);
  }
  wake_.notify_all();
  RunTasks();
  // No index is left: workers that have not joined yet never will, and
  // those that joined may still be inside fn. Wait for those, yielding the
  // core after a short spin. A worker that is late has usually lost its
  // core to another process; spinning on would hold the core it could
  // otherwise run on, and sleeping costs a wake-up per loop.
  const int joined = static_cast<int>(
      admission_.fetch_or(kClosed, std::memory_order_acq_rel) & kJoinedMask);
  const auto spin_until = std::chrono::steady_clock::now() + kFinishSpinTime;
  int polls = 0;
  while (finished_workers_.load(std::memory_order_acquire) != joined) {
    if (polls < 64 || std::chrono::steady_clock::now() < spin_until) {
      ++polls;
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::WorkerLoop() {
  uint64_t seen = 0;
  while (true) {
    const auto spin_until = std::chrono::steady_clock::now() + kSpinTime;
    int polls = 0;
    while (generation_.load(std::memory_order_acquire) == seen) {
      CpuRelax();
      if (++polls % 256 == 0 && std::chrono::steady_clock::now() > spin_until) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] {
          return stop_ || generation_.load(std::memory_order_acquire) != seen;
        });
        if (stop_) return;
      }
    }
    seen = generation_.load(std::memory_order_acquire);
    if (Join(seen)) {
      RunTasks();
      finished_workers_.fetch_add(1, std::memory_order_release);
    }
  }
}

void ParallelFor(ThreadPool* pool, int64_t n,
                 absl::FunctionRef<void(int64_t)> fn) {
  if (pool == nullptr) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool->ParallelFor(n, fn);
}

}  // namespace ringmoe

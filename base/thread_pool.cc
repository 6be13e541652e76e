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

void ThreadPool::ParallelFor(int64_t n, absl::FunctionRef<void(int64_t)> fn) {
  if (workers_.empty() || n <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  fn_ = &fn;
  n_ = n;
  next_.store(0, std::memory_order_relaxed);
  busy_workers_.store(static_cast<int>(workers_.size()),
                      std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  RunTasks();
  // Workers may still be inside fn (or about to read fn_): wait for all,
  // yielding the core after a short spin. A worker that is late has
  // usually lost its core to another process; spinning on would hold the
  // core it could otherwise run on, and sleeping costs a wake-up per loop.
  const auto spin_until = std::chrono::steady_clock::now() + kFinishSpinTime;
  int polls = 0;
  while (busy_workers_.load(std::memory_order_acquire) != 0) {
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
    RunTasks();
    busy_workers_.fetch_sub(1, std::memory_order_release);
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

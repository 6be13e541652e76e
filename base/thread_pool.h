// A persistent pool of worker threads for data-parallel loops. Threads are
// created once; each ParallelFor hands them a new index range, so a forward
// pass can issue hundreds of parallel regions per token without creating a
// thread. Idle workers spin briefly before sleeping, because the gaps
// between a decode step's parallel regions are usually microseconds.
#ifndef RINGMOE_BASE_THREAD_POOL_H_
#define RINGMOE_BASE_THREAD_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace ringmoe {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread, so 1 starts no workers and
  // runs every loop inline; 0 means one per hardware thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(i) once for every i in [0, n), on the workers and the calling
  // thread, and returns when all calls have returned. Indices are claimed
  // one at a time, so uneven tasks balance themselves. A worker that has
  // not joined the loop by the time the calling thread finds no index left
  // is shut out of it, so a worker that lost its core to another process
  // delays only loops it is inside. Not reentrant: fn must not call
  // ParallelFor on the same pool.
  void ParallelFor(int64_t n, absl::FunctionRef<void(int64_t)> fn);

 private:
  void WorkerLoop();
  void RunTasks();
  // Whether a worker joined loop `generation`: false once the calling
  // thread has closed it (or started a later one).
  bool Join(uint64_t generation);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by mutex_
  // Bumped (under mutex_) to publish a new loop to the workers.
  std::atomic<uint64_t> generation_{0};
  // The current loop; written before generation_ is bumped.
  const absl::FunctionRef<void(int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  // The loop workers may join: its generation << kGenerationShift, kClosed
  // once the calling thread has run out of indices, and in the low bits
  // the number of workers that joined (Join).
  static constexpr int kGenerationShift = 16;
  static constexpr uint64_t kClosed = uint64_t{1} << 15;
  static constexpr uint64_t kJoinedMask = kClosed - 1;
  std::atomic<uint64_t> admission_{0};
  // Workers that joined the current loop and have left it.
  std::atomic<int> finished_workers_{0};
};

// Calls fn(i) for i in [0, n) on `pool`, or inline when `pool` is null.
void ParallelFor(ThreadPool* pool, int64_t n,
                 absl::FunctionRef<void(int64_t)> fn);

}  // namespace ringmoe

#endif  // RINGMOE_BASE_THREAD_POOL_H_

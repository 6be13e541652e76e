#include "base/thread_pool.h"

#include <sched.h>

#include <atomic>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe {
namespace {

TEST(ThreadPoolTest, RunsEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 3, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t i) { hits[i].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << i;
    }
  }
}

TEST(ThreadPoolTest, ManyLoopsReuseTheWorkers) {
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  for (int loop = 0; loop < 2000; ++loop) {
    pool.ParallelFor(7, [&](int64_t i) { sum.fetch_add(i); });
  }
  EXPECT_EQ(sum.load(), 2000 * 21);
}

// Loops whose calls take from nothing to tens of microseconds, on `threads`
// threads: each index runs once, and every call has returned when
// ParallelFor does.
void ExpectNoCallOutlivesItsLoop(int threads) {
  ThreadPool pool(threads);
  std::atomic<int> inside{0};
  for (int loop = 0; loop < 3000; ++loop) {
    const int64_t n = 1 + loop % 9;
    std::vector<int> hits(n, 0);  // each index written by one thread
    pool.ParallelFor(n, [&](int64_t i) {
      inside.fetch_add(1);
      for (int64_t spin = 0; spin < (loop % 4) * 200 * (i + 1); ++spin) {
        std::atomic_signal_fence(std::memory_order_seq_cst);
      }
      ++hits[i];
      inside.fetch_sub(1);
    });
    ASSERT_EQ(inside.load(), 0) << threads << " threads, loop " << loop;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(hits[i], 1)
          << threads << " threads, loop " << loop << ": " << i;
    }
  }
}

// Workers that join in time, and workers that join late or not at all:
// with every thread of the pool on one CPU (where the test may set that), a
// worker runs only when the calling thread yields or is preempted, so most
// loops end before it joins and some while it is inside fn.
TEST(ThreadPoolTest, NoCallOutlivesItsLoop) {
  for (int threads : {2, 3}) ExpectNoCallOutlivesItsLoop(threads);
  cpu_set_t before, one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  if (sched_getaffinity(0, sizeof(before), &before) != 0 ||
      sched_setaffinity(0, sizeof(one), &one) != 0) {
    GTEST_SKIP() << "cannot pin the test to one CPU";
  }
  // The pools' workers inherit the affinity.
  for (int threads : {2, 3}) ExpectNoCallOutlivesItsLoop(threads);
  sched_setaffinity(0, sizeof(before), &before);
}

TEST(ThreadPoolTest, NullPoolRunsInline) {
  int64_t sum = 0;
  ParallelFor(nullptr, 4, [&](int64_t i) { sum += i; });
  EXPECT_EQ(sum, 6);
}

}  // namespace
}  // namespace ringmoe

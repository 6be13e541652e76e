#include "base/large_stack.h"

#include <pthread.h>

#include "gtest/gtest.h"

namespace ringmoe {
namespace {

// Recursion that needs about `depth` KiB of stack.
int Deep(int depth) {
  volatile char frame[1024];
  frame[0] = static_cast<char>(depth);
  return depth == 0 ? 0 : Deep(depth - 1) + frame[0];
}

// Runs RunWithStack(8 MiB, Deep(2000)) from a thread of 128 KiB: the
// recursion would overflow the caller's stack.
void* FromASmallStack(void* result) {
  const absl::Status status =
      RunWithStack(8 << 20, [&] { *static_cast<int*>(result) = Deep(2000); });
  if (!status.ok()) *static_cast<int*>(result) = -1;
  return nullptr;
}

TEST(LargeStackTest, RecursesDeeperThanTheCallersStackAllows) {
  int result = -2;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 128 << 10), 0);
  pthread_t thread;
  ASSERT_EQ(pthread_create(&thread, &attr, &FromASmallStack, &result), 0);
  pthread_attr_destroy(&attr);
  pthread_join(thread, nullptr);
  EXPECT_EQ(result, Deep(2000));  // the main thread's stack holds it
}

TEST(LargeStackTest, RefusesAStackThatCannotBeHad) {
  bool ran = false;
  EXPECT_EQ(RunWithStack(1, [&] { ran = true; }).code(),
            absl::StatusCode::kUnavailable);  // below PTHREAD_STACK_MIN
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace ringmoe

// Running bounded but deep recursion on a stack known to hold it, whatever
// thread asks: civetweb's worker threads, for one, have 100 KB stacks.
#ifndef RINGMOE_BASE_LARGE_STACK_H_
#define RINGMOE_BASE_LARGE_STACK_H_

#include <cstddef>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace ringmoe {

// Runs `fn` on a new thread with a stack of `bytes` and returns when it has
// returned. UNAVAILABLE (and `fn` not run) when no thread can be started.
absl::Status RunWithStack(size_t bytes, absl::FunctionRef<void()> fn);

}  // namespace ringmoe

#endif  // RINGMOE_BASE_LARGE_STACK_H_

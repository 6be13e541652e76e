#include "base/large_stack.h"

#include <pthread.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace ringmoe {
namespace {

void* Call(void* fn) {
  (*static_cast<absl::FunctionRef<void()>*>(fn))();
  return nullptr;
}

}  // namespace

absl::Status RunWithStack(size_t bytes, absl::FunctionRef<void()> fn) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  int error = pthread_attr_setstacksize(&attr, bytes);
  pthread_t thread;
  if (error == 0) error = pthread_create(&thread, &attr, &Call, &fn);
  pthread_attr_destroy(&attr);
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot start a thread with a ", bytes,
                     "-byte stack: ", std::strerror(error)));
  }
  pthread_join(thread, nullptr);
  return absl::OkStatus();
}

}  // namespace ringmoe

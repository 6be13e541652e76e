// Helpers for tests that build safetensors files byte by byte.
#ifndef RINGMOE_ENGINE_CHECKPOINT_TEST_UTIL_H_
#define RINGMOE_ENGINE_CHECKPOINT_TEST_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace ringmoe::checkpoint::testing {

// A safetensors file image: the little-endian length of `header`, `header`,
// then `data_size` bytes counting up from 0.
std::string RawSafetensors(absl::string_view header, uint64_t data_size);

// A fresh path under $TEST_TMPDIR (a directory is not created).
std::string TempPath(absl::string_view name);

// Writes `bytes` to `path`, creating parent directories; fails the test on
// error.
void WriteFileOrDie(const std::string& path, absl::string_view bytes);

}  // namespace ringmoe::checkpoint::testing

#endif  // RINGMOE_ENGINE_CHECKPOINT_TEST_UTIL_H_

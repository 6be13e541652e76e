// Reading whole files, and errors from errno.
#ifndef RINGMOE_BASE_FILE_H_
#define RINGMOE_BASE_FILE_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringmoe {

// A status with the code of errno value `err` and the message
// "<what>: <strerror(err)>".
absl::Status ErrnoError(int err, absl::string_view what);

// The contents of the file at `path`. Errors name the path: "<path>: cannot
// open: <strerror>" and "<path>: read failed: <strerror>" carry the code of
// errno (NOT_FOUND for a missing file); a file longer than `max_bytes` is
// INVALID_ARGUMENT "<path>: larger than <max_bytes> bytes".
absl::StatusOr<std::string> ReadFileToString(
    const std::string& path,
    uint64_t max_bytes = std::numeric_limits<uint64_t>::max());

}  // namespace ringmoe

#endif  // RINGMOE_BASE_FILE_H_

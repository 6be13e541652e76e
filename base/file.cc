#include "base/file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace ringmoe {

absl::Status ErrnoError(int err, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(what, ": ", std::strerror(err)));
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, absl::StrCat(path, ": cannot open"));
  std::string text;
  char buffer[1 << 16];
  absl::Status status;
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      status = ErrnoError(errno, absl::StrCat(path, ": read failed"));
      break;
    }
    if (n == 0) break;
    if (text.size() + n > max_bytes) {
      status = absl::InvalidArgumentError(
          absl::StrCat(path, ": larger than ", max_bytes, " bytes"));
      break;
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!status.ok()) return status;
  return text;
}

}  // namespace ringmoe

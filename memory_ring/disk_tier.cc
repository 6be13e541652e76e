#include "memory_ring/disk_tier.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "memory_ring/host_buffer.h"

namespace ringmoe::memory_ring {
namespace {

constexpr uint64_t kAlign = 4096;
constexpr uint64_t kChunk = 8 << 20;  // bytes per read request

// An open file's descriptors, closed when the last reader lets go (another
// I/O thread may still be reading through them when one drops them).
struct Descriptors {
  int fd = -1;
  int direct_fd = -1;  // O_DIRECT; -1 where not wanted or not supported
  ~Descriptors() {
    if (fd >= 0) close(fd);
    if (direct_fd >= 0) close(direct_fd);
  }
};

// One source file. A read error drops the descriptors, so the next read
// reopens the path: a file restored (or replaced) after a fault reads again.
class SourceFile {
 public:
  SourceFile(std::string path, bool direct)
      : path_(std::move(path)), want_direct_(direct) {}

  const std::string& path() const { return path_; }

  // Reads [offset, offset + size) into dst; `bounce` is kChunk + 2 * kAlign
  // aligned bytes for O_DIRECT.
  absl::Status Read(uint64_t offset, uint64_t size, uint8_t* dst,
                    uint8_t* bounce) {
    std::shared_ptr<const Descriptors> fds;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fds_ == nullptr) {
        auto opened = std::make_shared<Descriptors>();
        opened->fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
        if (opened->fd < 0) {
          return absl::UnavailableError(
              absl::StrCat("cannot open ", path_, ": ", std::strerror(errno)));
        }
        if (want_direct_)
          opened->direct_fd =
              open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
        fds_ = std::move(opened);
      }
      fds = fds_;
    }
    absl::Status status = fds->direct_fd >= 0
                              ? ReadDirect(*fds, offset, size, dst, bounce)
                              : ReadBuffered(fds->fd, offset, size, dst);
    if (!status.ok()) Drop(fds);
    return status;
  }

 private:
  // Forgets `fds` (if still current) so the next read reopens the file.
  void Drop(const std::shared_ptr<const Descriptors>& fds) {
    std::lock_guard<std::mutex> lock(mu_);
    if (fds_ == fds) fds_.reset();
  }

  absl::Status ShortRead(uint64_t offset, uint64_t want, uint64_t got,
                         int err) const {
    if (err != 0) {
      return absl::DataLossError(absl::StrCat("read error in ", path_,
                                              " at offset ", offset, ": ",
                                              std::strerror(err)));
    }
    return absl::DataLossError(
        absl::StrCat("short read of ", path_, " at offset ", offset, ": got ",
                     got, " of ", want, " bytes (file truncated?)"));
  }

  absl::Status ReadBuffered(int fd, uint64_t offset, uint64_t size,
                            uint8_t* dst) const {
    uint64_t done = 0;
    while (done < size) {
      const ssize_t n =
          pread(fd, dst + done, std::min(size - done, kChunk), offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return ShortRead(offset, size, done, n < 0 ? errno : 0);
      done += n;
    }
    return absl::OkStatus();
  }

  // O_DIRECT needs aligned offsets, sizes and buffers: read the aligned
  // cover of each chunk into the bounce buffer and copy out the middle.
  absl::Status ReadDirect(const Descriptors& fds, uint64_t offset,
                          uint64_t size, uint8_t* dst, uint8_t* bounce) {
    uint64_t done = 0;
    while (done < size) {
      const uint64_t want = std::min(size - done, kChunk);
      const uint64_t begin = (offset + done) / kAlign * kAlign;
      const uint64_t end =
          (offset + done + want + kAlign - 1) / kAlign * kAlign;
      uint64_t got = 0;
      while (got < end - begin) {
        const ssize_t n =
            pread(fds.direct_fd, bounce + got, end - begin - got, begin + got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EINVAL) {
          // The file system refused O_DIRECT after all: read buffered from
          // now on (the next open skips O_DIRECT).
          DisableDirect();
          return ReadBuffered(fds.fd, offset + done, size - done, dst + done);
        }
        if (n <= 0) break;
        got += n;
      }
      const uint64_t skip = offset + done - begin;
      if (got < skip + want) {
        return ShortRead(offset, size, done + (got > skip ? got - skip : 0), 0);
      }
      std::memcpy(dst + done, bounce + skip, want);
      done += want;
    }
    return absl::OkStatus();
  }

  void DisableDirect() {
    std::lock_guard<std::mutex> lock(mu_);
    want_direct_ = false;
    fds_.reset();
  }

  const std::string path_;
  // std::mutex rather than absl::Mutex: Debian's Abseil is not built for
  // ThreadSanitizer, which then cannot see absl::Mutex's ordering.
  mutable std::mutex mu_;
  bool want_direct_;  // guarded by mu_
  std::shared_ptr<const Descriptors>
      fds_;  // guarded by mu_; null: open on next read
};

class DiskTier : public Tier {
 public:
  DiskTier(std::vector<std::string> paths, DiskTierOptions options) {
    for (std::string& p : paths) {
      files_.push_back(
          std::make_unique<SourceFile>(std::move(p), options.direct_io));
    }
    for (int i = 0; i < std::max(1, options.io_threads); ++i) {
      threads_.emplace_back([this] { Work(); });
    }
  }

  ~DiskTier() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  absl::string_view name() const override { return "disk_to_host"; }

  absl::StatusOr<std::unique_ptr<TierBuffer>> Allocate(size_t bytes) override {
    std::unique_ptr<TierBuffer> buffer = NewHostBuffer(bytes);
    if (buffer == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
    }
    return buffer;
  }

  void CopyAsync(std::vector<CopyPiece> pieces, uint8_t* dst, Fence after,
                 Done done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back({std::move(pieces), dst, std::move(done)});
    }
    work_.notify_one();
  }

  absl::Status CopyWithin(uint8_t* dst, const uint8_t* src,
                          size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }

 private:
  struct Job {
    std::vector<CopyPiece> pieces;
    uint8_t* dst;
    Done done;
  };

  void Work() {
    const std::unique_ptr<TierBuffer> bounce =
        NewHostBuffer(kChunk + 2 * kAlign);
    while (true) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      absl::Status status;
      if (bounce == nullptr) {
        status = absl::ResourceExhaustedError(
            absl::StrCat("cannot allocate the ", kChunk + 2 * kAlign,
                         "-byte read buffer of a disk_to_host I/O thread"));
      }
      for (const CopyPiece& p : job.pieces) {
        if (!status.ok()) break;
        if (p.source < 0 || p.source >= static_cast<int>(files_.size())) {
          status = absl::InvalidArgumentError(
              absl::StrCat("no source file ", p.source));
          break;
        }
        status = files_[p.source]->Read(p.offset, p.size,
                                        job.dst + p.dst_offset, bounce->data());
        if (!status.ok()) break;
      }
      job.done(std::move(status));
    }
  }

  std::vector<std::unique_ptr<SourceFile>> files_;
  std::mutex mu_;
  std::condition_variable work_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tier>> CreateDiskTier(
    std::vector<std::string> paths, DiskTierOptions options) {
  for (const std::string& p : paths) {
    if (access(p.c_str(), R_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat("cannot read ", p, ": ", std::strerror(errno)));
    }
  }
  return std::unique_ptr<Tier>(new DiskTier(std::move(paths), options));
}

}  // namespace ringmoe::memory_ring

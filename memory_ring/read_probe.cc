#include "memory_ring/read_probe.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

namespace ringmoe::memory_ring {

absl::StatusOr<double> MeasureReadBandwidth(Tier* tier, int source,
                                            uint64_t offset, uint64_t bytes,
                                            uint64_t chunk, int in_flight) {
  std::vector<std::unique_ptr<TierBuffer>> buffers;
  for (int i = 0; i < in_flight; ++i) {
    absl::StatusOr<std::unique_ptr<TierBuffer>> b = tier->Allocate(chunk);
    if (!b.ok()) return b.status();
    buffers.push_back(std::move(*b));
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> busy(in_flight, false);
  int pending = 0;
  absl::Status first_error;
  const auto start = std::chrono::steady_clock::now();
  uint64_t issued = 0;
  while (issued < bytes) {
    int i;
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return pending < in_flight; });
      if (!first_error.ok()) break;
      i = static_cast<int>(std::find(busy.begin(), busy.end(), false) -
                           busy.begin());
      busy[i] = true;
      ++pending;
    }
    const uint64_t size = std::min(chunk, bytes - issued);
    tier->CopyAsync({{source, offset + issued, size, 0}}, buffers[i]->data(),
                    nullptr, [&, i](absl::Status status) {
                      std::lock_guard<std::mutex> lock(mu);
                      if (!status.ok() && first_error.ok())
                        first_error = status;
                      busy[i] = false;
                      --pending;
                      cv.notify_all();
                    });
    issued += size;
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return pending == 0; });
  if (!first_error.ok()) return first_error;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return static_cast<double>(issued) / seconds;
}

}  // namespace ringmoe::memory_ring

// Test helper: collects one request's outputs from the scheduler's engine
// thread. Synchronises through std::mutex so that ThreadSanitizer sees the
// ordering (Debian's Abseil is not built for it).
#ifndef RINGMOE_ENGINE_SERVING_OUTPUT_COLLECTOR_H_
#define RINGMOE_ENGINE_SERVING_OUTPUT_COLLECTOR_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "engine/serving/scheduler.h"

namespace ringmoe::serving {

struct OutputCollector {
  // Read them after Wait() returned true.
  std::vector<int32_t> ids;  // every token generated, in order
  RequestOutput last;        // the final output
  int messages = 0;          // outputs delivered

  OutputCallback Callback() {
    return [this](RequestOutput out) {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(ids.end(), out.token_ids.begin(), out.token_ids.end());
      ++messages;
      if (out.finished) {
        last = std::move(out);
        done = true;
        finished.notify_all();
      }
    };
  }

  // Whether an output came yet; safe while the request runs.
  bool Started() {
    std::lock_guard<std::mutex> lock(mu);
    return messages > 0;
  }

  // Waits for the final output (a minute at most).
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu);
    return finished.wait_for(lock, std::chrono::seconds(60),
                             [this] { return done; });
  }

 private:
  std::mutex mu;
  std::condition_variable finished;
  bool done = false;
};

}  // namespace ringmoe::serving

#endif  // RINGMOE_ENGINE_SERVING_OUTPUT_COLLECTOR_H_

// What the serving core reports as it runs requests: the lifecycle of each
// request and the scheduler's state after every step. The server exports it
// (server/metrics.h, Prometheus); the core knows no metrics library.
#ifndef RINGMOE_ENGINE_SERVING_SERVING_METRICS_H_
#define RINGMOE_ENGINE_SERVING_SERVING_METRICS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace ringmoe::serving {

// Every method may be called from any thread and must not block.
class ServingMetrics {
 public:
  virtual ~ServingMetrics() = default;

  // One per finished request of a front end: `method` names the call
  // ("Generate", "ModelInfer", "chat.completions", ...), `code` the status
  // it ended with.
  virtual void CountRequest(absl::string_view method,
                            absl::StatusCode code) = 0;

  // Request lifecycle (seconds).
  virtual void ObserveQueueTime(double seconds) = 0;
  virtual void ObserveTimeToFirstToken(double seconds) = 0;
  virtual void ObserveInterTokenLatency(double seconds) = 0;
  virtual void ObserveEndToEndLatency(double seconds) = 0;
  virtual void AddPromptTokens(int64_t n) = 0;
  virtual void AddGeneratedTokens(int64_t n) = 0;
  virtual void CountPreemption() = 0;

  // Scheduler state, set after every step.
  virtual void SetQueueDepth(int64_t n) = 0;
  virtual void SetRunningSequences(int64_t n) = 0;
  virtual void SetKvCacheBlocks(int64_t used, int64_t total) = 0;
  virtual void ObserveStep(int64_t sequences, int64_t tokens,
                           double seconds) = 0;
};

}  // namespace ringmoe::serving

#endif  // RINGMOE_ENGINE_SERVING_SERVING_METRICS_H_

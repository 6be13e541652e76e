// PlacementPolicy: where each routed expert a step touches runs when its
// weights are not in device memory: on the CPU where they lie (activations
// go down, results come back) or streamed to the device through the ring.
// The two paths run at once, so a step's experts are split to make them
// finish together: longest first, each onto the path that would finish it
// sooner. Path costs come from a model calibrated on the machine at
// start-up and refined from measured steps.
#ifndef RINGMOE_ENGINE_RUNTIME_PLACEMENT_POLICY_H_
#define RINGMOE_ENGINE_RUNTIME_PLACEMENT_POLICY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace ringmoe::runtime {

// --placement: kAuto decides per step and expert; the others force every
// expert outside device memory onto one path (kGpu: none may be outside).
enum class PlacementMode { kAuto, kCpu, kStream, kGpu };

absl::StatusOr<PlacementMode> ParsePlacementMode(absl::string_view text);
absl::string_view PlacementModeName(PlacementMode mode);

// Where one expert of a step ran.
enum class ExpertPlace { kDevice, kCpu, kStream };

// Seconds one expert of `bytes` takes for n tokens on each path:
//   CPU:    cpu_seconds_fixed + n * cpu_seconds_per_token
//   stream: bytes / copy_bytes_per_second + device_seconds_fixed
//           + n * device_seconds_per_token
// and, once per layer that uses it, the CPU path's setup: the rows' trip
// down and back and waking its thread.
struct PathCosts {
  double cpu_seconds_fixed = 0;
  double cpu_seconds_per_token = 0;
  double cpu_seconds_setup = 0;
  double copy_bytes_per_second = 0;
  double device_seconds_fixed = 0;
  double device_seconds_per_token = 0;
};

class PlacementPolicy {
 public:
  PlacementPolicy(const PathCosts& costs, uint64_t expert_bytes)
      : costs_(costs), expert_bytes_(expert_bytes) {}

  double CpuSeconds(int64_t tokens) const;
  double StreamSeconds(int64_t tokens) const;

  // For experts with `tokens[i]` tokens each: kCpu or kStream per expert.
  std::vector<ExpertPlace> Plan(absl::Span<const int64_t> tokens) const;
  // Whether a step of experts with `tokens` tokens each would stream any.
  bool StreamsAny(absl::Span<const int64_t> tokens) const;

  // A step's path took `measured` seconds where the model predicted
  // `predicted`: that path's costs move a quarter of the way toward what
  // was measured (a moving average, so one noisy step does not swing it).
  void Observe(ExpertPlace path, double predicted, double measured);

  const PathCosts& costs() const { return costs_; }
  // One line for the start-up log.
  std::string Describe() const;

 private:
  PathCosts costs_;
  uint64_t expert_bytes_;
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_PLACEMENT_POLICY_H_

// PlacementPolicy: where each routed expert a step touches runs when its
// weights are not in device memory: on the CPU where they lie (activations
// go down, results come back) or streamed to the device through the ring.
// The two paths run at once, so a layer takes as long as the slower of them
// (each with its per-layer fixed cost), not their sum: a step's experts are
// split to make them finish together, longest first, each onto the path
// that would finish it sooner. Path costs come from a model calibrated on
// the machine at start-up and refined from measured layers.
#ifndef RINGMOE_ENGINE_RUNTIME_PLACEMENT_POLICY_H_
#define RINGMOE_ENGINE_RUNTIME_PLACEMENT_POLICY_H_

#include <array>
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
// and, once per layer that uses a path, its setup: for the CPU the rows'
// trip down and back and waking its thread, for streaming the wait for a
// copy to land in the ring (a synchronisation the CPU path does not have).
struct PathCosts {
  double cpu_seconds_fixed = 0;
  double cpu_seconds_per_token = 0;
  double cpu_seconds_setup = 0;
  double copy_bytes_per_second = 0;
  double device_seconds_fixed = 0;
  double device_seconds_per_token = 0;
  double stream_seconds_setup = 0;
  // How far, relative, the model may be off (the spread of the start-up
  // probes): paths closer than this are a tie, and a tie keeps the path
  // chosen before, so that noise does not flip the choice step by step.
  double relative_error = 0;
};

// A calibration probe repeated: its median (one stalled repetition does
// not move it) and its interquartile range over the median (the error).
struct Probe {
  double median = 0;
  double spread = 0;
};
// `seconds` must not be empty.
Probe SummariseProbe(std::vector<double> seconds);

class PlacementPolicy {
 public:
  PlacementPolicy(const PathCosts& costs, uint64_t expert_bytes);

  // One expert of `tokens` tokens, its path's per-layer setup not included;
  // the calibrated model times what measured layers of that size taught.
  double CpuSeconds(int64_t tokens) const;
  double StreamSeconds(int64_t tokens) const;

  // For experts with `tokens[i]` tokens each: kCpu or kStream per expert.
  std::vector<ExpertPlace> Plan(absl::Span<const int64_t> tokens) const;
  // Whether a step of experts with `tokens` tokens each would stream any.
  bool StreamsAny(absl::Span<const int64_t> tokens) const;

  // `path` ran experts with `tokens` tokens each in one layer and took
  // `measured` seconds: for streaming its setup included (the wait for the
  // ring is part of it), for the CPU not (it surrounds the CPU's run).
  // Layers are compared by tokens per expert (a decode layer teaches
  // nothing of a prefill's); within that, the correction is the median
  // of the last measured-to-modelled ratios, so outliers do not move it.
  void Observe(ExpertPlace path, absl::Span<const int64_t> tokens,
               double measured);

  const PathCosts& costs() const { return costs_; }
  // One line for the log: the model, and the corrections measured layers
  // have taught it.
  std::string Describe() const;

  // Classes of experts by tokens: 1, 2-3, 4-7, ..., 2048 and more.
  static constexpr int kBuckets = 12;
  // Ratios a correction is the median of; fewer than kMinObserved leave
  // the calibrated model as it is (the median of three drops one outlier).
  static constexpr size_t kWindow = 15;
  static constexpr size_t kMinObserved = 3;

 private:
  // A path's ratios of measured to modelled seconds for one bucket.
  struct Window {
    std::vector<double> ratios;  // at most kWindow, oldest replaced first
    size_t next = 0;
    double median = 1;  // the correction; 1 below kMinObserved ratios
  };
  static int Bucket(int64_t tokens);
  double CalibratedCpu(int64_t tokens) const;
  double CalibratedStream(int64_t tokens) const;
  // Whether `a` seconds on the path not preferred beat `b` on the preferred
  // one by more than the model's error.
  bool Beats(double a, double b) const;
  // Re-decides bucket b's preferred path: it changes only when the other
  // is cheaper by more than the model's error.
  void UpdatePreferred(int bucket, bool initial);

  PathCosts costs_;
  uint64_t expert_bytes_;
  std::array<Window, kBuckets> cpu_, stream_;
  // Per bucket, the path a lone expert of its size goes to on a tie.
  std::array<ExpertPlace, kBuckets> preferred_;
};

}  // namespace ringmoe::runtime

#endif  // RINGMOE_ENGINE_RUNTIME_PLACEMENT_POLICY_H_

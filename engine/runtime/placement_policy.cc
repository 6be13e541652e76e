#include "engine/runtime/placement_policy.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ringmoe::runtime {

absl::StatusOr<PlacementMode> ParsePlacementMode(absl::string_view text) {
  if (text == "auto") return PlacementMode::kAuto;
  if (text == "cpu") return PlacementMode::kCpu;
  if (text == "stream") return PlacementMode::kStream;
  if (text == "gpu") return PlacementMode::kGpu;
  return absl::InvalidArgumentError(absl::StrCat(
      "placement \"", text, "\": expected auto, cpu, stream or gpu"));
}

absl::string_view PlacementModeName(PlacementMode mode) {
  switch (mode) {
    case PlacementMode::kAuto:
      return "auto";
    case PlacementMode::kCpu:
      return "cpu";
    case PlacementMode::kStream:
      return "stream";
    case PlacementMode::kGpu:
      return "gpu";
  }
  return "?";
}

double PlacementPolicy::CpuSeconds(int64_t tokens) const {
  return costs_.cpu_seconds_fixed + tokens * costs_.cpu_seconds_per_token;
}

double PlacementPolicy::StreamSeconds(int64_t tokens) const {
  const double copy = costs_.copy_bytes_per_second > 0
                          ? expert_bytes_ / costs_.copy_bytes_per_second
                          : 0;
  return copy + costs_.device_seconds_fixed +
         tokens * costs_.device_seconds_per_token;
}

std::vector<ExpertPlace> PlacementPolicy::Plan(
    absl::Span<const int64_t> tokens) const {
  std::vector<size_t> order(tokens.size());
  std::iota(order.begin(), order.end(), 0);
  // Longest first (by the slower of its two costs), ties by index.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::max(CpuSeconds(tokens[a]), StreamSeconds(tokens[a])) >
           std::max(CpuSeconds(tokens[b]), StreamSeconds(tokens[b]));
  });
  std::vector<ExpertPlace> place(tokens.size(), ExpertPlace::kCpu);
  double cpu_busy = 0, stream_busy = 0;
  for (size_t i : order) {
    const double cpu = cpu_busy + CpuSeconds(tokens[i]) +
                       (cpu_busy == 0 ? costs_.cpu_seconds_setup : 0);
    const double stream = stream_busy + StreamSeconds(tokens[i]);
    if (stream < cpu) {
      place[i] = ExpertPlace::kStream;
      stream_busy = stream;
    } else {
      cpu_busy = cpu;
    }
  }
  return place;
}

bool PlacementPolicy::StreamsAny(absl::Span<const int64_t> tokens) const {
  const std::vector<ExpertPlace> places = Plan(tokens);
  return std::find(places.begin(), places.end(), ExpertPlace::kStream) !=
         places.end();
}

void PlacementPolicy::Observe(ExpertPlace path, double predicted,
                              double measured) {
  if (!(predicted > 0) || !(measured > 0) || path == ExpertPlace::kDevice) {
    return;
  }
  const double factor = 0.75 + 0.25 * (measured / predicted);
  if (path == ExpertPlace::kCpu) {
    costs_.cpu_seconds_fixed *= factor;
    costs_.cpu_seconds_per_token *= factor;
    costs_.cpu_seconds_setup *= factor;
  } else {
    costs_.copy_bytes_per_second /= factor;
    costs_.device_seconds_fixed *= factor;
    costs_.device_seconds_per_token *= factor;
  }
}

std::string PlacementPolicy::Describe() const {
  return absl::StrFormat(
      "expert of %d bytes: CPU %.3g ms + %.3g ms/token (+ %.3g ms a layer); "
      "streamed %.3g ms "
      "(copy at %.3g GB/s) + %.3g ms + %.3g ms/token on the device; "
      "break-even at %s",
      expert_bytes_, costs_.cpu_seconds_fixed * 1e3,
      costs_.cpu_seconds_per_token * 1e3, costs_.cpu_seconds_setup * 1e3,
      costs_.copy_bytes_per_second > 0
          ? expert_bytes_ / costs_.copy_bytes_per_second * 1e3
          : 0.0,
      costs_.copy_bytes_per_second * 1e-9, costs_.device_seconds_fixed * 1e3,
      costs_.device_seconds_per_token * 1e3, [&]() -> std::string {
        for (int64_t n = 1; n <= 65536; n *= 2) {
          if (StreamSeconds(n) < CpuSeconds(n)) {
            return absl::StrCat(n, " tokens");
          }
        }
        return "more than 65536 tokens";
      }());
}

}  // namespace ringmoe::runtime

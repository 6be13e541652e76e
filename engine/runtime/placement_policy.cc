#include "engine/runtime/placement_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

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

Probe SummariseProbe(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  const double median = seconds[n / 2];
  const double range = seconds[n * 3 / 4] - seconds[n / 4];
  return {median, median > 0 ? range / median : 0};
}

PlacementPolicy::PlacementPolicy(const PathCosts& costs, uint64_t expert_bytes)
    : costs_(costs), expert_bytes_(expert_bytes) {
  for (int b = 0; b < kBuckets; ++b) UpdatePreferred(b, /*initial=*/true);
}

int PlacementPolicy::Bucket(int64_t tokens) {
  int b = 0;
  while (b + 1 < kBuckets && (int64_t{2} << b) <= tokens) ++b;
  return b;
}

double PlacementPolicy::CalibratedCpu(int64_t tokens) const {
  return costs_.cpu_seconds_fixed + tokens * costs_.cpu_seconds_per_token;
}

double PlacementPolicy::CalibratedStream(int64_t tokens) const {
  const double copy = costs_.copy_bytes_per_second > 0
                          ? expert_bytes_ / costs_.copy_bytes_per_second
                          : 0;
  return copy + costs_.device_seconds_fixed +
         tokens * costs_.device_seconds_per_token;
}

double PlacementPolicy::CpuSeconds(int64_t tokens) const {
  return CalibratedCpu(tokens) * cpu_[Bucket(tokens)].median;
}

double PlacementPolicy::StreamSeconds(int64_t tokens) const {
  return CalibratedStream(tokens) * stream_[Bucket(tokens)].median;
}

bool PlacementPolicy::Beats(double a, double b) const {
  return a * (1 + costs_.relative_error) < b;
}

void PlacementPolicy::UpdatePreferred(int bucket, bool initial) {
  const int64_t n = int64_t{1} << bucket;
  const double cpu = costs_.cpu_seconds_setup + CpuSeconds(n);
  const double stream = costs_.stream_seconds_setup + StreamSeconds(n);
  if (initial) {
    preferred_[bucket] =
        stream < cpu ? ExpertPlace::kStream : ExpertPlace::kCpu;
  } else if (preferred_[bucket] == ExpertPlace::kCpu && Beats(stream, cpu)) {
    preferred_[bucket] = ExpertPlace::kStream;
  } else if (preferred_[bucket] == ExpertPlace::kStream && Beats(cpu, stream)) {
    preferred_[bucket] = ExpertPlace::kCpu;
  }
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
  // When each path would be done with what it has, its setup included
  // once it has anything: the layer waits for the later of the two.
  double cpu_busy = 0, stream_busy = 0;
  for (size_t i : order) {
    const double cpu = cpu_busy + CpuSeconds(tokens[i]) +
                       (cpu_busy == 0 ? costs_.cpu_seconds_setup : 0);
    const double stream = stream_busy + StreamSeconds(tokens[i]) +
                          (stream_busy == 0 ? costs_.stream_seconds_setup : 0);
    // Within the model's error the path preferred for this size wins.
    const bool streams = preferred_[Bucket(tokens[i])] == ExpertPlace::kStream
                             ? !Beats(cpu, stream)
                             : Beats(stream, cpu);
    if (streams) {
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

void PlacementPolicy::Observe(ExpertPlace path,
                              absl::Span<const int64_t> tokens,
                              double measured) {
  if (tokens.empty() || !(measured > 0) || path == ExpertPlace::kDevice) {
    return;
  }
  const bool cpu = path == ExpertPlace::kCpu;
  double modelled = 0;
  int64_t total = 0;
  for (int64_t n : tokens) {
    modelled += cpu ? CalibratedCpu(n) : CalibratedStream(n);
    total += n;
  }
  if (!(modelled > 0) || !std::isfinite(modelled)) return;
  const double own = measured - (cpu ? 0 : costs_.stream_seconds_setup);
  // Bounded: a layer stalled by something else (a page fault, another
  // process) counts as one high ratio, however long it stalled.
  constexpr double kMaxRatio = 16;
  const double ratio = std::clamp(own / modelled, 1 / kMaxRatio, kMaxRatio);
  const int64_t per_expert =
      (total + static_cast<int64_t>(tokens.size()) / 2) / tokens.size();
  const int bucket = Bucket(per_expert);
  Window& w = (cpu ? cpu_ : stream_)[bucket];
  if (w.ratios.size() < kWindow) {
    w.ratios.push_back(ratio);
  } else {
    w.ratios[w.next] = ratio;
    w.next = (w.next + 1) % kWindow;
  }
  if (w.ratios.size() >= kMinObserved) {
    std::vector<double> sorted = w.ratios;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2,
                     sorted.end());
    w.median = sorted[sorted.size() / 2];
  }
  UpdatePreferred(bucket, /*initial=*/false);
}

std::string PlacementPolicy::Describe() const {
  std::string learned;
  for (int b = 0; b < kBuckets; ++b) {
    for (const auto& [name, w] :
         {std::pair{"CPU", &cpu_[b]}, std::pair{"stream", &stream_[b]}}) {
      if (w->ratios.size() < kMinObserved) continue;
      absl::StrAppend(
          &learned, learned.empty() ? "; measured: " : ", ",
          absl::StrFormat("%s x%.3g from %d tokens (%d layers)", name,
                          w->median, int64_t{1} << b, w->ratios.size()));
    }
  }
  return absl::StrFormat(
      "expert of %d bytes: CPU %.3g ms + %.3g ms/token (+ %.3g ms a layer); "
      "streamed %.3g ms "
      "(copy at %.3g GB/s) + %.3g ms + %.3g ms/token on the device "
      "(+ %.3g ms a layer); error %.2g%%; break-even at %s%s",
      expert_bytes_, costs_.cpu_seconds_fixed * 1e3,
      costs_.cpu_seconds_per_token * 1e3, costs_.cpu_seconds_setup * 1e3,
      costs_.copy_bytes_per_second > 0
          ? expert_bytes_ / costs_.copy_bytes_per_second * 1e3
          : 0.0,
      costs_.copy_bytes_per_second * 1e-9, costs_.device_seconds_fixed * 1e3,
      costs_.device_seconds_per_token * 1e3, costs_.stream_seconds_setup * 1e3,
      costs_.relative_error * 100,
      [&]() -> std::string {
        for (int64_t n = 1; n <= 65536; n *= 2) {
          if (costs_.stream_seconds_setup + StreamSeconds(n) <
              costs_.cpu_seconds_setup + CpuSeconds(n)) {
            return absl::StrCat(n, " tokens");
          }
        }
        return "more than 65536 tokens";
      }(),
      learned);
}

}  // namespace ringmoe::runtime

#include "memory_ring/placement.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ringmoe::memory_ring {

std::string PlacementPlan::Summary() const {
  if (!streams()) {
    return absl::StrFormat(
        "placement: all %d bytes resident (budget %s)", resident_bytes,
        budget_bytes ? absl::StrCat(budget_bytes) : "unlimited");
  }
  return absl::StrFormat(
      "placement: budget %d bytes: %d resident (%d experts), %d streamed (%d "
      "experts), "
      "ring %d slots x %d bytes, expert cache %d bytes (%d entries)",
      budget_bytes, resident_bytes, resident_experts, streamed_bytes,
      streamed_experts, num_slots, slot_bytes, cache_bytes,
      expert_bytes ? cache_bytes / expert_bytes : 0);
}

absl::StatusOr<PlacementPlan> PlanPlacement(const PlacementInput& input) {
  PlacementPlan plan;
  plan.budget_bytes = input.budget_bytes;
  plan.expert_resident.assign(input.num_layers,
                              std::vector<bool>(input.experts_per_layer, true));
  uint64_t all_experts = 0;
  std::vector<uint64_t> layer_bytes(input.num_layers, 0);
  for (const ExpertSize& e : input.experts) {
    all_experts += e.bytes;
    layer_bytes[e.layer] += e.bytes;
    plan.expert_bytes = std::max(plan.expert_bytes, e.bytes);
  }
  plan.resident_bytes = input.always_resident_bytes + all_experts;
  plan.resident_experts = static_cast<int>(input.experts.size());
  // Slots must fit the largest layer, in case every expert of it streams.
  plan.slot_bytes = layer_bytes.empty() ? 0
                                        : *std::max_element(layer_bytes.begin(),
                                                            layer_bytes.end());
  plan.minimum_budget = input.always_resident_bytes + 2 * plan.slot_bytes;
  const uint64_t minimum = plan.minimum_budget;
  if (input.budget_bytes == 0 ||
      (plan.resident_bytes <= input.budget_bytes && !input.force_streaming)) {
    return plan;
  }
  if (input.budget_bytes < minimum) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "memory budget of %d bytes is too small: %d bytes must stay resident "
        "(embeddings, attention, norms, routers, shared experts) plus 2 ring "
        "slots of %d bytes; the smallest budget that works is %d bytes (%.1f "
        "MiB)",
        input.budget_bytes, input.always_resident_bytes, plan.slot_bytes,
        minimum, minimum / 1048576.0));
  }
  plan.num_slots = std::max(2, input.num_slots);
  while (plan.num_slots > 2 &&
         input.always_resident_bytes + plan.num_slots * plan.slot_bytes >
             input.budget_bytes) {
    --plan.num_slots;
  }
  uint64_t left = input.budget_bytes - input.always_resident_bytes -
                  plan.num_slots * plan.slot_bytes;
  plan.resident_bytes = input.always_resident_bytes;
  plan.resident_experts = 0;
  for (const ExpertSize& e : input.experts) {
    if (!input.expert_cache && e.bytes <= left) {
      left -= e.bytes;
      plan.resident_bytes += e.bytes;
      ++plan.resident_experts;
    } else {
      plan.expert_resident[e.layer][e.expert] = false;
      plan.streamed_bytes += e.bytes;
      ++plan.streamed_experts;
    }
  }
  plan.cache_bytes = input.expert_cache ? left : 0;
  return plan;
}

absl::StatusOr<uint64_t> ParseByteSize(const std::string& raw) {
  std::string text = absl::AsciiStrToLower(absl::StripAsciiWhitespace(raw));
  size_t split = 0;
  while (split < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[split])) ||
          text[split] == '.')) {
    ++split;
  }
  double number;
  if (split == 0 || !absl::SimpleAtod(text.substr(0, split), &number) ||
      number < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", raw,
        "' is not a byte count (examples: 1073741824, 512MiB, 1.5GiB)"));
  }
  const std::string unit(absl::StripAsciiWhitespace(text.substr(split)));
  double scale;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tib") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else if (unit == "kb") {
    scale = 1e3;
  } else if (unit == "mb") {
    scale = 1e6;
  } else if (unit == "gb") {
    scale = 1e9;
  } else if (unit == "tb") {
    scale = 1e12;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", raw, "': unknown unit '", unit,
                     "' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"));
  }
  return static_cast<uint64_t>(number * scale);
}

}  // namespace ringmoe::memory_ring

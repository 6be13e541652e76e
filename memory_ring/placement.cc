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
  if (num_slots == 0) {
    return absl::StrFormat(
        "placement: budget %d bytes: %d resident (%d experts), %d outside "
        "(%d experts, not streamed)",
        budget_bytes, resident_bytes, resident_experts, streamed_bytes,
        streamed_experts);
  }
  return absl::StrFormat(
      "placement: budget %d bytes: %d resident (%d experts), %d streamed (%d "
      "experts), ring %d slots x %d bytes (%d of a layer's %d experts each), "
      "expert cache %d bytes (%d entries)",
      budget_bytes, resident_bytes, resident_experts, streamed_bytes,
      streamed_experts, num_slots, slot_bytes, section_experts, layer_experts,
      cache_bytes, expert_bytes ? cache_bytes / expert_bytes : 0);
}

absl::StatusOr<PlacementPlan> PlanPlacement(const PlacementInput& input) {
  if (input.section_experts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "experts per ring section must be positive (0: as many as fit), got ",
        input.section_experts));
  }
  PlacementPlan plan;
  plan.budget_bytes = input.budget_bytes;
  plan.always_resident_bytes = input.always_resident_bytes;
  plan.expert_resident.assign(input.num_layers,
                              std::vector<bool>(input.experts_per_layer, true));
  uint64_t all_experts = 0;
  std::vector<int> per_layer(input.num_layers, 0);
  for (const ExpertSize& e : input.experts) {
    all_experts += e.bytes;
    plan.layer_experts = std::max(plan.layer_experts, ++per_layer[e.layer]);
    plan.expert_bytes = std::max(plan.expert_bytes, e.bytes);
  }
  plan.resident_bytes = input.always_resident_bytes + all_experts;
  plan.resident_experts = static_cast<int>(input.experts.size());
  const int smallest_section =
      input.section_experts > 0
          ? std::min(input.section_experts, plan.layer_experts)
          : std::min(1, plan.layer_experts);
  const bool ring = input.num_slots > 0;
  const uint64_t smallest_slot =
      ring ? smallest_section * plan.expert_bytes : 0;
  plan.section_experts =
      input.section_experts > 0 ? smallest_section : plan.layer_experts;
  plan.slot_bytes = plan.section_experts * plan.expert_bytes;
  plan.minimum_budget = input.always_resident_bytes + 2 * smallest_slot;
  const uint64_t minimum = plan.minimum_budget;
  if (input.budget_bytes == 0 ||
      (plan.resident_bytes <= input.budget_bytes && !input.force_streaming)) {
    return plan;
  }
  if (input.budget_bytes < minimum && !ring) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "memory budget of %d bytes is too small: %d bytes must stay resident "
        "(embeddings, attention, norms, routers, shared experts); the "
        "smallest budget that works is %d bytes (%.1f MiB)",
        input.budget_bytes, input.always_resident_bytes, minimum,
        minimum / 1048576.0));
  }
  if (input.budget_bytes < minimum) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "memory budget of %d bytes is too small: %d bytes must stay resident "
        "(embeddings, attention, norms, routers, shared experts) plus 2 ring "
        "slots of %d bytes (%d expert%s of %d bytes each); the smallest budget "
        "that works is %d bytes (%.1f MiB)",
        input.budget_bytes, input.always_resident_bytes, smallest_slot,
        smallest_section, smallest_section == 1 ? "" : "s", plan.expert_bytes,
        minimum, minimum / 1048576.0));
  }
  const uint64_t available = input.budget_bytes - input.always_resident_bytes;
  plan.num_slots = ring ? std::max(2, input.num_slots) : 0;
  while (plan.num_slots > 2 && available < plan.num_slots * smallest_slot) {
    --plan.num_slots;
  }
  if (!ring) {
    plan.section_experts = 0;
  } else if (input.section_experts == 0 && plan.expert_bytes > 0) {
    const uint64_t fit = available / (plan.num_slots * plan.expert_bytes);
    uint64_t section = std::min<uint64_t>(plan.layer_experts, fit);
    if (input.expert_cache && section < plan.layer_experts) {
      section = std::min<uint64_t>(
          section,
          2 * static_cast<uint64_t>(std::max(1, input.experts_per_token)));
    }
    plan.section_experts = static_cast<int>(section);
  }
  plan.slot_bytes = plan.section_experts * plan.expert_bytes;
  uint64_t left = available - plan.num_slots * plan.slot_bytes;
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
  const double bytes = number * scale;
  // A budget is at least one byte and fits in 63 bits (the float-to-integer
  // conversion of a larger value is undefined).
  if (!(bytes >= 1) || bytes >= 9.2e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", raw, "' is ", bytes < 1 ? "less than one byte" : "too large",
        " (a byte count from 1 to 8 EiB)"));
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace ringmoe::memory_ring

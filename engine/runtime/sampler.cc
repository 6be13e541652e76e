#include "engine/runtime/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "kernels/cpu/ops.h"

namespace ringmoe::runtime {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Below this temperature 1/T overflows float logits; the result would be
// greedy up to exact ties anyway.
constexpr float kGreedyTemperature = 1e-5f;

// Up to this k, top-k keeps a min-heap of the best k seen so far: a scan
// whose one compare per token almost always fails is cheaper than the radix
// select's histogram. Larger k would make heap updates dominate.
constexpr int32_t kHeapTopKLimit = 256;

absl::Status OutOfRange(absl::string_view field, absl::string_view rule,
                        double value) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "SamplingParams.%s must be %s, got %g", field, rule, value));
}

// NaN would poison max/exp; +inf would make every finite token's weight
// exp(-inf - inf). Mapping them to -inf and FLT_MAX keeps the arithmetic
// finite and gives +inf tokens all the probability mass.
float Sanitize(float logit) {
  if (std::isnan(logit)) return kNegInf;
  if (logit == std::numeric_limits<float>::infinity()) {
    return std::numeric_limits<float>::max();
  }
  return logit;
}

// Maps a logit to an unsigned key with the same order, so a radix select can
// bucket logits by their leading bits: negative floats get all bits flipped,
// the others just the sign bit. Branch-free because the sign of a logit is
// unpredictable. Adding +0 turns -0 into +0 so that the two zeros, equal as
// floats, share a key.
uint32_t OrderKey(float logit) {
  logit += 0.0f;
  uint32_t bits;
  std::memcpy(&bits, &logit, sizeof(bits));
  const uint32_t flip = (0u - (bits >> 31)) | 0x80000000u;
  return bits ^ flip;
}

// The last element kept by a prefix cut: everything with a larger key, and
// the elements with an equal key up to `index`.
struct Cut {
  uint32_t key;
  uint32_t index;

  bool Keeps(uint32_t k, uint32_t i) const {
    return k > key || (k == key && i <= index);
  }
};

// Elements 0..n-1 ordered by descending key, then ascending index (= token
// id, so equal logits go lowest id first). Finds where the shortest prefix
// whose measure sums to at least `target` ends; nullopt when the whole set
// falls short. Top-k measures 1 per token, top-p its probability.
//
// A most-significant-digit radix select (11, 11 and 10 bits): each level
// sums the measure per bucket, walks buckets from the top and keeps only the
// bucket where the target is crossed. The first level reads every element;
// later ones only that bucket's members. O(n) with no sorting, and it never
// reorders the elements, so what survives stays in id order.
template <typename KeyAt, typename MeasureAt>
std::optional<Cut> SelectPrefix(uint32_t n, double target, KeyAt key_at,
                                MeasureAt measure_at, std::vector<double>& mass,
                                std::vector<uint32_t>& members) {
  constexpr int kShift[] = {21, 10, 0};
  constexpr uint32_t kMask[] = {0x7FF, 0x7FF, 0x3FF};
  constexpr uint32_t kBuckets = 2048;
  // Logits crowd into a few buckets, so a single histogram would chain each
  // add on the previous one's store; four interleaved copies break that.
  constexpr uint32_t kStripes = 4;
  mass.resize(kStripes * kBuckets);
  double remaining = target;
  for (int level = 0; level < 3; ++level) {
    const int shift = kShift[level];
    const uint32_t mask = kMask[level];
    auto bucket = [&](uint32_t i) { return (key_at(i) >> shift) & mask; };
    std::fill(mass.begin(), mass.end(), 0.0);
    if (level == 0) {
      for (uint32_t i = 0; i < n; ++i) {
        mass[(i % kStripes) * kBuckets + bucket(i)] += measure_at(i);
      }
    } else {
      for (size_t j = 0; j < members.size(); ++j) {
        const uint32_t i = members[j];
        mass[(j % kStripes) * kBuckets + bucket(i)] += measure_at(i);
      }
    }
    int chosen = -1;
    double above = 0.0;
    for (int b = static_cast<int>(mask); b >= 0; --b) {
      double bucket_mass = 0.0;
      for (uint32_t s = 0; s < kStripes; ++s) {
        bucket_mass += mass[s * kBuckets + b];
      }
      if (bucket_mass > 0.0 && above + bucket_mass >= remaining) {
        chosen = b;
        break;
      }
      above += bucket_mass;
    }
    if (chosen < 0) {
      if (level == 0) return std::nullopt;
      // Summation order left this level a rounding error short of the
      // previous one: keep the whole lowest bucket.
      chosen = static_cast<int>(mask);
      for (const uint32_t i : members) {
        chosen = std::min(chosen, static_cast<int>(bucket(i)));
      }
      remaining = std::numeric_limits<double>::infinity();
    } else {
      remaining -= above;
    }
    auto in_chosen = [&](uint32_t i) {
      return bucket(i) == static_cast<uint32_t>(chosen);
    };
    if (level == 0) {
      members.clear();
      for (uint32_t i = 0; i < n; ++i) {
        if (in_chosen(i)) members.push_back(i);
      }
    } else {
      members.erase(std::remove_if(members.begin(), members.end(),
                                   [&](uint32_t i) { return !in_chosen(i); }),
                    members.end());
    }
  }
  // All members now share one key and are in index order.
  double cumulative = 0.0;
  for (const uint32_t i : members) {
    cumulative += measure_at(i);
    if (cumulative >= remaining) return Cut{key_at(i), i};
  }
  return Cut{key_at(members.back()), members.back()};
}

// log(sum(exp(x))) over the sanitised values; `max` is their maximum.
template <typename Get>
double LogSumExp(size_t n, float max, Get get) {
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    sum += std::exp(static_cast<double>(get(i)) - max);
  }
  return max + std::log(sum);
}

uint64_t NondeterministicSeed() {
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

absl::Status Validate(const SamplingParams& params, int vocab_size) {
  if (vocab_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vocab_size must be positive, got %d", vocab_size));
  }
  if (!std::isfinite(params.temperature) || params.temperature < 0) {
    return OutOfRange("temperature", "finite and >= 0", params.temperature);
  }
  if (params.top_k < 0) {
    return OutOfRange("top_k", ">= 0 (0 = off)", params.top_k);
  }
  if (!(params.top_p > 0 && params.top_p <= 1)) {
    return OutOfRange("top_p", "in (0, 1]", params.top_p);
  }
  if (!(params.min_p >= 0 && params.min_p <= 1)) {
    return OutOfRange("min_p", "in [0, 1]", params.min_p);
  }
  if (!std::isfinite(params.repetition_penalty) ||
      params.repetition_penalty <= 0) {
    return OutOfRange("repetition_penalty", "finite and > 0",
                      params.repetition_penalty);
  }
  if (!(params.presence_penalty >= -2 && params.presence_penalty <= 2)) {
    return OutOfRange("presence_penalty", "in [-2, 2]",
                      params.presence_penalty);
  }
  if (!(params.frequency_penalty >= -2 && params.frequency_penalty <= 2)) {
    return OutOfRange("frequency_penalty", "in [-2, 2]",
                      params.frequency_penalty);
  }
  if (params.max_new_tokens < 1) {
    return OutOfRange("max_new_tokens", ">= 1", params.max_new_tokens);
  }
  for (size_t i = 0; i < params.stop_token_ids.size(); ++i) {
    const int32_t id = params.stop_token_ids[i];
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SamplingParams.stop_token_ids[%d] = %d is outside the vocabulary "
          "[0, %d)",
          i, id, vocab_size));
    }
  }
  for (size_t i = 0; i < params.stop_strings.size(); ++i) {
    if (params.stop_strings[i].empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SamplingParams.stop_strings[%d] is empty; an empty stop string "
          "would end generation before the first token",
          i));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Sampler> Sampler::Create(const SamplingParams& params,
                                        int vocab_size) {
  if (absl::Status status = Validate(params, vocab_size); !status.ok()) {
    return absl::Status(status.code(), absl::StrFormat("Sampler::Create: %s",
                                                       status.message()));
  }
  const uint64_t seed =
      params.seed.has_value() ? *params.seed : NondeterministicSeed();
  return Sampler(params, seed, vocab_size);
}

Sampler::Sampler(const SamplingParams& params, uint64_t seed, int vocab_size)
    : params_(params), seed_(seed), rng_(seed) {
  work_.reserve(vocab_size);
}

double Sampler::UniformDouble() {
  // The top 53 bits scaled by 2^-53: uniform on [0, 1) with every value
  // exactly representable, unlike std::uniform_real_distribution whose
  // algorithm varies between standard libraries.
  return static_cast<double>(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::ApplyPenalties(absl::Span<const int32_t> prompt_ids,
                             absl::Span<const int32_t> generated_ids) {
  const int32_t vocab = static_cast<int32_t>(work_.size());
  const bool repetition = params_.repetition_penalty != 1.0f;
  const bool additive =
      params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f;
  if (!repetition && !additive) return;
  if (marks_.size() < work_.size()) marks_.resize(work_.size(), 0);

  if (repetition) {
    const float penalty = params_.repetition_penalty;
    // marks_ makes each distinct id count once, however often it repeats.
    auto penalise = [&](absl::Span<const int32_t> ids) {
      for (const int32_t id : ids) {
        if (id < 0 || id >= vocab || marks_[id] != 0) continue;
        marks_[id] = 1;
        float& logit = work_[id];
        // A penalty below 1 can overflow a huge positive logit to +inf.
        logit = Sanitize(logit > 0 ? logit / penalty : logit * penalty);
      }
    };
    penalise(prompt_ids);
    penalise(generated_ids);
    // Clearing only the touched entries keeps this O(#ids), not O(vocab).
    for (const int32_t id : prompt_ids) {
      if (id >= 0 && id < vocab) marks_[id] = 0;
    }
    for (const int32_t id : generated_ids) {
      if (id >= 0 && id < vocab) marks_[id] = 0;
    }
  }

  if (additive) {
    for (const int32_t id : generated_ids) {
      if (id >= 0 && id < vocab) ++marks_[id];
    }
    for (const int32_t id : generated_ids) {
      if (id < 0 || id >= vocab || marks_[id] == 0) continue;
      work_[id] -= params_.presence_penalty +
                   params_.frequency_penalty * static_cast<float>(marks_[id]);
      marks_[id] = 0;  // also marks the id as done for its later repeats
    }
  }
}

bool Sampler::SamplesGreedyToken() const {
  return params_.temperature < kGreedyTemperature && !Penalised();
}

int32_t Sampler::Sample(absl::Span<const float> logits,
                        absl::Span<const int32_t> prompt_ids,
                        absl::Span<const int32_t> generated_ids,
                        SampledLogprobs* logprobs) {
  const size_t vocab = logits.size();
  const bool greedy = params_.temperature < kGreedyTemperature;
  const bool penalised = Penalised();
  auto raw_at = [&](size_t i) { return Sanitize(logits[i]); };

  if (greedy && !penalised) {
    // Nothing modifies the logits, so one read-only pass decides.
    const int32_t token = kernels::GreedyToken(logits.data(), vocab);
    if (token >= 0 && logprobs != nullptr) {
      const float max = raw_at(token);
      logprobs->raw = logprobs->processed =
          static_cast<float>(max - LogSumExp(vocab, max, raw_at));
    }
    return token;
  }

  work_.resize(vocab);
  float max_logit = kNegInf;
  for (size_t i = 0; i < vocab; ++i) {
    work_[i] = raw_at(i);
    max_logit = std::max(max_logit, work_[i]);
  }
  if (max_logit == kNegInf) return -1;
  // Taken before penalties overwrite work_.
  const double raw_log_z =
      logprobs == nullptr
          ? 0.0
          : LogSumExp(vocab, max_logit, [&](size_t i) { return work_[i]; });

  if (penalised) {
    ApplyPenalties(prompt_ids, generated_ids);
    max_logit = kNegInf;
    for (const float logit : work_) max_logit = std::max(max_logit, logit);
    // Penalties can push the last finite logits to -inf (FLT_MAX-sized
    // values times the penalty); nothing is left to choose then.
    if (max_logit == kNegInf) return -1;
  }

  int32_t token;
  if (greedy) {
    token = kernels::GreedyToken(work_.data(), vocab);
    if (logprobs != nullptr) {
      const double log_z =
          LogSumExp(vocab, max_logit, [&](size_t i) { return work_[i]; });
      logprobs->processed = static_cast<float>(work_[token] - log_z);
    }
  } else {
    token = SampleFromWork(max_logit, logprobs);
  }
  if (logprobs != nullptr) {
    logprobs->raw = static_cast<float>(raw_at(token) - raw_log_z);
  }
  return token;
}

int32_t Sampler::SampleFromWork(float max_logit, SampledLogprobs* logprobs) {
  const uint32_t vocab = static_cast<uint32_t>(work_.size());
  const double inv_temperature = 1.0 / params_.temperature;
  const bool top_p = params_.top_p < 1.0f;
  // min-p in log space: p / p_max >= min_p. Deciding on the logit lets the
  // build loop skip exp() for dropped tokens.
  const double log_min_p = params_.min_p > 0.0f
                               ? std::log(static_cast<double>(params_.min_p))
                               : -std::numeric_limits<double>::infinity();
  auto scaled = [&](float logit) {
    return (static_cast<double>(logit) - max_logit) * inv_temperature;
  };

  // Collects the survivors of top-k in id order with their weights
  // exp(scaled), the best token weighing 1. top-p needs the mass before
  // min-p, so min-p only filters here when top-p is off.
  ids_.clear();
  weights_.clear();
  double total = 0.0;
  auto admit = [&](uint32_t i) {
    const double z = scaled(work_[i]);
    if (!top_p && z < log_min_p) return;
    const double weight = std::exp(z);
    ids_.push_back(static_cast<int32_t>(i));
    weights_.push_back(weight);
    total += weight;
  };

  // Stage 1: top-k, then every survivor goes through admit().
  const int32_t top_k = params_.top_k;
  if (top_k > 0 && static_cast<uint32_t>(top_k) < vocab &&
      top_k <= kHeapTopKLimit) {
    // The heap's front is the worst of the best k under "higher logit, then
    // lower id". Ids arrive ascending, so a newcomer must be strictly higher
    // to displace it.
    auto worse = [](const std::pair<float, uint32_t>& a,
                    const std::pair<float, uint32_t>& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    top_k_heap_.clear();
    float floor = kNegInf;
    for (uint32_t i = 0; i < vocab; ++i) {
      const float logit = work_[i];
      if (logit == kNegInf) continue;
      if (top_k_heap_.size() < static_cast<size_t>(top_k)) {
        top_k_heap_.emplace_back(logit, i);
        std::push_heap(top_k_heap_.begin(), top_k_heap_.end(), worse);
        if (top_k_heap_.size() == static_cast<size_t>(top_k)) {
          floor = top_k_heap_.front().first;
        }
      } else if (logit > floor) {
        std::pop_heap(top_k_heap_.begin(), top_k_heap_.end(), worse);
        top_k_heap_.back() = {logit, i};
        std::push_heap(top_k_heap_.begin(), top_k_heap_.end(), worse);
        floor = top_k_heap_.front().first;
      }
    }
    std::sort(top_k_heap_.begin(), top_k_heap_.end(),
              [](const auto& a, const auto& b) { return a.second < b.second; });
    for (const auto& [logit, i] : top_k_heap_) admit(i);
  } else if (top_k > 0 && static_cast<uint32_t>(top_k) < vocab) {
    // A cut by count over the whole vocabulary. -inf tokens count too (a
    // branch would cost more): they sort last, so they only fall inside the
    // cut when fewer than k tokens are finite, and are skipped below anyway.
    const std::optional<Cut> k_cut = SelectPrefix(
        vocab, top_k, [&](uint32_t i) { return OrderKey(work_[i]); },
        [](uint32_t) { return 1.0; }, select_mass_, select_members_);
    for (uint32_t i = 0; i < vocab; ++i) {
      if (work_[i] != kNegInf && k_cut->Keeps(OrderKey(work_[i]), i)) {
        admit(i);
      }
    }
  } else {
    for (uint32_t i = 0; i < vocab; ++i) {
      if (work_[i] != kNegInf) admit(i);
    }
  }

  if (top_p) {
    // min-p before top-p gives the spec's result (top-p then min-p): both
    // keep a prefix of the descending order, so the result is the shorter
    // prefix either way. The mass target still uses the unfiltered total.
    size_t n = ids_.size();
    if (params_.min_p > 0.0f) {
      size_t out = 0;
      for (size_t j = 0; j < n; ++j) {
        if (scaled(work_[ids_[j]]) < log_min_p) continue;
        ids_[out] = ids_[j];
        weights_[out] = weights_[j];
        ++out;
      }
      n = out;
    }
    // Stage 2: top-p, as a cut by probability mass.
    const std::optional<Cut> p_cut = SelectPrefix(
        static_cast<uint32_t>(n), static_cast<double>(params_.top_p) * total,
        [&](uint32_t j) { return OrderKey(work_[ids_[j]]); },
        [&](uint32_t j) { return weights_[j]; }, select_mass_, select_members_);
    if (p_cut.has_value()) {
      size_t out = 0;
      for (size_t j = 0; j < n; ++j) {
        if (!p_cut->Keeps(OrderKey(work_[ids_[j]]), j)) continue;
        ids_[out] = ids_[j];
        weights_[out] = weights_[j];
        ++out;
      }
      n = out;
    }
    ids_.resize(n);
    weights_.resize(n);
  }

  // Stage 3: inverse-CDF draw in id order. The best token survives every
  // stage with weight 1, so there is always a choice.
  double kept_total = 0.0;
  for (const double w : weights_) kept_total += w;
  const double target = UniformDouble() * kept_total;
  size_t chosen = 0;
  double cumulative = 0.0;
  for (size_t j = 0; j < weights_.size(); ++j) {
    if (weights_[j] <= 0.0) continue;  // underflowed: not a candidate
    chosen = j;
    cumulative += weights_[j];
    if (cumulative > target) break;
  }
  const int32_t token = ids_[chosen];
  if (logprobs != nullptr) {
    logprobs->processed =
        static_cast<float>(scaled(work_[token]) - std::log(kept_total));
  }
  return token;
}

}  // namespace ringmoe::runtime

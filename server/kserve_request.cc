#include "server/kserve_request.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/kserve_tensors.h"

namespace ringmoe::server {
namespace {

using inference::ModelInferRequest;

std::string NewInferId() {
  static std::atomic<uint64_t> next{1};
  return absl::StrCat("infer-", next.fetch_add(1));
}

absl::Status Invalid(const InferJob& job, absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat("request ", job.id, ": ", message));
}

// Integer-valued setting: rejects fractions and values outside int32.
absl::StatusOr<int32_t> AsInt(const std::string& key, double v) {
  if (!std::isfinite(v) || v != std::floor(v) ||
      v < std::numeric_limits<int32_t>::min() ||
      v > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", key, "' must be an integer in int32 range, got ", v));
  }
  return static_cast<int32_t>(v);
}

bool IsSetting(const std::string& key) {
  static const auto* settings =
      new absl::flat_hash_set<std::string>{"max_tokens",
                                           "top_k",
                                           "seed",
                                           "temperature",
                                           "top_p",
                                           "min_p",
                                           "ignore_eos",
                                           "repetition_penalty",
                                           "stream",
                                           "presence_penalty",
                                           "frequency_penalty"};
  return settings->contains(key);
}

// Applies one generation setting by name; NOT_FOUND for names that are not
// settings (see IsSetting).
absl::Status ApplySetting(const std::string& key, double v,
                          serving::GenerationInput* input, bool* stream) {
  runtime::SamplingParams& p = input->sampling;
  if (key == "max_tokens") {
    ASSIGN_OR_RETURN(input->max_tokens, AsInt(key, v));
  } else if (key == "top_k") {
    ASSIGN_OR_RETURN(p.top_k, AsInt(key, v));
  } else if (key == "seed") {
    if (!(v >= 0) || v != std::floor(v) || v > 1.8e19) {
      return absl::InvalidArgumentError(
          absl::StrCat("'seed' must be a non-negative integer, got ", v));
    }
    p.seed = static_cast<uint64_t>(v);
  } else if (key == "temperature") {
    p.temperature = static_cast<float>(v);
  } else if (key == "top_p") {
    p.top_p = static_cast<float>(v);
  } else if (key == "min_p") {
    p.min_p = static_cast<float>(v);
  } else if (key == "repetition_penalty") {
    p.repetition_penalty = static_cast<float>(v);
  } else if (key == "presence_penalty") {
    p.presence_penalty = static_cast<float>(v);
  } else if (key == "frequency_penalty") {
    p.frequency_penalty = static_cast<float>(v);
  } else if (key == "ignore_eos") {
    p.ignore_eos = v != 0;
  } else if (key == "stream") {
    *stream = v != 0;
  } else {
    return absl::NotFoundError(key);
  }
  return absl::OkStatus();
}

// vLLM backend style: {"temperature": 0, "max_tokens": 8, "stop": [...]}.
absl::Status ApplySamplingJson(const std::string& text,
                               serving::GenerationInput* input, bool* stream) {
  // A flat object of settings: anything nested deeper is refused unbuilt.
  absl::StatusOr<json::Json> parsed = json::ParseStrict(text, /*max_depth=*/4);
  if (!parsed.ok() || !parsed->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'sampling_parameters' must be a JSON object",
        parsed.ok() ? "" : absl::StrCat(": ", parsed.status().message())));
  }
  const json::Json& j = *parsed;
  for (const auto& [key, value] : j.items()) {
    if (key == "stop") {
      if (value.is_string()) {
        input->sampling.stop_strings.push_back(value.get<std::string>());
        continue;
      }
      if (!value.is_array()) {
        return absl::InvalidArgumentError(
            "sampling_parameters 'stop' must be a string or a list of strings");
      }
      for (const auto& s : value) {
        if (!s.is_string()) {
          return absl::InvalidArgumentError(
              "sampling_parameters 'stop' must be a string or a list of "
              "strings");
        }
        input->sampling.stop_strings.push_back(s.get<std::string>());
      }
      continue;
    }
    double v;
    if (value.is_boolean()) {
      v = value.get<bool>() ? 1 : 0;
    } else if (value.is_number()) {
      v = value.get<double>();
    } else if (value.is_string()) {
      // vLLM's backend accepts numbers written as strings ("0.7").
      char* end = nullptr;
      const std::string s = value.get<std::string>();
      v = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0') {
        return absl::InvalidArgumentError(absl::StrCat(
            "sampling_parameters '", key, "' is not a number: ", s));
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "sampling_parameters '", key, "' must be a number or a bool"));
    }
    absl::Status s = ApplySetting(key, v, input, stream);
    // Unknown vLLM options (n, best_of, ...) are not ours to reject loudly,
    // but silently ignoring them would change results: refuse.
    if (absl::IsNotFound(s)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sampling_parameters '", key, "' is not supported"));
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

bool IsReservedParameter(const std::string& key) {
  static const auto* reserved = new absl::flat_hash_set<std::string>{
      "sequence_id", "sequence_start", "sequence_end",      "priority",
      "timeout",     "headers",        "binary_data_output"};
  return reserved->contains(key) || absl::StartsWith(key, "triton_");
}

}  // namespace

absl::StatusOr<InferJob> ParseInferRequest(const serving::ServedModel& model,
                                           const ModelInferRequest& request,
                                           bool streaming_rpc) {
  InferJob job;
  if (request.id().size() > serving::kMaxRequestIdBytes) {
    // Every later message names the request: refuse before echoing it.
    return absl::InvalidArgumentError(
        absl::StrCat("request id '", serving::Quote(request.id()), "' is ",
                     request.id().size(), " bytes, more than the limit of ",
                     serving::kMaxRequestIdBytes));
  }
  job.id = request.id().empty() ? NewInferId() : request.id();
  job.raw = kserve::UsesRaw(request);
  job.streaming_rpc = streaming_rpc;
  job.stream = streaming_rpc;
  absl::Status name = serving::CheckModelName(model, request.model_name());
  if (!name.ok()) return Invalid(job, name.message());
  if (!request.model_version().empty() &&
      request.model_version() != kModelVersion) {
    return Invalid(
        job,
        absl::StrCat("model '", model.name, "' has no version '",
                     request.model_version(), "' (only ", kModelVersion, ")"));
  }
  int ids_index = -1;
  int text_index = -1;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const std::string& input = request.inputs(i).name();
    if (input == "input_ids") {
      ids_index = i;
    } else if (input == "text_input") {
      text_index = i;
    }
  }
  if ((ids_index < 0) == (text_index < 0)) {
    return Invalid(
        job, "send exactly one of the inputs 'input_ids' and 'text_input'");
  }
  auto prefixed = [&job](const absl::Status& s) {
    return s.ok() ? s : Invalid(job, s.message());
  };

  if (ids_index >= 0) {
    job.logits = true;
    const auto& t = request.inputs(ids_index);
    if (t.shape_size() != 2 || t.shape(0) < 1 || t.shape(1) < 1) {
      return Invalid(
          job, absl::StrCat("input 'input_ids' must have shape [batch, seq] "
                            "with both at least 1, got [",
                            absl::StrJoin(t.shape(), ","), "]"));
    }
    absl::StatusOr<std::vector<int64_t>> ids =
        kserve::ReadIntegers(request, ids_index);
    if (!ids.ok()) return prefixed(ids.status());
    const int64_t batch = t.shape(0);
    const int64_t seq = t.shape(1);
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<int32_t> row;
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t v = (*ids)[b * seq + i];
        if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
          return Invalid(job, absl::StrCat("input_ids[", b, "][", i, "] = ", v,
                                           " is outside the vocabulary"));
        }
        row.push_back(static_cast<int32_t>(v));
      }
      job.rows.push_back(std::move(row));
    }
    for (const auto& out : request.outputs()) {
      if (out.name() != "logits") {
        return Invalid(job, absl::StrCat("unknown output '", out.name(),
                                         "' for input_ids (only 'logits')"));
      }
    }
    for (int i = 0; i < request.inputs_size(); ++i) {
      if (i != ids_index) {
        return Invalid(
            job, absl::StrCat("unexpected input '", request.inputs(i).name(),
                              "' next to 'input_ids'"));
      }
    }
    job.outputs = {"logits"};
    return job;
  }

  // text_input: the prompt.
  serving::GenerationInput input;
  {
    const auto& t = request.inputs(text_index);
    absl::StatusOr<std::vector<std::string>> text =
        kserve::ReadBytes(request, text_index);
    if (!text.ok()) return prefixed(text.status());
    if (text->size() != 1) {
      return Invalid(
          job, absl::StrCat("input 'text_input' must hold one string, got ",
                            text->size(), " (shape [",
                            absl::StrJoin(t.shape(), ","), "])"));
    }
    if ((*text)[0].empty()) return Invalid(job, "input 'text_input' is empty");
    input.text = std::move((*text)[0]);
  }
  // Settings: the request's parameters, then input tensors.
  for (const auto& [key, param] : request.parameters()) {
    if (IsReservedParameter(key)) continue;
    if (key == "stop") {
      if (param.parameter_choice_case() !=
          inference::InferParameter::kStringParam) {
        return Invalid(job, "parameter 'stop' must be a string");
      }
      input.sampling.stop_strings.push_back(param.string_param());
      continue;
    }
    // Clients attach parameters of their own; only settings are ours.
    if (!IsSetting(key)) continue;
    double v;
    if (param.parameter_choice_case() ==
        inference::InferParameter::kBoolParam) {
      v = param.bool_param() ? 1 : 0;
    } else {
      absl::StatusOr<std::optional<double>> n =
          kserve::NumberParameter(request.parameters(), key);
      if (!n.ok()) return prefixed(n.status());
      v = **n;
    }
    absl::Status applied = ApplySetting(key, v, &input, &job.stream);
    if (!applied.ok()) return prefixed(applied);
  }
  for (int i = 0; i < request.inputs_size(); ++i) {
    if (i == text_index) continue;
    const auto& t = request.inputs(i);
    if (t.name() == "sampling_parameters") {
      absl::StatusOr<std::vector<std::string>> json =
          kserve::ReadBytes(request, i);
      if (!json.ok()) return prefixed(json.status());
      if (json->size() != 1) {
        return Invalid(job,
                       "input 'sampling_parameters' must hold one JSON string");
      }
      absl::Status applied = ApplySamplingJson((*json)[0], &input, &job.stream);
      if (!applied.ok()) return prefixed(applied);
      continue;
    }
    if (t.name() == "stop_words" || t.name() == "stop") {
      absl::StatusOr<std::vector<std::string>> words =
          kserve::ReadBytes(request, i);
      if (!words.ok()) return prefixed(words.status());
      for (auto& w : *words)
        input.sampling.stop_strings.push_back(std::move(w));
      continue;
    }
    if (t.name() == "exclude_input_in_output") continue;  // never included
    if (!IsSetting(t.name())) {
      return Invalid(job, absl::StrCat("unknown input '", t.name(), "'"));
    }
    absl::StatusOr<double> v = kserve::ReadScalar(request, i);
    if (!v.ok()) return prefixed(v.status());
    absl::Status applied = ApplySetting(t.name(), *v, &input, &job.stream);
    if (!applied.ok()) return prefixed(applied);
  }
  absl::StatusOr<std::optional<bool>> empty_final = kserve::BoolParameter(
      request.parameters(), "triton_enable_empty_final_response");
  if (!empty_final.ok()) return prefixed(empty_final.status());
  job.empty_final_response = empty_final->value_or(false);
  if (!streaming_rpc) job.stream = false;  // unary: the whole text at once

  static const auto* known = new absl::flat_hash_set<std::string>{
      "text_output", "finish_reason", "num_input_tokens", "num_output_tokens",
      "output_ids"};
  for (const auto& out : request.outputs()) {
    if (!known->contains(out.name())) {
      return Invalid(job, absl::StrCat("unknown output '", out.name(),
                                       "' for text_input"));
    }
    job.outputs.push_back(out.name());
  }
  if (job.outputs.empty()) job.outputs = {"text_output"};
  // The text prompt and its settings go through the serving core's one
  // validation, as the other front ends' do.
  input.request_id = job.id;
  input.model = request.model_name();
  ASSIGN_OR_RETURN(job.generation,
                   serving::PrepareRequest(model, std::move(input)));
  return job;
}

}  // namespace ringmoe::server

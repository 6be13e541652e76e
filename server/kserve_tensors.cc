#include "server/kserve_tensors.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace ringmoe::server::kserve {
namespace {

using InputTensor = ModelInferRequest::InferInputTensor;

// Raw tensor data is little-endian; memcpy is exact on the little-endian
// hosts ringmoe builds for (x86-64, arm64).
template <typename T>
std::vector<T> FromRaw(absl::string_view raw) {
  std::vector<T> out(raw.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), raw.data(), out.size() * sizeof(T));
  return out;
}

template <typename T>
std::string ToRaw(absl::Span<const T> values) {
  std::string out(values.size() * sizeof(T), '\0');
  if (!values.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

int64_t ElementSize(absl::string_view datatype) {
  if (datatype == "BOOL" || datatype == "UINT8" || datatype == "INT8") return 1;
  if (datatype == "UINT16" || datatype == "INT16" || datatype == "FP16" ||
      datatype == "BF16") {
    return 2;
  }
  if (datatype == "UINT32" || datatype == "INT32" || datatype == "FP32")
    return 4;
  if (datatype == "UINT64" || datatype == "INT64" || datatype == "FP64")
    return 8;
  return 0;  // BYTES or unknown
}

bool HasContents(const InputTensor& t) {
  const auto& c = t.contents();
  return c.bool_contents_size() || c.int_contents_size() ||
         c.int64_contents_size() || c.uint_contents_size() ||
         c.uint64_contents_size() || c.fp32_contents_size() ||
         c.fp64_contents_size() || c.bytes_contents_size();
}

// The raw bytes of input `index`, after checking that the request's raw
// entries line up with its inputs.
absl::StatusOr<absl::string_view> RawOf(const ModelInferRequest& request,
                                        int index) {
  const InputTensor& t = request.inputs(index);
  if (request.raw_input_contents_size() != request.inputs_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "raw_input_contents has ", request.raw_input_contents_size(),
        " entries for ", request.inputs_size(), " inputs; send one per input"));
  }
  if (HasContents(t)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", t.name(),
                     "' has data both in contents and in raw_input_contents"));
  }
  return absl::string_view(request.raw_input_contents(index));
}

absl::Status CheckCount(const InputTensor& t, int64_t have, int64_t want) {
  if (have == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "input '", t.name(), "' has ", have, " elements, its shape says ", want));
}

}  // namespace

bool UsesRaw(const ModelInferRequest& request) {
  return request.raw_input_contents_size() > 0;
}

absl::StatusOr<int64_t> ElementCount(absl::string_view tensor,
                                     absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensor, "' has a negative dimension ", d));
    }
    if (d > 0 && n > (int64_t{1} << 40) / d) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensor, "' has too many elements"));
    }
    n *= d;
  }
  return n;
}

absl::StatusOr<std::vector<int64_t>> ReadIntegers(
    const ModelInferRequest& request, int index) {
  const InputTensor& t = request.inputs(index);
  ASSIGN_OR_RETURN(const int64_t count, ElementCount(t.name(), t.shape()));
  const bool is32 = t.datatype() == "INT32";
  if (!is32 && t.datatype() != "INT64") {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", t.name(), "' must be INT32 or INT64, not ", t.datatype()));
  }
  std::vector<int64_t> out;
  if (UsesRaw(request)) {
    ASSIGN_OR_RETURN(const absl::string_view raw, RawOf(request, index));
    const int64_t size = is32 ? 4 : 8;
    if (static_cast<int64_t>(raw.size()) != count * size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", t.name(), "' has ", raw.size(),
          " raw bytes, its shape and ", t.datatype(), " need ", count * size));
    }
    if (is32) {
      for (int32_t v : FromRaw<int32_t>(raw)) out.push_back(v);
    } else {
      out = FromRaw<int64_t>(raw);
    }
    return out;
  }
  if (is32) {
    out.assign(t.contents().int_contents().begin(),
               t.contents().int_contents().end());
  } else {
    out.assign(t.contents().int64_contents().begin(),
               t.contents().int64_contents().end());
  }
  RETURN_IF_ERROR(CheckCount(t, static_cast<int64_t>(out.size()), count));
  return out;
}

absl::StatusOr<std::vector<std::string>> DecodeRawBytes(absl::string_view raw) {
  std::vector<std::string> out;
  while (!raw.empty()) {
    if (raw.size() < 4) {
      return absl::InvalidArgumentError(
          "raw BYTES data ends inside a length prefix");
    }
    uint32_t len;
    std::memcpy(&len, raw.data(), 4);
    raw.remove_prefix(4);
    if (len > raw.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw BYTES element of ", len,
                       " bytes runs past the data (", raw.size(), " left)"));
    }
    out.emplace_back(raw.substr(0, len));
    raw.remove_prefix(len);
  }
  return out;
}

std::string EncodeRawBytes(const std::vector<std::string>& values) {
  std::string out;
  for (const std::string& v : values) {
    const uint32_t len = static_cast<uint32_t>(v.size());
    out.append(reinterpret_cast<const char*>(&len), 4);
    out.append(v);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ReadBytes(
    const ModelInferRequest& request, int index) {
  const InputTensor& t = request.inputs(index);
  if (t.datatype() != "BYTES") {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", t.name(), "' must be BYTES, not ", t.datatype()));
  }
  ASSIGN_OR_RETURN(const int64_t count, ElementCount(t.name(), t.shape()));
  std::vector<std::string> out;
  if (UsesRaw(request)) {
    ASSIGN_OR_RETURN(const absl::string_view raw, RawOf(request, index));
    absl::StatusOr<std::vector<std::string>> decoded = DecodeRawBytes(raw);
    if (!decoded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", t.name(), "': ", decoded.status().message()));
    }
    out = *std::move(decoded);
  } else {
    out.assign(t.contents().bytes_contents().begin(),
               t.contents().bytes_contents().end());
  }
  RETURN_IF_ERROR(CheckCount(t, static_cast<int64_t>(out.size()), count));
  return out;
}

absl::StatusOr<double> ReadScalar(const ModelInferRequest& request, int index) {
  const InputTensor& t = request.inputs(index);
  ASSIGN_OR_RETURN(const int64_t count, ElementCount(t.name(), t.shape()));
  if (count != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", t.name(), "' must hold one value, its shape holds ", count));
  }
  const std::string& type = t.datatype();
  if (UsesRaw(request)) {
    ASSIGN_OR_RETURN(const absl::string_view raw, RawOf(request, index));
    const int64_t size = ElementSize(type);
    if (size == 0 || type == "FP16" || type == "BF16") {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", t.name(),
                       "' must be BOOL, an integer or FP32/FP64, not ", type));
    }
    if (static_cast<int64_t>(raw.size()) != size) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", t.name(), "' has ", raw.size(),
                       " raw bytes, ", type, " needs ", size));
    }
    if (type == "BOOL" || type == "UINT8") return FromRaw<uint8_t>(raw)[0];
    if (type == "INT8") return FromRaw<int8_t>(raw)[0];
    if (type == "INT16") return FromRaw<int16_t>(raw)[0];
    if (type == "UINT16") return FromRaw<uint16_t>(raw)[0];
    if (type == "INT32") return FromRaw<int32_t>(raw)[0];
    if (type == "UINT32") return FromRaw<uint32_t>(raw)[0];
    if (type == "INT64") return static_cast<double>(FromRaw<int64_t>(raw)[0]);
    if (type == "UINT64") return static_cast<double>(FromRaw<uint64_t>(raw)[0]);
    if (type == "FP32") return FromRaw<float>(raw)[0];
    return FromRaw<double>(raw)[0];
  }
  const auto& c = t.contents();
  if (type == "BOOL" && c.bool_contents_size() == 1)
    return c.bool_contents(0) ? 1.0 : 0.0;
  if ((type == "INT8" || type == "INT16" || type == "INT32") &&
      c.int_contents_size() == 1) {
    return c.int_contents(0);
  }
  if (type == "INT64" && c.int64_contents_size() == 1) {
    return static_cast<double>(c.int64_contents(0));
  }
  if ((type == "UINT8" || type == "UINT16" || type == "UINT32") &&
      c.uint_contents_size() == 1) {
    return c.uint_contents(0);
  }
  if (type == "UINT64" && c.uint64_contents_size() == 1) {
    return static_cast<double>(c.uint64_contents(0));
  }
  if (type == "FP32" && c.fp32_contents_size() == 1) return c.fp32_contents(0);
  if (type == "FP64" && c.fp64_contents_size() == 1) return c.fp64_contents(0);
  return absl::InvalidArgumentError(absl::StrCat(
      "input '", t.name(), "' (", type,
      ") must hold one value in the contents field of its datatype"));
}

absl::StatusOr<std::optional<double>> NumberParameter(
    const ParameterMap& parameters, const std::string& key) {
  auto it = parameters.find(key);
  if (it == parameters.end()) return std::nullopt;
  const InferParameter& p = it->second;
  switch (p.parameter_choice_case()) {
    case InferParameter::kInt64Param:
      return static_cast<double>(p.int64_param());
    case InferParameter::kUint64Param:
      return static_cast<double>(p.uint64_param());
    case InferParameter::kDoubleParam:
      return p.double_param();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", key, "' must be a number"));
  }
}

absl::StatusOr<std::optional<bool>> BoolParameter(
    const ParameterMap& parameters, const std::string& key) {
  auto it = parameters.find(key);
  if (it == parameters.end()) return std::nullopt;
  if (it->second.parameter_choice_case() != InferParameter::kBoolParam) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", key, "' must be a bool"));
  }
  return it->second.bool_param();
}

absl::StatusOr<std::optional<std::string>> StringParameter(
    const ParameterMap& parameters, const std::string& key) {
  auto it = parameters.find(key);
  if (it == parameters.end()) return std::nullopt;
  if (it->second.parameter_choice_case() != InferParameter::kStringParam) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", key, "' must be a string"));
  }
  return it->second.string_param();
}

namespace {

ModelInferResponse::InferOutputTensor* NewOutput(
    ModelInferResponse* response, const std::string& name, const char* datatype,
    const std::vector<int64_t>& shape) {
  auto* out = response->add_outputs();
  out->set_name(name);
  out->set_datatype(datatype);
  out->mutable_shape()->Add(shape.begin(), shape.end());
  return out;
}

}  // namespace

void AddFp32Output(ModelInferResponse* response, const std::string& name,
                   const std::vector<int64_t>& shape,
                   absl::Span<const float> values, bool raw) {
  auto* out = NewOutput(response, name, "FP32", shape);
  if (raw) {
    response->add_raw_output_contents(ToRaw(values));
  } else {
    out->mutable_contents()->mutable_fp32_contents()->Add(values.begin(),
                                                          values.end());
  }
}

void AddInt32Output(ModelInferResponse* response, const std::string& name,
                    const std::vector<int64_t>& shape,
                    absl::Span<const int32_t> values, bool raw) {
  auto* out = NewOutput(response, name, "INT32", shape);
  if (raw) {
    response->add_raw_output_contents(ToRaw(values));
  } else {
    out->mutable_contents()->mutable_int_contents()->Add(values.begin(),
                                                         values.end());
  }
}

void AddBytesOutput(ModelInferResponse* response, const std::string& name,
                    const std::vector<int64_t>& shape,
                    const std::vector<std::string>& values, bool raw) {
  auto* out = NewOutput(response, name, "BYTES", shape);
  if (raw) {
    response->add_raw_output_contents(EncodeRawBytes(values));
  } else {
    for (const std::string& v : values)
      out->mutable_contents()->add_bytes_contents(v);
  }
}

}  // namespace ringmoe::server::kserve

// Reading and writing KServe v2 tensors: data in the typed `contents` or in
// `raw_input_contents` (little-endian, row-major; BYTES elements each a
// 4-byte little-endian length and the bytes), and request parameters.
// Every error is INVALID_ARGUMENT naming the tensor or parameter.
#ifndef RINGMOE_SERVER_KSERVE_TENSORS_H_
#define RINGMOE_SERVER_KSERVE_TENSORS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/map.h"
#include "proto/grpc_service.pb.h"

namespace ringmoe::server::kserve {

using ::inference::InferParameter;
using ::inference::ModelInferRequest;
using ::inference::ModelInferResponse;
using ParameterMap = ::google::protobuf::Map<std::string, InferParameter>;

// Whether the request carries its data in raw_input_contents (answer in
// raw form then too).
bool UsesRaw(const ModelInferRequest& request);

// Product of the dimensions; INVALID_ARGUMENT on a negative dimension.
absl::StatusOr<int64_t> ElementCount(absl::string_view tensor,
                                     absl::Span<const int64_t> shape);

// Input `index` as integers: datatype INT32 or INT64.
absl::StatusOr<std::vector<int64_t>> ReadIntegers(
    const ModelInferRequest& request, int index);
// Input `index` as BYTES elements.
absl::StatusOr<std::vector<std::string>> ReadBytes(
    const ModelInferRequest& request, int index);
// Input `index` as one number (BOOL, integer or floating-point datatypes,
// exactly one element).
absl::StatusOr<double> ReadScalar(const ModelInferRequest& request, int index);

// A parameter as a number (int64, uint64 or double) or a bool; nullopt when
// absent, INVALID_ARGUMENT when of another kind.
absl::StatusOr<std::optional<double>> NumberParameter(
    const ParameterMap& parameters, const std::string& key);
absl::StatusOr<std::optional<bool>> BoolParameter(
    const ParameterMap& parameters, const std::string& key);
absl::StatusOr<std::optional<std::string>> StringParameter(
    const ParameterMap& parameters, const std::string& key);

// Appends an output tensor, in raw form or in `contents`.
void AddFp32Output(ModelInferResponse* response, const std::string& name,
                   const std::vector<int64_t>& shape,
                   absl::Span<const float> values, bool raw);
void AddInt32Output(ModelInferResponse* response, const std::string& name,
                    const std::vector<int64_t>& shape,
                    absl::Span<const int32_t> values, bool raw);
void AddBytesOutput(ModelInferResponse* response, const std::string& name,
                    const std::vector<int64_t>& shape,
                    const std::vector<std::string>& values, bool raw);

// Inverse of the raw BYTES encoding; for tests and clients.
absl::StatusOr<std::vector<std::string>> DecodeRawBytes(absl::string_view raw);
std::string EncodeRawBytes(const std::vector<std::string>& values);

}  // namespace ringmoe::server::kserve

#endif  // RINGMOE_SERVER_KSERVE_TENSORS_H_

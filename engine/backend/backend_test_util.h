// What the backend tests share: random data, host views of it, weights in
// every storage format built from random stored bytes, and the
// double-precision references the backends are held to. The references
// decode stored bytes from kernels/weight_format.h's description alone,
// never through the kernels' own readers, so a decoding bug cannot hide
// in both.
#ifndef RINGMOE_ENGINE_BACKEND_BACKEND_TEST_UTIL_H_
#define RINGMOE_ENGINE_BACKEND_BACKEND_TEST_UTIL_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/backend/weight.h"

namespace ringmoe::backend {

// n values from N(0, sd²).
std::vector<float> Random(int64_t n, std::mt19937* rng, float sd = 1.f);

// A host f32 weight over `data` ([rows, cols]).
Weight F32Weight(const std::vector<float>& data, int64_t rows, int64_t cols);

// `v` as a host tensor [rows, cols].
Tensor Of(std::vector<float>& v, int64_t rows, int64_t cols);

// Every got[i] within tolerance · (1 + |want[i]|) of want[i] (NaN never
// is); stops at the first that is not.
void ExpectNear(const std::vector<float>& got, const std::vector<double>& want,
                double tolerance, const std::string& what);

// A storage format and its scaling parameters.
struct WeightFormat {
  WeightType type = WeightType::kF32;
  int32_t group_size = 0;  // kInt8, kInt4
  int32_t block_rows = 0;  // kFp8E4M3
  int32_t block_cols = 0;  // kFp8E4M3
};

// "int4/g64", "fp8_e4m3/16x32", "bf16", ...
std::string FormatName(const WeightFormat& format);

// Every format the backends read, int8 and int4 with groups of 32 and 64
// and fp8 with two block shapes (one narrower than the widest load).
std::vector<WeightFormat> AllWeightFormats();

// A host weight whose stored bytes (data, scales, exponents) are random
// and valid for its format, and the values they stand for. Move-only:
// `weight` points into the vectors.
struct TestWeight {
  TestWeight() = default;
  TestWeight(TestWeight&&) = default;
  TestWeight& operator=(TestWeight&&) = default;
  TestWeight(const TestWeight&) = delete;
  TestWeight& operator=(const TestWeight&) = delete;

  Weight weight;
  std::vector<double> values;  // [rows, cols]
  std::vector<uint8_t> bytes;
  std::vector<uint16_t> scales;  // f16 bits
  std::vector<float> block_scales;
  std::vector<uint8_t> exponents;
};

// Values of magnitude up to about `scale` (to within the format's steps).
// Padding follows the format: zero values for int8 and int4; random codes
// for mxfp4, which a product must not read.
TestWeight MakeTestWeight(const WeightFormat& format, int64_t rows,
                          int64_t cols, std::mt19937* rng);

// The values of a host weight ([rows, cols]), decoded from its bytes.
std::vector<double> DecodeWeight(const Weight& w);

// Activations [n, cols] that every backend multiplies exactly: random
// integers in [-levels, levels] over levels + 1 (a power of two), with the
// first value of each block of 32 columns of a row ±levels / (levels + 1).
// The CPU's int4, int8 and one-row mxfp4 products quantize activations per
// block of 32 columns to `levels` steps of the block's largest magnitude
// (127 for int4 and mxfp4, 32767 for int8), which such values pass
// unchanged; so every backend's products are held to the same
// float-accumulation tolerance against the exact activations.
std::vector<float> GridActivations(int64_t n, int64_t cols, int levels,
                                   std::mt19937* rng);
// The levels GridActivations needs for products against `type`.
int ActivationLevels(WeightType type);

// y[n, rows] = x[n, cols] · wᵀ with w the decoded [rows, cols] values.
std::vector<double> ReferenceProduct(const std::vector<float>& x, int64_t n,
                                     const std::vector<double>& w, int64_t rows,
                                     int64_t cols);

// One sequence's keys and values by position: [positions, kv_heads *
// head_dim] each.
struct HostKv {
  std::vector<float> keys;
  std::vector<float> values;
};

// The attention `job` describes (its shape, scale, window, sequence_of and
// position_of; not its pointers) of the host queries q over each
// sequence's keys and values; sinks empty or [heads].
std::vector<double> ReferenceAttention(const AttentionJob& job,
                                       const std::vector<float>& q,
                                       const std::vector<HostKv>& sequences,
                                       const std::vector<float>& sinks);

}  // namespace ringmoe::backend

#endif  // RINGMOE_ENGINE_BACKEND_BACKEND_TEST_UTIL_H_

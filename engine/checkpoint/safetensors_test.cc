#include "engine/checkpoint/safetensors.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/checkpoint/dtype.h"
#include "engine/checkpoint/test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmoe::checkpoint {
namespace {

using ::ringmoe::checkpoint::testing::RawSafetensors;
using ::ringmoe::checkpoint::testing::TempPath;
using ::ringmoe::checkpoint::testing::WriteFileOrDie;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kGolden[] = "tests/testdata/moe-tiny/mixtral/golden.safetensors";

template <typename T>
absl::string_view Bytes(const std::vector<T>& v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()),
                           v.size() * sizeof(T));
}

// Writes `contents` to a fresh file named `name` and opens it; returns the
// error message (empty on success).
std::string OpenError(absl::string_view name, const std::string& contents,
                      std::string* path_out = nullptr) {
  const std::string path = TempPath(name);
  WriteFileOrDie(path, contents);
  if (path_out != nullptr) *path_out = path;
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(path);
  return file.ok() ? "" : std::string(file.status().message());
}

std::string HeaderError(absl::string_view header, uint64_t data_size) {
  absl::StatusOr<std::vector<TensorEntry>> entries =
      ParseSafetensorsHeader(header, data_size, "mem.safetensors");
  return entries.ok() ? "" : std::string(entries.status().message());
}

TEST(DTypeTest, NamesRoundTrip) {
  for (DType dtype :
       {DType::kBool, DType::kU8, DType::kI8, DType::kF8E4M3, DType::kF8E5M2,
        DType::kU16, DType::kI16, DType::kF16, DType::kBF16, DType::kU32,
        DType::kI32, DType::kF32, DType::kU64, DType::kI64, DType::kF64}) {
    absl::StatusOr<DType> parsed = ParseDType(DTypeName(dtype));
    ASSERT_TRUE(parsed.ok()) << DTypeName(dtype);
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(DTypeSize(DType::kBF16), 2u);
  EXPECT_EQ(DTypeSize(DType::kF32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI32), 4u);
  EXPECT_EQ(DTypeSize(DType::kI8), 1u);
  EXPECT_EQ(DTypeSize(DType::kF64), 8u);
  EXPECT_EQ(DTypeName(DType::kF8E4M3), "F8_E4M3");
  EXPECT_FALSE(ParseDType("bf16").ok());
  EXPECT_THAT(std::string(ParseDType("F12").status().message()),
              HasSubstr("F12"));
}

TEST(SafetensorsFileTest, ReadsGoldenFile) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(kGolden);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 15u);
  EXPECT_EQ((*file)->metadata().at("num_cases"), "5");
  EXPECT_EQ((*file)->metadata().at("greedy_tokens"), "16");

  const TensorView* ids = (*file)->Find("case1.input_ids");
  ASSERT_NE(ids, nullptr);
  EXPECT_EQ(ids->dtype, DType::kI32);
  EXPECT_THAT(ids->shape, ElementsAre(5));
  EXPECT_EQ(ids->file_path, kGolden);
  absl::StatusOr<std::vector<int64_t>> id_values = CopyAsInt64(*ids);
  ASSERT_TRUE(id_values.ok()) << id_values.status();
  // The README: case 1 starts with the edge ids 0, 511, 1, 510.
  EXPECT_EQ((*id_values)[0], 0);
  EXPECT_EQ((*id_values)[1], 511);

  absl::StatusOr<const TensorView*> logits = (*file)->Get("case4.logits");
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ((*logits)->dtype, DType::kF32);
  EXPECT_THAT((*logits)->shape, ElementsAre(48, 512));
  EXPECT_EQ((*logits)->num_bytes, 48u * 512 * 4);
  EXPECT_EQ((*logits)->NumElements(), 48 * 512);
  absl::StatusOr<std::vector<float>> values = CopyAsFloat32(**logits);
  ASSERT_TRUE(values.ok()) << values.status();
  for (float v : *values) ASSERT_TRUE(std::isfinite(v));

  // file_offset is absolute: pread-style access sees the same bytes.
  const auto* base =
      (*file)->tensors().front().data - (*file)->tensors().front().file_offset;
  EXPECT_EQ(base + (*logits)->file_offset, (*logits)->data);

  absl::StatusOr<const TensorView*> missing = (*file)->Get("case9.logits");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              AllOf(HasSubstr(kGolden), HasSubstr("case9.logits")));
  EXPECT_FALSE(CopyAsFloat32(*ids).ok());
  EXPECT_FALSE(CopyAsInt64(**logits).ok());
}

TEST(SafetensorsWriterTest, RoundTrips) {
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  const std::vector<int32_t> i32 = {0, 511, -7};
  const std::vector<uint16_t> bf16 = {0x3f80, 0xc000};  // 1.0, -2.0
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00};
  const std::vector<uint8_t> u8 = {1, 2, 3};
  const std::vector<int32_t> scalar = {42};
  const std::vector<TensorToWrite> tensors = {
      {"logits", DType::kF32, {2, 3}, Bytes(f32)},
      {"ids", DType::kI32, {3}, Bytes(i32)},
      {"odd", DType::kU8, {3}, Bytes(u8)},
      {"bf", DType::kBF16, {2}, Bytes(bf16)},
      {"half", DType::kF16, {5}, Bytes(f16)},
      {"empty", DType::kF32, {0, 4}, absl::string_view()},
      {"scalar", DType::kI32, {}, Bytes(scalar)},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"note", "\"q\"\n"}};
  const std::string path = TempPath("roundtrip.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, tensors, metadata).ok());

  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->metadata(), metadata);
  ASSERT_EQ((*file)->tensors().size(), tensors.size());
  for (const TensorToWrite& t : tensors) {
    const TensorView* view = (*file)->Find(t.name);
    ASSERT_NE(view, nullptr) << t.name;
    EXPECT_EQ(view->dtype, t.dtype);
    EXPECT_EQ(view->shape, t.shape);
    ASSERT_EQ(view->num_bytes, t.bytes.size());
    EXPECT_EQ(absl::string_view(reinterpret_cast<const char*>(view->data),
                                view->num_bytes),
              t.bytes)
        << t.name;
  }
  // The header is padded so the data section starts 8-byte aligned.
  EXPECT_EQ((*file)->Find("logits")->file_offset % 8, 0u);

  absl::StatusOr<std::vector<float>> bf = CopyAsFloat32(*(*file)->Find("bf"));
  ASSERT_TRUE(bf.ok());
  EXPECT_THAT(*bf, ElementsAre(1.0f, -2.0f));
  absl::StatusOr<std::vector<float>> half =
      CopyAsFloat32(*(*file)->Find("half"));
  ASSERT_TRUE(half.ok());
  EXPECT_THAT(*half, ElementsAre(1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f,
                                 std::numeric_limits<float>::infinity()));
  absl::StatusOr<std::vector<int64_t>> ids = CopyAsInt64(*(*file)->Find("ids"));
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(0, 511, -7));
  EXPECT_EQ((*file)->Find("scalar")->NumElements(), 1);
  EXPECT_EQ((*file)->Find("empty")->NumElements(), 0);

  // The in-memory path agrees with the file.
  absl::StatusOr<std::string> image = SerializeSafetensors(tensors, metadata);
  ASSERT_TRUE(image.ok());
  absl::StatusOr<SafetensorsLayout> layout =
      ParseSafetensorsBuffer(*image, "image");
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->tensors.size(), tensors.size());
  EXPECT_EQ(layout->data_offset, (*file)->Find("logits")->file_offset);
  EXPECT_EQ(image->size(), (*file)->file_size());
}

TEST(SafetensorsWriterTest, RejectsBadTensors) {
  const std::vector<float> four(4);
  const std::string path = TempPath("bad_write.safetensors");
  absl::Status status =
      WriteSafetensors(path, {{"a", DType::kF32, {2, 3}, Bytes(four)}});
  EXPECT_THAT(
      std::string(status.message()),
      AllOf(HasSubstr(path), HasSubstr("\"a\""), HasSubstr("needs 24 bytes")));
  status = WriteSafetensors(path, {{"a", DType::kF32, {4}, Bytes(four)},
                                   {"a", DType::kF32, {4}, Bytes(four)}});
  EXPECT_THAT(std::string(status.message()), HasSubstr("duplicate"));
  status =
      WriteSafetensors(path, {{"__metadata__", DType::kF32, {4}, Bytes(four)}});
  EXPECT_THAT(std::string(status.message()), HasSubstr("reserved"));
  status = WriteSafetensors(path, {{"a", DType::kF32, {-4}, Bytes(four)}});
  EXPECT_THAT(std::string(status.message()), HasSubstr("negative"));
  status = WriteSafetensors(path, {{"\xff", DType::kF32, {4}, Bytes(four)}});
  EXPECT_THAT(std::string(status.message()), HasSubstr("UTF-8"));
  status = WriteSafetensors("/nonexistent-dir/x.safetensors",
                            {{"a", DType::kF32, {4}, Bytes(four)}});
  EXPECT_THAT(std::string(status.message()), HasSubstr("/nonexistent-dir/"));
}

constexpr char kTwoTensors[] =
    R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
    R"("b":{"dtype":"I32","shape":[2],"data_offsets":[16,24]}})";

TEST(SafetensorsBadFileTest, TooShortFiles) {
  EXPECT_THAT(OpenError("empty.safetensors", ""),
              AllOf(HasSubstr("empty.safetensors"), HasSubstr("0 bytes"),
                    HasSubstr("too short")));
  EXPECT_THAT(OpenError("five.safetensors", "12345"),
              AllOf(HasSubstr("five.safetensors"), HasSubstr("5 bytes")));
}

TEST(SafetensorsBadFileTest, TruncatedData) {
  const std::string whole = RawSafetensors(kTwoTensors, 24);
  // Cutting the data leaves "b" pointing past the end.
  EXPECT_THAT(
      OpenError("truncated.safetensors", whole.substr(0, whole.size() - 4)),
      AllOf(HasSubstr("truncated.safetensors"), HasSubstr("\"b\""),
            HasSubstr("past the end of the data section (20 bytes)")));
  // Cutting into the header leaves the length pointing past the end.
  EXPECT_THAT(OpenError("truncated_header.safetensors", whole.substr(0, 40)),
              AllOf(HasSubstr("truncated_header.safetensors"),
                    HasSubstr("runs past the end of the file (40 bytes)")));
}

TEST(SafetensorsBadFileTest, HeaderLength) {
  std::string whole = RawSafetensors(kTwoTensors, 24);
  whole[0] = static_cast<char>(whole[0] + 100);
  EXPECT_THAT(OpenError("long_header.safetensors", whole),
              AllOf(HasSubstr("long_header.safetensors"),
                    HasSubstr("runs past the end of the file")));
  const uint64_t huge = uint64_t{1} << 63;
  std::memcpy(whole.data(), &huge, 8);
  EXPECT_THAT(OpenError("huge_header.safetensors", whole),
              AllOf(HasSubstr("huge_header.safetensors"),
                    HasSubstr("exceeds the limit")));
}

TEST(SafetensorsBadFileTest, MalformedJson) {
  EXPECT_THAT(
      OpenError("malformed.safetensors",
                RawSafetensors(R"({"a":{"dtype":"F32",)", 0)),
      AllOf(HasSubstr("malformed.safetensors"), HasSubstr("parse error")));
  EXPECT_THAT(
      OpenError("array.safetensors", RawSafetensors("[]", 0)),
      AllOf(HasSubstr("array.safetensors"), HasSubstr("not an object")));
  EXPECT_THAT(
      OpenError("nul.safetensors", RawSafetensors(std::string("{}\0", 3), 0)),
      HasSubstr("nul.safetensors"));
  EXPECT_THAT(
      HeaderError(std::string(100000, '[') + std::string(100000, ']'), 0),
      HasSubstr("nested deeper"));
  EXPECT_THAT(HeaderError("{\"a\":\"\xff\"}", 0), HasSubstr("parse error"));
}

TEST(SafetensorsBadFileTest, OffsetPastEnd) {
  std::string path;
  const std::string error = OpenError(
      "past_end.safetensors",
      RawSafetensors(
          R"({"w":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})", 10),
      &path);
  EXPECT_THAT(error, AllOf(HasSubstr(path), HasSubstr("\"w\""),
                           HasSubstr("[4, 12]"), HasSubstr("10 bytes")));
}

TEST(SafetensorsBadFileTest, OverlappingRanges) {
  const std::string error =
      OpenError("overlap.safetensors",
                RawSafetensors(
                    R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                    16));
  EXPECT_THAT(error, AllOf(HasSubstr("overlap.safetensors"), HasSubstr("\"a\""),
                           HasSubstr("\"b\""), HasSubstr("overlap")));
}

TEST(SafetensorsBadFileTest, WrongByteCount) {
  const std::string error = OpenError(
      "byte_count.safetensors",
      RawSafetensors(
          R"({"w":{"dtype":"BF16","shape":[2,4],"data_offsets":[0,8]}})", 8));
  EXPECT_THAT(error,
              AllOf(HasSubstr("byte_count.safetensors"), HasSubstr("\"w\""),
                    HasSubstr("BF16 [2, 4]"), HasSubstr("needs 16 bytes")));
}

TEST(SafetensorsBadFileTest, DuplicateName) {
  const std::string error = OpenError(
      "duplicate.safetensors",
      RawSafetensors(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                     R"("w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                     8));
  EXPECT_THAT(error, AllOf(HasSubstr("duplicate.safetensors"),
                           HasSubstr("duplicate key \"w\"")));
  EXPECT_THAT(
      HeaderError(
          R"({"w":{"dtype":"U8","dtype":"I8","shape":[4],"data_offsets":[0,4]}})",
          4),
      AllOf(HasSubstr("duplicate key \"dtype\""), HasSubstr("\"w\"")));
}

TEST(SafetensorsBadFileTest, UnknownDType) {
  const std::string error = OpenError(
      "dtype.safetensors",
      RawSafetensors(
          R"({"w":{"dtype":"F12","shape":[4],"data_offsets":[0,4]}})", 4));
  EXPECT_THAT(error, AllOf(HasSubstr("dtype.safetensors"), HasSubstr("\"w\""),
                           HasSubstr("unknown safetensors dtype \"F12\"")));
}

TEST(SafetensorsHeaderTest, RejectsBadEntries) {
  const auto entry = [](absl::string_view body) {
    return absl::StrCat(R"({"w":{)", body, "}}");
  };
  EXPECT_THAT(HeaderError(entry(R"("shape":[4],"data_offsets":[0,4])"), 4),
              AllOf(HasSubstr("mem.safetensors"), HasSubstr("\"w\""),
                    HasSubstr("missing \"dtype\"")));
  EXPECT_THAT(HeaderError(entry(R"("dtype":"U8","data_offsets":[0,4])"), 4),
              HasSubstr("missing \"shape\""));
  EXPECT_THAT(HeaderError(entry(R"("dtype":"U8","shape":[4])"), 4),
              HasSubstr("missing \"data_offsets\""));
  EXPECT_THAT(
      HeaderError(entry(R"("dtype":8,"shape":[4],"data_offsets":[0,4])"), 4),
      HasSubstr("not a string"));
  EXPECT_THAT(
      HeaderError(entry(R"("dtype":"U8","shape":[-4],"data_offsets":[0,4])"),
                  4),
      HasSubstr("negative"));
  EXPECT_THAT(
      HeaderError(entry(R"("dtype":"U8","shape":[4.0],"data_offsets":[0,4])"),
                  4),
      HasSubstr("not a non-negative integer"));
  EXPECT_THAT(
      HeaderError(entry(R"("dtype":"U8","shape":"4","data_offsets":[0,4])"), 4),
      HasSubstr("not an array"));
  EXPECT_THAT(
      HeaderError(entry(R"("dtype":"U8","shape":[4],"data_offsets":[0])"), 4),
      HasSubstr("two offsets"));
  EXPECT_THAT(
      HeaderError(entry(R"("dtype":"U8","shape":[0],"data_offsets":[4,0])"), 4),
      HasSubstr("end before they begin"));
  EXPECT_THAT(
      HeaderError(
          entry(
              R"("dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,4])"),
          4),
      HasSubstr("overflows"));
  EXPECT_THAT(
      HeaderError(
          entry(
              R"("dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4])"),
          4),
      HasSubstr("overflows"));
  EXPECT_THAT(
      HeaderError(
          entry(
              R"("dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,4])"),
          4),
      HasSubstr("too large"));
  EXPECT_THAT(
      HeaderError(
          entry(
              R"("dtype":"U8","shape":[4],"data_offsets":[0,18446744073709551616])"),
          4),
      HasSubstr("not a non-negative integer"));
  EXPECT_THAT(HeaderError(R"({"w":[1,2]})", 0), HasSubstr("not an object"));
  EXPECT_THAT(HeaderError(R"({"__metadata__":{"a":1}})", 0),
              AllOf(HasSubstr("__metadata__"), HasSubstr("\"a\"")));
  EXPECT_THAT(HeaderError(R"({"__metadata__":[]})", 0),
              HasSubstr("__metadata__"));
  EXPECT_THAT(HeaderError(std::string(kMaxHeaderBytes + 1, ' '), 0),
              HasSubstr("exceeds the limit"));
}

TEST(SafetensorsHeaderTest, AcceptsGapsEmptyTensorsAndPadding) {
  std::map<std::string, std::string> metadata;
  absl::StatusOr<std::vector<TensorEntry>> entries = ParseSafetensorsHeader(
      R"({"z":{"dtype":"F32","shape":[1],"data_offsets":[8,12]},)"
      R"("e":{"dtype":"F32","shape":[0],"data_offsets":[10,10]},)"
      R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":1},)"
      R"("__metadata__":{"k":"v"}}      )",
      16, "mem", &metadata);
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 3u);
  // Ordered by offset, not by name.
  EXPECT_EQ((*entries)[0].name, "a");
  EXPECT_EQ((*entries)[1].name, "z");
  EXPECT_EQ((*entries)[2].name, "e");
  EXPECT_EQ(metadata.at("k"), "v");
  EXPECT_TRUE(ParseSafetensorsHeader("{}", 0, "mem").ok());
  EXPECT_TRUE(
      ParseSafetensorsHeader(R"({"__metadata__":null})", 0, "mem").ok());
}

TEST(SafetensorsFileTest, OpenErrors) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> file =
      SafetensorsFile::Open(TempPath("does-not-exist.safetensors"));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()),
              HasSubstr("does-not-exist.safetensors"));
  file = SafetensorsFile::Open("tests/testdata/moe-tiny");
  EXPECT_THAT(std::string(file.status().message()),
              HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace ringmoe::checkpoint

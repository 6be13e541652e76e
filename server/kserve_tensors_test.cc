#include "server/kserve_tensors.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe::server::kserve {
namespace {

ModelInferRequest WithInput(const char* name, const char* type,
                            std::vector<int64_t> shape) {
  ModelInferRequest r;
  auto* t = r.add_inputs();
  t->set_name(name);
  t->set_datatype(type);
  for (int64_t d : shape) t->add_shape(d);
  return r;
}

TEST(KServeTensorsTest, ReadsIntegersFromContentsAndRaw) {
  ModelInferRequest r = WithInput("input_ids", "INT64", {1, 3});
  for (int64_t v : {5, 6, 7})
    r.mutable_inputs(0)->mutable_contents()->add_int64_contents(v);
  EXPECT_EQ(*ReadIntegers(r, 0), (std::vector<int64_t>{5, 6, 7}));

  ModelInferRequest raw = WithInput("input_ids", "INT32", {1, 2});
  const int32_t data[] = {9, -1};
  raw.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(data), 8));
  EXPECT_EQ(*ReadIntegers(raw, 0), (std::vector<int64_t>{9, -1}));
}

TEST(KServeTensorsTest, RejectsWrongTypeCountAndMixedForms) {
  ModelInferRequest fp = WithInput("input_ids", "FP32", {1, 1});
  EXPECT_EQ(ReadIntegers(fp, 0).status().code(),
            absl::StatusCode::kInvalidArgument);

  ModelInferRequest short_raw = WithInput("input_ids", "INT32", {1, 3});
  short_raw.add_raw_input_contents(std::string(8, '\0'));
  absl::Status s = ReadIntegers(short_raw, 0).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("input_ids"), absl::string_view::npos) << s;

  ModelInferRequest count = WithInput("input_ids", "INT32", {2, 2});
  count.mutable_inputs(0)->mutable_contents()->add_int_contents(1);
  EXPECT_EQ(ReadIntegers(count, 0).status().code(),
            absl::StatusCode::kInvalidArgument);

  ModelInferRequest negative = WithInput("input_ids", "INT32", {-1, 2});
  EXPECT_EQ(ReadIntegers(negative, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KServeTensorsTest, BytesRoundTripAndScalars) {
  const std::vector<std::string> values = {"37+485=", "", "x"};
  EXPECT_EQ(*DecodeRawBytes(EncodeRawBytes(values)), values);
  EXPECT_FALSE(DecodeRawBytes(std::string("\x05\x00\x00\x00"
                                          "ab",
                                          6))
                   .ok());

  ModelInferRequest text = WithInput("text_input", "BYTES", {1});
  text.add_raw_input_contents(EncodeRawBytes({"hi"}));
  EXPECT_EQ(*ReadBytes(text, 0), std::vector<std::string>{"hi"});

  ModelInferRequest scalar = WithInput("temperature", "FP32", {1});
  scalar.mutable_inputs(0)->mutable_contents()->add_fp32_contents(0.5f);
  EXPECT_EQ(*ReadScalar(scalar, 0), 0.5);
  ModelInferRequest flag = WithInput("stream", "BOOL", {1});
  flag.add_raw_input_contents(std::string("\x01", 1));
  EXPECT_EQ(*ReadScalar(flag, 0), 1.0);
}

TEST(KServeTensorsTest, OutputsInBothForms) {
  ModelInferResponse raw;
  const float logits[] = {1.5f, -2.0f};
  AddFp32Output(&raw, "logits", {1, 2}, logits, /*raw=*/true);
  ASSERT_EQ(raw.raw_output_contents_size(), 1);
  float back[2];
  std::memcpy(back, raw.raw_output_contents(0).data(), 8);
  EXPECT_EQ(back[1], -2.0f);
  EXPECT_EQ(raw.outputs(0).datatype(), "FP32");

  ModelInferResponse typed;
  AddBytesOutput(&typed, "text_output", {1}, {"522"}, /*raw=*/false);
  EXPECT_EQ(typed.outputs(0).contents().bytes_contents(0), "522");
  EXPECT_EQ(typed.raw_output_contents_size(), 0);
}

TEST(KServeTensorsTest, Parameters) {
  ParameterMap p;
  p["max_tokens"].set_int64_param(8);
  p["stream"].set_bool_param(true);
  p["name"].set_string_param("x");
  EXPECT_EQ(**NumberParameter(p, "max_tokens"), 8);
  EXPECT_FALSE(NumberParameter(p, "absent")->has_value());
  EXPECT_TRUE(**BoolParameter(p, "stream"));
  EXPECT_FALSE(NumberParameter(p, "name").ok());
  EXPECT_EQ(**StringParameter(p, "name"), "x");
}

}  // namespace
}  // namespace ringmoe::server::kserve

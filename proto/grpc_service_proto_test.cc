// Checks that the generated KServe v2 messages carry the field numbers that
// Triton's clients put on the wire: a hand-encoded request must parse.
#include <string>

#include "gtest/gtest.h"
#include "proto/grpc_service.pb.h"

namespace {

std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

std::string LengthDelimited(int field, const std::string& payload) {
  return Varint((static_cast<uint64_t>(field) << 3) | 2) +
         Varint(payload.size()) + payload;
}

TEST(GrpcServiceProtoTest, ParsesHandEncodedModelInferRequest) {
  // InferInputTensor{name=1:"input_ids", datatype=2:"INT32", shape=3:[1,3]}
  std::string shape = Varint(1) + Varint(3);
  std::string input = LengthDelimited(1, "input_ids") +
                      LengthDelimited(2, "INT32") + LengthDelimited(3, shape);
  std::string raw("\x05\x00\x00\x00\x07\x00\x00\x00\x0b\x00\x00\x00", 12);
  std::string wire = LengthDelimited(1, "moe-tiny") +
                     LengthDelimited(3, "req-7") + LengthDelimited(5, input) +
                     LengthDelimited(7, raw);

  inference::ModelInferRequest request;
  ASSERT_TRUE(request.ParseFromString(wire));
  EXPECT_EQ(request.model_name(), "moe-tiny");
  EXPECT_EQ(request.id(), "req-7");
  ASSERT_EQ(request.inputs_size(), 1);
  EXPECT_EQ(request.inputs(0).name(), "input_ids");
  EXPECT_EQ(request.inputs(0).datatype(), "INT32");
  ASSERT_EQ(request.inputs(0).shape_size(), 2);
  EXPECT_EQ(request.inputs(0).shape(1), 3);
  ASSERT_EQ(request.raw_input_contents_size(), 1);
  EXPECT_EQ(request.raw_input_contents(0), raw);
}

TEST(GrpcServiceProtoTest, StreamResponseFieldNumbers) {
  inference::ModelStreamInferResponse response;
  response.mutable_infer_response()->set_id("abc");
  (*response.mutable_infer_response()
        ->mutable_parameters())["triton_final_response"]
      .set_bool_param(true);
  const auto* descriptor = inference::ModelStreamInferResponse::descriptor();
  EXPECT_EQ(descriptor->FindFieldByName("error_message")->number(), 1);
  EXPECT_EQ(descriptor->FindFieldByName("infer_response")->number(), 2);
  inference::ModelStreamInferResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(response.SerializeAsString()));
  EXPECT_TRUE(parsed.infer_response()
                  .parameters()
                  .at("triton_final_response")
                  .bool_param());
  const auto* param = inference::InferParameter::descriptor();
  EXPECT_EQ(param->FindFieldByName("uint64_param")->number(), 5);
  EXPECT_EQ(param->FindFieldByName("double_param")->number(), 4);
}

}  // namespace

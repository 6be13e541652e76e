// The single-field oneofs of ringmoe.v1 must track presence the way proto3
// `optional` does, so that an explicit 0 (max_tokens = 0, temperature = 0)
// can be told apart from "not set".
#include <string>

#include "gtest/gtest.h"
#include "proto/generation.pb.h"

namespace {

TEST(GenerationProtoTest, ExplicitZeroIsPresentOnTheWire) {
  ringmoe::v1::GenerateRequest request;
  EXPECT_FALSE(request.has_max_tokens());
  request.set_max_tokens(0);
  request.mutable_sampling()->set_temperature(0.0f);
  std::string wire;
  ASSERT_TRUE(request.SerializeToString(&wire));
  ringmoe::v1::GenerateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(wire));
  EXPECT_TRUE(parsed.has_max_tokens());
  EXPECT_EQ(parsed.max_tokens(), 0);
  EXPECT_TRUE(parsed.sampling().has_temperature());
  EXPECT_FALSE(parsed.sampling().has_top_p());
}

TEST(GenerationProtoTest, MaxTokensIsFieldFourVarint) {
  // Field 4, wire type 0, value 7: what any client's `optional int32
  // max_tokens = 4` encodes.
  ringmoe::v1::GenerateRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(std::string("\x20\x07", 2)));
  EXPECT_TRUE(parsed.has_max_tokens());
  EXPECT_EQ(parsed.max_tokens(), 7);
}

}  // namespace

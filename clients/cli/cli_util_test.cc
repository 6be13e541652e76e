#include "clients/cli/cli_util.h"

#include "gtest/gtest.h"

namespace ringmoe::cli {
namespace {

TEST(CliUtilTest, ParsesIdLists) {
  auto ids = ParseIdList("1, 22,333 ,-4");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, std::vector<int32_t>({1, 22, 333, -4}));
  EXPECT_TRUE(ParseIdList("")->empty());
  auto bad = ParseIdList("1,x2");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'x2'"), std::string::npos);
  EXPECT_FALSE(ParseIdList("99999999999").ok());
}

}  // namespace
}  // namespace ringmoe::cli

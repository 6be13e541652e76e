#include "clients/bench/load_generator.h"

#include "gtest/gtest.h"

namespace ringmoe::bench {
namespace {

TEST(PercentileTest, NearestRank) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 90), 90);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile(v, 100), 100);
  EXPECT_EQ(Percentile({7}, 99), 7);
  EXPECT_EQ(Percentile({}, 50), 0);
}

TEST(RunLoadTest, RejectsBadOptions) {
  LoadOptions options;
  options.server = "127.0.0.1:1";
  options.prompt_tokens_min = 10;
  options.prompt_tokens_max = 5;
  EXPECT_EQ(RunLoad(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringmoe::bench

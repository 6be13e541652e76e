#include "base/statistics.h"

#include "gtest/gtest.h"

namespace ringmoe {
namespace {

TEST(MedianTest, MiddleOfAnOddCountInAnyOrder) {
  EXPECT_EQ(Median({5.0, 1.0, 3.0}), 3.0);
  EXPECT_EQ(Median({2.5}), 2.5);
  EXPECT_EQ(Median({9.0, 7.0, 1.0, 8.0, 2.0}), 7.0);
}

TEST(MedianTest, UpperMiddleOfAnEvenCount) {
  EXPECT_EQ(Median({4.0, 1.0}), 4.0);
  EXPECT_EQ(Median({1.0, 10.0, 2.0, 3.0}), 3.0);
}

TEST(MedianTest, ZeroForNone) { EXPECT_EQ(Median({}), 0.0); }

}  // namespace
}  // namespace ringmoe

#include "engine/moe/expert_placement.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmoe::moe {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(ExpertPlacementTest, ContiguousRangesInRankOrder) {
  const ExpertPlacement p = ExpertPlacement::Contiguous(8, 2);
  EXPECT_EQ(p.num_experts(), 8);
  EXPECT_EQ(p.num_ranks(), 2);
  EXPECT_THAT(p.experts_of(0), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(p.experts_of(1), ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(p.owner(3), 0);
  EXPECT_EQ(p.owner(4), 1);
}

TEST(ExpertPlacementTest, UnevenSharesDifferByOneExpert) {
  const ExpertPlacement p = ExpertPlacement::Contiguous(8, 3);
  EXPECT_THAT(p.experts_of(0), ElementsAre(0, 1));
  EXPECT_THAT(p.experts_of(1), ElementsAre(2, 3, 4));
  EXPECT_THAT(p.experts_of(2), ElementsAre(5, 6, 7));
}

TEST(ExpertPlacementTest, MoreRanksThanExpertsLeavesSomeRanksNone) {
  const ExpertPlacement p = ExpertPlacement::Contiguous(2, 4);
  EXPECT_THAT(p.experts_of(0), IsEmpty());
  EXPECT_THAT(p.experts_of(1), ElementsAre(0));
  EXPECT_THAT(p.experts_of(2), IsEmpty());
  EXPECT_THAT(p.experts_of(3), ElementsAre(1));
}

TEST(ExpertPlacementTest, EveryExpertOwnedOnceAndOwnerAgreesWithItsRank) {
  for (int experts : {1, 7, 8, 16, 128, 257}) {
    for (int ranks : {1, 2, 3, 4, 5, 8, 300}) {
      const ExpertPlacement p = ExpertPlacement::Contiguous(experts, ranks);
      std::vector<int> times_owned(experts, 0);
      int previous_owner = 0;
      for (int r = 0; r < ranks; ++r) {
        const std::vector<int32_t> mine = p.experts_of(r);
        EXPECT_LE(mine.size(), experts / ranks + 1u);
        EXPECT_GE(mine.size(), static_cast<size_t>(experts / ranks));
        for (int32_t e : mine) {
          ++times_owned[e];
          EXPECT_EQ(p.owner(e), r);
        }
      }
      for (int e = 0; e < experts; ++e) {
        EXPECT_EQ(times_owned[e], 1) << experts << " over " << ranks;
        EXPECT_GE(p.owner(e), previous_owner);  // contiguous
        previous_owner = p.owner(e);
      }
    }
  }
}

}  // namespace
}  // namespace ringmoe::moe

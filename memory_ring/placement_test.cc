#include "memory_ring/placement.h"

#include "gtest/gtest.h"

namespace ringmoe::memory_ring {
namespace {

PlacementInput Input(uint64_t budget) {
  PlacementInput in;
  in.always_resident_bytes = 1000;
  in.num_layers = 4;
  in.experts_per_layer = 4;
  for (int l = 0; l < 4; ++l) {
    for (int e = 0; e < 4; ++e) in.experts.push_back({l, e, 100});
  }
  in.budget_bytes = budget;
  in.num_slots = 3;
  return in;
}

TEST(PlacementTest, EverythingResidentWhenItFits) {
  for (uint64_t budget : {0ull, 2600ull, 5000ull}) {
    auto plan = PlanPlacement(Input(budget));
    ASSERT_TRUE(plan.ok());
    EXPECT_FALSE(plan->streams());
    EXPECT_EQ(plan->resident_bytes, 2600u);
    EXPECT_EQ(plan->resident_experts, 16);
  }
}

TEST(PlacementTest, StreamsWhatDoesNotFit) {
  // 1000 resident + 3 slots of 400 = 2200; 150 left: one more expert
  // (the cache is off), and 50 bytes unused.
  auto input = Input(2350);
  input.expert_cache = false;
  auto plan = PlanPlacement(input);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_slots, 3);
  EXPECT_EQ(plan->slot_bytes, 400u);
  EXPECT_EQ(plan->resident_experts, 1);
  EXPECT_TRUE(plan->expert_resident[0][0]);
  EXPECT_FALSE(plan->expert_resident[0][1]);
  EXPECT_EQ(plan->streamed_experts, 15);
  EXPECT_EQ(plan->streamed_bytes, 1500u);
  EXPECT_EQ(plan->resident_bytes, 1100u);
  EXPECT_EQ(plan->cache_bytes, 0u);
}

TEST(PlacementTest, LeftoverMemoryCachesExperts) {
  auto plan = PlanPlacement(Input(2550));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_slots, 3);
  EXPECT_EQ(plan->resident_experts, 0);
  EXPECT_EQ(plan->streamed_experts, 16);
  EXPECT_EQ(plan->cache_bytes, 350u);
}

TEST(PlacementTest, SectionsShrinkBelowALayerBeforeSlotsGo) {
  // 850 bytes after the resident 1000: 3 slots of 2 experts (a layer streams
  // in 2 sections), and no cache, 250 bytes of resident experts.
  auto input = Input(1850);
  input.expert_cache = false;
  auto plan = PlanPlacement(input);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_slots, 3);
  EXPECT_EQ(plan->section_experts, 2);
  EXPECT_EQ(plan->slot_bytes, 200u);
  EXPECT_EQ(plan->layer_experts, 4);
  EXPECT_EQ(plan->resident_experts, 2);
  EXPECT_NE(plan->Summary().find("3 slots x 200 bytes (2 of a layer's 4"),
            std::string::npos)
      << plan->Summary();
}

TEST(PlacementTest, WithTheCacheSubLayerSectionsHoldTwiceTopK) {
  auto input = Input(2150);  // 1150 left: 3 whole layers (1200) do not fit
  input.experts_per_token = 1;
  auto plan = PlanPlacement(input);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_slots, 3);
  EXPECT_EQ(plan->section_experts, 2);
  EXPECT_EQ(plan->cache_bytes, 550u);
  // Where whole layers fit, sections are whole layers.
  input.budget_bytes = 2250;
  plan = PlanPlacement(input);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->section_experts, 4);
  EXPECT_EQ(plan->cache_bytes, 50u);
}

TEST(PlacementTest, FewerSlotsOnlyWhenOneExpertPerSlotDoesNotFit) {
  auto plan = PlanPlacement(Input(1250));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_slots, 2);
  EXPECT_EQ(plan->section_experts, 1);
  EXPECT_EQ(plan->cache_bytes, 50u);
}

TEST(PlacementTest, FixedSectionSizeLeavesTheRestToTheCache) {
  auto input = Input(2550);
  input.section_experts = 3;
  auto plan = PlanPlacement(input);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->num_slots, 3);
  EXPECT_EQ(plan->section_experts, 3);
  EXPECT_EQ(plan->cache_bytes, 650u);
  // More than a layer holds is a whole layer.
  input.section_experts = 9;
  plan = PlanPlacement(input);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->section_experts, 4);
  input.section_experts = -1;
  EXPECT_EQ(PlanPlacement(input).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlacementTest, TooSmallNamesTheMinimum) {
  auto plan = PlanPlacement(Input(1199));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(
      plan.status().message().find("smallest budget that works is 1200 bytes"),
      std::string::npos)
      << plan.status();
  auto input = Input(1399);
  input.section_experts = 2;
  plan = PlanPlacement(input);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(
      plan.status().message().find("smallest budget that works is 1400 bytes"),
      std::string::npos)
      << plan.status();
  input.budget_bytes = 1400;
  EXPECT_TRUE(PlanPlacement(input).ok());
}

TEST(PlacementTest, ParsesByteSizes) {
  EXPECT_EQ(*ParseByteSize("1073741824"), 1073741824u);
  EXPECT_EQ(*ParseByteSize("512MiB"), 512u << 20);
  EXPECT_EQ(*ParseByteSize("1.5GiB"), 3u << 29);
  EXPECT_EQ(*ParseByteSize("64KiB"), 65536u);
  EXPECT_EQ(*ParseByteSize("64k"), 65536u);
  EXPECT_EQ(*ParseByteSize("3GB"), 3000000000u);
  EXPECT_EQ(*ParseByteSize(" 2 gib "), 2ull << 30);
  EXPECT_FALSE(ParseByteSize("lots").ok());
  EXPECT_FALSE(ParseByteSize("12 parsecs").ok());
  EXPECT_FALSE(ParseByteSize("-5MiB").ok());
  // Budgets that would silently mean "unlimited" or overflow.
  EXPECT_FALSE(ParseByteSize("0").ok());
  EXPECT_FALSE(ParseByteSize("0.4").ok());
  EXPECT_FALSE(ParseByteSize("18446744073709551616").ok());
  EXPECT_FALSE(ParseByteSize("16777216TiB").ok());
  EXPECT_NE(ParseByteSize("0").status().message().find("less than one byte"),
            absl::string_view::npos);
}

TEST(PlacementTest, WithoutARingTheBudgetHoldsExpertsForGood) {
  PlacementInput in;
  in.always_resident_bytes = 1000;
  in.num_layers = 2;
  in.experts_per_layer = 4;
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 4; ++e) in.experts.push_back({l, e, 100});
  }
  in.num_slots = 0;
  in.expert_cache = false;
  in.budget_bytes = 1350;
  auto plan = PlanPlacement(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->streams());
  EXPECT_EQ(plan->num_slots, 0);
  EXPECT_EQ(plan->slot_bytes, 0u);
  EXPECT_EQ(plan->resident_experts, 3);
  EXPECT_EQ(plan->streamed_experts, 5);
  EXPECT_EQ(plan->resident_bytes, 1300u);
  EXPECT_TRUE(plan->expert_resident[0][2]);
  EXPECT_FALSE(plan->expert_resident[0][3]);
  EXPECT_NE(plan->Summary().find("not streamed"), std::string::npos);
  // Only what every token needs must fit.
  in.budget_bytes = 1000;
  EXPECT_TRUE(PlanPlacement(in).ok());
  in.budget_bytes = 999;
  const auto small = PlanPlacement(in);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(small.status().message().find("smallest budget that works is 1000"),
            std::string::npos)
      << small.status();
}

}  // namespace
}  // namespace ringmoe::memory_ring

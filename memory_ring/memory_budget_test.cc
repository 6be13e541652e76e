#include "memory_ring/memory_budget.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "memory_ring/fake_tier.h"

namespace ringmoe::memory_ring {
namespace {

TEST(MemoryBudgetTest, TakesUpToTheLimitAndNamesTheMemory) {
  MemoryBudget budget("cuda:3", 100);
  EXPECT_TRUE(budget.Take(60, "weights").ok());
  const absl::Status over = budget.Take(41, "lm_head");
  EXPECT_EQ(over.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.message().find("cuda:3"), absl::string_view::npos) << over;
  EXPECT_NE(over.message().find("lm_head"), absl::string_view::npos) << over;
  EXPECT_NE(over.message().find("60 taken"), absl::string_view::npos) << over;
  EXPECT_EQ(budget.used(), 60u);
  EXPECT_TRUE(budget.Take(40, "the rest").ok());
  budget.Give(100);
  EXPECT_EQ(budget.used(), 0u);
}

TEST(MemoryBudgetTest, ZeroLimitIsUnlimited) {
  MemoryBudget budget("host", 0);
  EXPECT_TRUE(budget.Take(uint64_t{1} << 50, "everything").ok());
}

TEST(MemoryBudgetTest, TierAllocationsDrawOnTheBudgetUntilFreed) {
  MemoryBudget budget("device", 1000);
  std::unique_ptr<Tier> tier =
      WithBudget(std::make_unique<FakeTier>(absl::ZeroDuration(), 0), &budget);
  auto a = tier->Allocate(600);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->size(), 600u);
  EXPECT_EQ(budget.used(), 600u);
  EXPECT_EQ(tier->Allocate(500).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(budget.used(), 600u);
  a->reset();
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_TRUE(tier->Allocate(1000).ok());
}

}  // namespace
}  // namespace ringmoe::memory_ring

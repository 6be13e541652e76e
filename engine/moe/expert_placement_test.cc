#include "engine/moe/expert_placement.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmoe::moe {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
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

TEST(ExpertPlacementTest, ContiguousHasOneReplicaPerExpert) {
  const ExpertPlacement p = ExpertPlacement::Contiguous(8, 3);
  EXPECT_EQ(p.num_replicas(), 8);
  for (int e = 0; e < 8; ++e)
    EXPECT_THAT(p.replicas(e), ElementsAre(p.owner(e)));
}

// Checks what every placement of `experts` experts over `ranks` ranks with
// `replicas` replicas must hold: each expert on at least one rank, its
// ranks ascending, in range and distinct, owner() the first, experts_of()
// the transpose, and replica slots per rank the floor or ceiling of
// replicas / ranks.
void ExpectValidAndEven(const ExpertPlacement& p, int experts, int ranks,
                        int replicas) {
  ASSERT_EQ(p.num_experts(), experts);
  ASSERT_EQ(p.num_ranks(), ranks);
  ASSERT_EQ(p.num_replicas(), replicas);
  std::vector<std::vector<int32_t>> on_rank(ranks);
  for (int e = 0; e < experts; ++e) {
    const std::vector<int>& held_by = p.replicas(e);
    ASSERT_FALSE(held_by.empty()) << "expert " << e;
    EXPECT_EQ(p.owner(e), held_by.front());
    for (size_t i = 0; i < held_by.size(); ++i) {
      ASSERT_GE(held_by[i], 0);
      ASSERT_LT(held_by[i], ranks);
      if (i > 0) {
        EXPECT_LT(held_by[i - 1], held_by[i]) << "expert " << e;
      }
      on_rank[held_by[i]].push_back(e);
    }
  }
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(p.experts_of(r), on_rank[r]) << "rank " << r;
    EXPECT_GE(on_rank[r].size(), static_cast<size_t>(replicas / ranks));
    EXPECT_LE(on_rank[r].size(),
              static_cast<size_t>((replicas + ranks - 1) / ranks));
  }
}

double MaxLoad(const ExpertPlacement& p, const std::vector<uint64_t>& tokens) {
  const std::vector<double> load = p.RankLoads(tokens);
  return *std::max_element(load.begin(), load.end());
}

// The bound the greedy keeps: no rank above the mean by more than the
// heaviest replica (tokens / replicas of its expert).
void ExpectLoadBound(const ExpertPlacement& p,
                     const std::vector<uint64_t>& tokens) {
  double total = 0;
  double heaviest = 0;
  for (int e = 0; e < p.num_experts(); ++e) {
    total += tokens[e];
    heaviest = std::max(heaviest,
                        static_cast<double>(tokens[e]) / p.replicas(e).size());
  }
  EXPECT_LE(MaxLoad(p, tokens), total / p.num_ranks() + heaviest + 1e-6);
}

TEST(ExpertPlacementTest, BalancedBeatsContiguousOnSkewedCounts) {
  // The two hot experts are neighbours: Contiguous puts both on rank 0.
  const std::vector<uint64_t> tokens = {1000, 900, 10, 20, 30, 40, 50, 60};
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced(tokens, 4, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectValidAndEven(*p, 8, 4, 8);
  EXPECT_EQ(MaxLoad(ExpertPlacement::Contiguous(8, 4), tokens), 1900);
  // Heaviest first: 1000 -> 0, 900 -> 1, 60 -> 2, 50 -> 3, 40 -> 3, 30 -> 2,
  // then ranks 2 and 3 are full: 20 -> 1, 10 -> 0.
  EXPECT_THAT(p->experts_of(0), ElementsAre(0, 2));
  EXPECT_THAT(p->experts_of(1), ElementsAre(1, 3));
  EXPECT_THAT(p->experts_of(2), ElementsAre(4, 7));
  EXPECT_THAT(p->experts_of(3), ElementsAre(5, 6));
  EXPECT_EQ(MaxLoad(*p, tokens), 1010);
  ExpectLoadBound(*p, tokens);
}

TEST(ExpertPlacementTest, ReplicasOfHotExpertsEvenTheLoad) {
  const std::vector<uint64_t> tokens = {1000, 900, 10, 20, 30, 40, 50, 60};
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced(tokens, 4, 4);
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectValidAndEven(*p, 8, 4, 12);
  // 1000 -> 500 -> 333, 900 -> 450: four extra copies of the two hot ones.
  EXPECT_EQ(p->replicas(0).size(), 3u);
  EXPECT_EQ(p->replicas(1).size(), 3u);
  for (int e = 2; e < 8; ++e) EXPECT_EQ(p->replicas(e).size(), 1u);
  // Mean 540; without replicas no placement is below 1000.
  EXPECT_LT(MaxLoad(*p, tokens), 700);
  ExpectLoadBound(*p, tokens);
}

TEST(ExpertPlacementTest, ExtraReplicasGoToTheMostTokensPerReplica) {
  // 5000 -> 2500 (2 copies), 2500 > 2000 -> 1666 (3), then 2000 -> 1000.
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced({100, 5000, 10, 2000}, 4, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->replicas(0).size(), 1u);
  EXPECT_EQ(p->replicas(1).size(), 3u);
  EXPECT_EQ(p->replicas(2).size(), 1u);
  EXPECT_EQ(p->replicas(3).size(), 2u);
}

TEST(ExpertPlacementTest, ReplicaTiesGoToTheLowerExpert) {
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced({60, 80, 80, 40}, 4, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->replicas(1).size(), 2u);
  EXPECT_EQ(p->replicas(2).size(), 1u);
}

TEST(ExpertPlacementTest, NoExpertGetsMoreReplicasThanRanks) {
  // Expert 0 stops at 2 copies (one per rank); the rest go to expert 1.
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced({1000000, 1}, 2, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->replicas(0), ElementsAre(0, 1));
  EXPECT_THAT(p->replicas(1), ElementsAre(0, 1));
}

TEST(ExpertPlacementTest, UniformCountsSpreadEvenly) {
  const std::vector<uint64_t> tokens(16, 100);
  for (int ranks : {1, 2, 3, 4, 5, 16, 20}) {
    const absl::StatusOr<ExpertPlacement> p =
        ExpertPlacement::Balanced(tokens, ranks, 0);
    ASSERT_TRUE(p.ok()) << p.status();
    ExpectValidAndEven(*p, 16, ranks, 16);
    EXPECT_EQ(MaxLoad(*p, tokens), 100.0 * ((16 + ranks - 1) / ranks));
  }
}

TEST(ExpertPlacementTest, AllZeroCountsFillRanksInOrder) {
  const std::vector<uint64_t> zeros(8, 0);
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced(zeros, 4, 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, ExpertPlacement::Contiguous(8, 4));
  const absl::StatusOr<ExpertPlacement> replicated =
      ExpertPlacement::Balanced(zeros, 3, 5);
  ASSERT_TRUE(replicated.ok()) << replicated.status();
  ExpectValidAndEven(*replicated, 8, 3, 13);
}

TEST(ExpertPlacementTest, MakesRoomWhenOnlyRanksHoldingTheExpertAreFree) {
  // 91 -> two copies of 45.5. Caps 3 and 2: 88 -> 0, 60 -> 1, 54 -> 1 fills
  // rank 1, 45.5 -> 0, and the second 45.5 has only rank 0 free, which holds
  // expert 0 already: 54 moves to rank 0 (max load 187.5, not 193.5 as
  // moving 60 would give) and the copy takes its slot on rank 1.
  const std::vector<uint64_t> tokens = {91, 88, 60, 54};
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced(tokens, 2, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  ExpectValidAndEven(*p, 4, 2, 5);
  EXPECT_THAT(p->experts_of(0), ElementsAre(0, 1, 3));
  EXPECT_THAT(p->experts_of(1), ElementsAre(0, 2));
}

TEST(ExpertPlacementTest, BalancedRejectsBadArguments) {
  const std::vector<uint64_t> tokens = {1, 2, 3};
  EXPECT_THAT(ExpertPlacement::Balanced({}, 2, 0).status().message(),
              HasSubstr("no experts"));
  EXPECT_THAT(ExpertPlacement::Balanced(tokens, 0, 0).status().message(),
              HasSubstr("num_ranks is 0"));
  EXPECT_THAT(ExpertPlacement::Balanced(tokens, 2, -1).status().message(),
              HasSubstr("extra_replicas is -1"));
  EXPECT_THAT(ExpertPlacement::Balanced(tokens, 2, 4).status().message(),
              HasSubstr("at most 3 extra"));
  EXPECT_THAT(ExpertPlacement::Balanced(tokens, 1, 1).status().message(),
              HasSubstr("at most 0 extra"));
  EXPECT_EQ(ExpertPlacement::Balanced(tokens, 2, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ExpertPlacement::Balanced(tokens, 2, 3).ok());
}

TEST(ExpertPlacementTest,
     AssignExpertsGivesEachExpertWholeToItsLeastLoadedReplica) {
  // 4 ranks: expert 0 (hot) on three, the others once each.
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced({1000, 10, 10, 10}, 4, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::vector<int>& hot = p->replicas(0);
  ASSERT_EQ(hot.size(), 3u);
  // Single-replica experts count first; the hot expert goes to the replica
  // they load least (the lowest such rank on a tie).
  for (const std::vector<uint64_t>& rows : std::vector<std::vector<uint64_t>>{
           {9, 1, 2, 3}, {9, 0, 0, 0}, {1, 5, 0, 7}, {0, 4, 4, 4}}) {
    const std::vector<int> rank_of = p->AssignExperts(rows);
    ASSERT_EQ(rank_of.size(), 4u);
    std::vector<uint64_t> load(4, 0);
    for (int e = 1; e < 4; ++e) {
      EXPECT_EQ(rank_of[e], p->owner(e));
      load[p->owner(e)] += rows[e];
    }
    int least = hot[0];
    for (int r : hot) {
      if (load[r] < load[least]) least = r;
    }
    EXPECT_EQ(rank_of[0], rows[0] > 0 ? least : p->owner(0))
        << "rows " << rows[0] << " " << rows[1] << " " << rows[2] << " "
        << rows[3];
    EXPECT_EQ(p->AssignExperts(rows), rank_of);
  }
}

TEST(ExpertPlacementTest, AssignExpertsTakesTheHeaviestReplicatedExpertFirst) {
  // Two ranks, both holding experts 0 and 1: the heavier goes to rank 0
  // (both empty: the lower rank), the lighter to the other.
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced({50, 40}, 2, 2);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->replicas(0).size(), 2u);
  ASSERT_EQ(p->replicas(1).size(), 2u);
  EXPECT_THAT(p->AssignExperts({3, 8}), ElementsAre(1, 0));
  EXPECT_THAT(p->AssignExperts({8, 3}), ElementsAre(0, 1));
  // Ties: the lower expert first.
  EXPECT_THAT(p->AssignExperts({5, 5}), ElementsAre(0, 1));
}

TEST(ExpertPlacementTest, AssignExpertsIsTheOwnerWithoutReplicas) {
  const ExpertPlacement p = ExpertPlacement::Contiguous(8, 3);
  EXPECT_THAT(p.AssignExperts({1, 0, 4, 4, 0, 2, 0, 9}),
              ElementsAre(0, 0, 1, 1, 1, 2, 2, 2));
}

std::string TempPath(const std::string& name) {
  return absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return absl::InternalError("cannot create " + path);
  const bool written =
      std::fwrite(text.data(), 1, text.size(), file) == text.size();
  if (std::fclose(file) != 0 || !written) {
    return absl::InternalError("cannot write " + path);
  }
  return absl::OkStatus();
}

TEST(ExpertPlacementTest, FileRoundTrip) {
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced({5, 900, 30, 0, 70, 1000, 2, 40}, 3, 4);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string path = TempPath("round_trip.placement");
  ASSERT_TRUE(p->WriteFile(path).ok());
  const absl::StatusOr<ExpertPlacement> read =
      ExpertPlacement::ReadFile(path, 8, 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, *p);
  // Writing again replaces the file whole and leaves no temporary behind.
  const ExpertPlacement contiguous = ExpertPlacement::Contiguous(8, 3);
  ASSERT_TRUE(contiguous.WriteFile(path).ok());
  EXPECT_EQ(*ExpertPlacement::ReadFile(path, 8, 3), contiguous);
  EXPECT_FALSE(ReadFileToString(absl::StrCat(path, ".tmp.", getpid())).ok());
  const absl::StatusOr<std::string> text = ReadFileToString(path);
  ASSERT_TRUE(text.ok());
  EXPECT_THAT(*text, HasSubstr("ringmoe-expert-placement 1\n"));
  EXPECT_THAT(*text, HasSubstr("\nexperts 8\nranks 3\n0: 0\n"));
}

TEST(ExpertPlacementTest, WriteFileNamesThePathOnFailure) {
  const absl::Status status = ExpertPlacement::Contiguous(2, 1).WriteFile(
      TempPath("no_such_dir/x.placement"));
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("no_such_dir/x.placement"));
}

TEST(ExpertPlacementTest, ReadsCommentsBlankLinesAndAnyExpertOrder) {
  const std::string path = TempPath("handwritten.placement");
  ASSERT_TRUE(WriteText(path,
                        "# hand written\n"
                        "ringmoe-expert-placement 1   # version\n"
                        "\n"
                        "experts 3\n"
                        "ranks\t4\n"
                        "2: 3\n"
                        "0: 2 0  # hot\n"
                        "1: 1\n")
                  .ok());
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::ReadFile(path, 3, 4);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->replicas(0), ElementsAre(0, 2));
  EXPECT_THAT(p->replicas(1), ElementsAre(1));
  EXPECT_THAT(p->replicas(2), ElementsAre(3));
  EXPECT_EQ(p->num_replicas(), 4);
}

TEST(ExpertPlacementTest, ReadFileRejectsMalformedFiles) {
  const std::string good_start =
      "ringmoe-expert-placement 1\nexperts 3\nranks 2\n";
  struct Case {
    std::string text;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"", ": ends before the header"},
      {"# nothing\n", ": ends before the header"},
      {"placement 1\n",
       ":1: not an expert placement file: expected "
       "'ringmoe-expert-placement 1', got 'placement 1'"},
      {"ringmoe-expert-placement 2\nexperts 3\n",
       ":1: placement file version 2 is not supported"},
      {"ringmoe-expert-placement one\n", ":1: not an expert placement file"},
      {"ringmoe-expert-placement 1\n", ": ends before 'experts <count>'"},
      {"ringmoe-expert-placement 1\nexperts 3\n",
       ": ends before 'ranks <count>'"},
      {"ringmoe-expert-placement 1\nranks 2\n",
       ":2: expected 'experts <count>', got 'ranks 2'"},
      {"ringmoe-expert-placement 1\nexperts 0\n",
       ":2: expected 'experts <count>'"},
      {"ringmoe-expert-placement 1\nexperts 3 4\n",
       ":2: expected 'experts <count>'"},
      {"ringmoe-expert-placement 1\nexperts 3\nranks 2x\n",
       ":3: expected 'ranks <count>'"},
      {"ringmoe-expert-placement 1\nexperts 8\nranks 4\n",
       ":3: placement file " + TempPath("bad.placement") +
           " was written for 8 experts over 4 ranks; this job has 3 experts "
           "over 2 ranks"},
      {"ringmoe-expert-placement 1\nexperts 3\nranks 4\n",
       ":3: placement file " + TempPath("bad.placement") +
           " was written for 3 experts over 4 ranks; this job has 3 experts "
           "over 2 ranks"},
      {good_start + "0: 0\n1: 1\n", ": expert 2 is missing (2 of 3 experts"},
      {good_start, ": expert 0 is missing (0 of 3 experts"},
      {good_start + "0: 0\n1: 1\n0: 1\n2: 0\n",
       ":6: expert 0 is listed twice (first on line 4)"},
      {good_start + "0: 0\n3: 1\n", ":5: expert 3 is out of range [0, 3)"},
      {good_start + "-1: 1\n", ":4: expert -1 is out of range [0, 3)"},
      {good_start + "0: 0 2\n",
       ":4: rank 2 of expert 0 is out of range [0, 2)"},
      {good_start + "0: -1\n", ":4: rank -1 of expert 0 is out of range"},
      {good_start + "0: 1 0 1\n", ":4: rank 1 is listed twice for expert 0"},
      {good_start + "0:\n", ":4: expert 0 has no rank"},
      {good_start + "0: 0 1 x\n", ":4: 'x' is not a rank (expert 0)"},
      {good_start + "0: 0,1\n", ":4: '0,1' is not a rank (expert 0)"},
      {good_start + "0: 0\n1: 1\n2: 0\nend\n",
       ":7: expected '<expert>: <rank> ...', got 'end'"},
      {good_start + "0 0\n", ":4: expected '<expert>: <rank> ...'"},
      {good_start + "zero: 0\n", ":4: expected '<expert>: <rank> ...'"},
  };
  const std::string path = TempPath("bad.placement");
  for (const Case& c : cases) {
    ASSERT_TRUE(WriteText(path, c.text).ok());
    const absl::StatusOr<ExpertPlacement> p =
        ExpertPlacement::ReadFile(path, 3, 2);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(p.status().message(), HasSubstr(path + c.error)) << c.text;
  }
}

TEST(ExpertPlacementTest, ReadFileAllowsARankWithoutReplicas) {
  const std::string path = TempPath("idle_rank.placement");
  ASSERT_TRUE(WriteText(path,
                        "ringmoe-expert-placement 1\nexperts 2\nranks 3\n"
                        "0: 0\n1: 2\n")
                  .ok());
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::ReadFile(path, 2, 3);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->experts_of(1), IsEmpty());
}

TEST(ExpertPlacementTest, ReadFileOfAMissingFileIsNotFound) {
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::ReadFile(TempPath("absent.placement"), 2, 2);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr("absent.placement"));
}

TEST(ExpertPlacementTest, SummaryNamesReplicasSlotsAndShares) {
  const absl::StatusOr<ExpertPlacement> p =
      ExpertPlacement::Balanced({300, 100, 100, 100}, 2, 1);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->Summary(),
            "expert placement: 4 experts over 2 ranks, 5 replicas "
            "(replicated: 0 x2); replicas per rank 3 2; token share per rank "
            "58.3% 41.7% (max/mean 1.167)");
  EXPECT_EQ(ExpertPlacement::Contiguous(3, 2).Summary(),
            "expert placement: 3 experts over 2 ranks, 3 replicas; replicas "
            "per rank 1 2");
}

TEST(ExpertPlacementTest, RandomBalancedPlacementsHoldTheContract) {
  for (int seed = 0; seed < 500; ++seed) {
    SCOPED_TRACE(absl::StrCat("seed ", seed));
    std::mt19937 rng(seed);
    const int experts = 1 + rng() % 64;
    const int ranks = 1 + rng() % 12;
    const int max_extra = experts * (ranks - 1);
    int extra = static_cast<int>(rng() % (max_extra + 1));
    if (rng() % 2 == 0) extra = std::min(extra, experts / 4);
    // Uniform, a few hot experts, Zipf-like, or mostly zero.
    const int shape = static_cast<int>(rng() % 4);
    std::vector<uint64_t> tokens(experts);
    for (uint64_t& t : tokens) {
      switch (shape) {
        case 0:
          t = rng() % 1000;
          break;
        case 1:
          t = rng() % 8 == 0 ? 10000 + rng() % 100000 : rng() % 100;
          break;
        case 2:
          t = 1000000 / (1 + rng() % 64);
          break;
        default:
          t = rng() % 5 == 0 ? rng() % 50 : 0;
          break;
      }
    }
    const absl::StatusOr<ExpertPlacement> p =
        ExpertPlacement::Balanced(tokens, ranks, extra);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_NO_FATAL_FAILURE(
        ExpectValidAndEven(*p, experts, ranks, experts + extra));
    ExpectLoadBound(*p, tokens);
    // Deterministic.
    EXPECT_EQ(*ExpertPlacement::Balanced(tokens, ranks, extra), *p);
    // Each extra copy went to the most tokens per replica: an expert with k
    // copies had, when it got its k-th, at least the tokens per replica any
    // expert that could still take one has now.
    for (int a = 0; a < experts; ++a) {
      const uint64_t copies_a = p->replicas(a).size();
      if (copies_a == 1) continue;
      for (int b = 0; b < experts; ++b) {
        const uint64_t copies_b = p->replicas(b).size();
        if (b == a || copies_b == static_cast<uint64_t>(ranks)) continue;
        EXPECT_GE(static_cast<double>(tokens[a]) * copies_b,
                  static_cast<double>(tokens[b]) * (copies_a - 1))
            << "experts " << a << " and " << b;
      }
    }
    // Each expert runs whole on a rank holding it, a replicated one on the
    // least loaded of its copies when its turn came.
    std::vector<uint64_t> rows(experts);
    for (uint64_t& r : rows) r = rng() % 20;
    const std::vector<int> assigned = p->AssignExperts(rows);
    ASSERT_EQ(assigned.size(), rows.size());
    for (int e = 0; e < experts; ++e) {
      EXPECT_TRUE(p->holds(e, assigned[e])) << "expert " << e;
    }
    std::vector<uint64_t> load(ranks, 0);
    std::vector<int> replicated;
    for (int e = 0; e < experts; ++e) {
      if (p->replicas(e).size() == 1) {
        load[assigned[e]] += rows[e];
      } else if (rows[e] > 0) {
        replicated.push_back(e);
      }
    }
    std::stable_sort(replicated.begin(), replicated.end(),
                     [&](int a, int b) { return rows[a] > rows[b]; });
    for (int e : replicated) {
      for (int r : p->replicas(e)) {
        EXPECT_LE(load[assigned[e]], load[r]) << "expert " << e;
      }
      load[assigned[e]] += rows[e];
    }
    // The file brings it back.
    const std::string path = TempPath("random.placement");
    ASSERT_TRUE(p->WriteFile(path).ok());
    const absl::StatusOr<ExpertPlacement> read =
        ExpertPlacement::ReadFile(path, experts, ranks);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(*read, *p);
  }
}

}  // namespace
}  // namespace ringmoe::moe

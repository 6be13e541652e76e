#include "engine/runtime/stop_criteria.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmoe::runtime {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int32_t kEos = 2;

struct Token {
  int32_t id;
  std::string text;
};

// What a streaming client sees.
struct Stream {
  std::vector<std::string> chunks;  // one per Update()
  std::string text;
  FinishReason reason = FinishReason::kNone;
  StopUpdate last;
};

// Feeds tokens until the criteria finish (later tokens are not sent, as a
// server would stop decoding).
Stream Feed(StopCriteria& criteria, const std::vector<Token>& tokens) {
  Stream stream;
  for (const Token& token : tokens) {
    absl::StatusOr<StopUpdate> update = criteria.Update(token.id, token.text);
    EXPECT_TRUE(update.ok()) << update.status();
    if (!update.ok()) break;
    stream.chunks.push_back(update->text);
    stream.text += update->text;
    stream.reason = update->finish_reason;
    stream.last = *std::move(update);
    if (stream.reason != FinishReason::kNone) break;
  }
  return stream;
}

std::vector<Token> Texts(const std::vector<std::string>& texts) {
  std::vector<Token> tokens;
  int32_t id = 100;
  for (const std::string& text : texts) tokens.push_back({id++, text});
  return tokens;
}

SamplingParams WithStops(std::vector<std::string> stops, int max_tokens = 64) {
  SamplingParams params;
  params.stop_strings = std::move(stops);
  params.max_new_tokens = max_tokens;
  return params;
}

// ---------------------------------------------------------- Stop tokens

TEST(StopCriteriaTest, EosStopsAndItsTextIsNotEmitted) {
  StopCriteria criteria(SamplingParams(), {kEos});
  const Stream s = Feed(criteria, {{5, "Hi"}, {6, " there"}, {kEos, "</s>"}});
  EXPECT_EQ(s.reason, FinishReason::kStop);
  EXPECT_EQ(s.text, "Hi there");
  EXPECT_EQ(s.last.stop_token_id, kEos);
  EXPECT_FALSE(s.last.stop_string.has_value());
  EXPECT_EQ(criteria.num_generated_tokens(), 3);
  EXPECT_TRUE(criteria.finished());
}

TEST(StopCriteriaTest, AnyOfSeveralEosIdsStops) {
  StopCriteria criteria(SamplingParams(), {128001, 128009});
  const Stream s = Feed(criteria, {{7, "a"}, {128009, ""}, {8, "b"}});
  EXPECT_EQ(s.reason, FinishReason::kStop);
  EXPECT_EQ(s.text, "a");
  EXPECT_EQ(s.last.stop_token_id, 128009);
}

TEST(StopCriteriaTest, IgnoreEosTreatsEosAsText) {
  SamplingParams params;
  params.ignore_eos = true;
  params.max_new_tokens = 3;
  StopCriteria criteria(params, {kEos});
  const Stream s = Feed(criteria, {{5, "a"}, {kEos, "</s>"}, {6, "b"}});
  EXPECT_EQ(s.reason, FinishReason::kLength);
  EXPECT_EQ(s.text, "a</s>b");
}

TEST(StopCriteriaTest, StopTokenIdsStopEvenWithIgnoreEos) {
  SamplingParams params;
  params.ignore_eos = true;
  params.stop_token_ids = {42};
  StopCriteria criteria(params, {kEos});
  const Stream s =
      Feed(criteria, {{5, "x"}, {kEos, ""}, {42, "<|end|>"}, {6, "y"}});
  EXPECT_EQ(s.reason, FinishReason::kStop);
  EXPECT_EQ(s.text, "x");
  EXPECT_EQ(s.last.stop_token_id, 42);
}

TEST(StopCriteriaTest, StopTokenReleasesHeldText) {
  StopCriteria criteria(WithStops({"END"}), {kEos});
  const Stream s = Feed(criteria, {{5, "x E"}, {kEos, ""}});
  EXPECT_THAT(s.chunks, ElementsAre("x ", "E"));
  EXPECT_EQ(s.reason, FinishReason::kStop);
}

// -------------------------------------------------------------- Length

TEST(StopCriteriaTest, LengthFinishesOnExactlyTheLastToken) {
  SamplingParams params;
  params.max_new_tokens = 4;
  StopCriteria criteria(params, {kEos});
  for (int i = 1; i <= 4; ++i) {
    absl::StatusOr<StopUpdate> update = criteria.Update(10 + i, "t");
    ASSERT_TRUE(update.ok());
    EXPECT_EQ(update->finish_reason,
              i < 4 ? FinishReason::kNone : FinishReason::kLength)
        << "token " << i;
  }
  EXPECT_EQ(criteria.num_generated_tokens(), 4);
}

TEST(StopCriteriaTest, LengthFlushesHeldText) {
  StopCriteria criteria(WithStops({"END"}, 2), {kEos});
  const Stream s = Feed(criteria, Texts({"abc", "E"}));
  EXPECT_THAT(s.chunks, ElementsAre("abc", "E"));
  EXPECT_EQ(s.reason, FinishReason::kLength);
}

TEST(StopCriteriaTest, StopOnTheLastAllowedTokenReportsStop) {
  StopCriteria by_eos(WithStops({}, 2), {kEos});
  EXPECT_EQ(Feed(by_eos, {{5, "a"}, {kEos, ""}}).reason, FinishReason::kStop);

  StopCriteria by_string(WithStops({"##"}, 2), {kEos});
  const Stream s = Feed(by_string, Texts({"a#", "#b"}));
  EXPECT_EQ(s.reason, FinishReason::kStop);
  EXPECT_EQ(s.text, "a");
}

// -------------------------------------------------------- Stop strings

TEST(StopCriteriaTest, StopStringSpanningTokensIsCutOutWhole) {
  StopCriteria criteria(WithStops({"world"}), {kEos});
  const Stream s = Feed(criteria, Texts({"Hel", "lo w", "or", "ld!", "x"}));
  EXPECT_THAT(s.chunks, ElementsAre("Hel", "lo ", "", ""));
  EXPECT_EQ(s.text, "Hello ");
  EXPECT_EQ(s.reason, FinishReason::kStop);
  EXPECT_EQ(s.last.stop_string, "world");
  EXPECT_FALSE(s.last.stop_token_id.has_value());
}

TEST(StopCriteriaTest, HeldTextIsReleasedWhenTheMatchFails) {
  StopCriteria criteria(WithStops({"world"}), {kEos});
  const Stream s = Feed(criteria, Texts({"a w", "o", "nder", "s"}));
  EXPECT_THAT(s.chunks, ElementsAre("a ", "", "wonder", "s"));
  EXPECT_EQ(s.reason, FinishReason::kNone);
  EXPECT_EQ(criteria.Flush(), "");
}

TEST(StopCriteriaTest, OverlappingPrefixesAreTracked) {
  // After "aaa" only the last two bytes can still start "aab".
  StopCriteria criteria(WithStops({"aab"}), {kEos});
  const Stream s = Feed(criteria, Texts({"a", "a", "a", "b"}));
  EXPECT_THAT(s.chunks, ElementsAre("", "", "a", ""));
  EXPECT_EQ(s.text, "a");
  EXPECT_EQ(s.reason, FinishReason::kStop);
}

TEST(StopCriteriaTest, StopStringInsideOneToken) {
  StopCriteria criteria(WithStops({"STOP"}), {kEos});
  const Stream s = Feed(criteria, Texts({"foo STOP bar"}));
  EXPECT_EQ(s.text, "foo ");
  EXPECT_EQ(s.reason, FinishReason::kStop);
}

TEST(StopCriteriaTest, StopStringAtTheStart) {
  StopCriteria criteria(WithStops({"###"}), {kEos});
  const Stream s = Feed(criteria, Texts({"###", "more"}));
  EXPECT_THAT(s.chunks, ElementsAre(""));
  EXPECT_EQ(s.reason, FinishReason::kStop);
}

TEST(StopCriteriaTest, EarliestStopStringWinsRegardlessOfListOrder) {
  for (const std::vector<std::string>& stops :
       {std::vector<std::string>{"def", "bc"},
        std::vector<std::string>{"bc", "def"}}) {
    StopCriteria criteria(WithStops(stops), {kEos});
    const Stream s = Feed(criteria, Texts({"ab", "cdef"}));
    EXPECT_EQ(s.text, "a");
    EXPECT_EQ(s.last.stop_string, "bc");
  }
}

TEST(StopCriteriaTest, ShorterStopStringCompletesFirst) {
  // "bc" completes while the earlier-starting "abcd" is still partial.
  StopCriteria criteria(WithStops({"abcd", "bc"}), {kEos});
  const Stream s = Feed(criteria, Texts({"xa", "b", "c", "d"}));
  EXPECT_EQ(s.text, "xa");
  EXPECT_EQ(s.last.stop_string, "bc");
}

TEST(StopCriteriaTest, MultiByteStopStringsSplitOnCharacters) {
  StopCriteria criteria(WithStops({"日本語"}), {kEos});
  const Stream s =
      Feed(criteria, Texts({"こんにちは日", "本", "人", "日本語"}));
  EXPECT_THAT(s.chunks, ElementsAre("こんにちは", "", "日本人", ""));
  EXPECT_EQ(s.reason, FinishReason::kStop);
}

TEST(StopCriteriaTest, EmptyStopStringsAreIgnored) {
  StopCriteria criteria(WithStops({""}), {kEos});
  const Stream s = Feed(criteria, Texts({"ab", "c"}));
  EXPECT_EQ(s.text, "abc");
  EXPECT_EQ(s.reason, FinishReason::kNone);
}

// ------------------------------------------------------------ Lifecycle

TEST(StopCriteriaTest, UpdateAfterFinishFails) {
  StopCriteria criteria(SamplingParams(), {kEos});
  ASSERT_TRUE(criteria.Update(kEos, "").ok());
  const absl::StatusOr<StopUpdate> again = criteria.Update(5, "x");
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("stop"));
  EXPECT_EQ(criteria.num_generated_tokens(), 1);
}

TEST(StopCriteriaTest, FlushReleasesHeldText) {
  StopCriteria criteria(WithStops({"</answer>"}), {kEos});
  const Stream s = Feed(criteria, Texts({"42 </an"}));
  EXPECT_EQ(s.text, "42 ");
  EXPECT_EQ(criteria.Flush(), "</an");
  EXPECT_EQ(criteria.Flush(), "");
}

TEST(StopCriteriaTest, FinishReasonNames) {
  EXPECT_EQ(FinishReasonName(FinishReason::kNone), "none");
  EXPECT_EQ(FinishReasonName(FinishReason::kStop), "stop");
  EXPECT_EQ(FinishReasonName(FinishReason::kLength), "length");
}

// ---------------------------------------------- Randomised vs reference

// The whole-text definition: the output is the generated text up to the
// first token whose text completes a stop string, cut before the earliest
// stop string in it; at each step everything is streamed except the longest
// tail that could still begin a stop string.
TEST(StopCriteriaTest, StreamingMatchesTheWholeTextDefinition) {
  std::mt19937_64 rng(20240601);
  auto random_string = [&](int min_len, int max_len) {
    std::uniform_int_distribution<int> len(min_len, max_len);
    std::uniform_int_distribution<int> letter(0, 2);
    std::string s;
    for (int n = len(rng); n > 0; --n) s.push_back("abc"[letter(rng)]);
    return s;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<std::string> stops;
    for (int n = 1 + static_cast<int>(rng() % 3); n > 0; --n) {
      stops.push_back(random_string(1, 5));
    }
    const int max_tokens = 1 + static_cast<int>(rng() % 30);
    StopCriteria criteria(WithStops(stops, max_tokens), {kEos});

    std::string full;
    std::string streamed;
    for (int k = 1;; ++k) {
      const bool eos = rng() % 40 == 0;
      const std::string text = eos ? "" : random_string(0, 3);
      absl::StatusOr<StopUpdate> update =
          criteria.Update(eos ? kEos : 100, text);
      ASSERT_TRUE(update.ok());
      streamed += update->text;

      if (eos) {
        EXPECT_EQ(update->finish_reason, FinishReason::kStop);
        EXPECT_EQ(streamed, full);
        break;
      }
      full += text;
      size_t first = std::string::npos;
      for (const std::string& stop : stops) {
        first = std::min(first, full.find(stop));
      }
      if (first != std::string::npos) {
        EXPECT_EQ(update->finish_reason, FinishReason::kStop);
        EXPECT_EQ(streamed, full.substr(0, first)) << "trial " << trial;
        break;
      }
      if (k == max_tokens) {
        EXPECT_EQ(update->finish_reason, FinishReason::kLength);
        EXPECT_EQ(streamed, full);
        break;
      }
      ASSERT_EQ(update->finish_reason, FinishReason::kNone);
      size_t could_start = 0;
      for (const std::string& stop : stops) {
        for (size_t len = 1; len < stop.size() && len <= full.size(); ++len) {
          if (full.compare(full.size() - len, len, stop, 0, len) == 0) {
            could_start = std::max(could_start, len);
          }
        }
      }
      ASSERT_EQ(streamed, full.substr(0, full.size() - could_start))
          << "trial " << trial << " token " << k;
    }
    EXPECT_TRUE(criteria.finished());
  }
}

}  // namespace
}  // namespace ringmoe::runtime

// Unit tests of pipeline stages whose edge cases the golden data covers only
// in part.
#include <string>
#include <utility>
#include <vector>

#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ringmoe::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

const std::string kFffd(kReplacementCharacter);

TEST(Utf8Test, LossyReplacesEachMaximalInvalidSubpart) {
  EXPECT_EQ(LossyUtf8("abc \xC3\xA9 \xF0\x9F\x98\x80"),
            "abc \xC3\xA9 \xF0\x9F\x98\x80");
  EXPECT_EQ(LossyUtf8("\xFF"), kFffd);
  EXPECT_EQ(LossyUtf8("\xE4\xBD"
                      "a"),
            kFffd + "a");
  EXPECT_EQ(LossyUtf8("\xF0\x9F\x98"), kFffd);
  // Overlong, surrogate and beyond-U+10FFFF forms: every byte is a subpart.
  EXPECT_EQ(LossyUtf8("\xC0\xAF"), kFffd + kFffd);
  EXPECT_EQ(LossyUtf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(LossyUtf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  // The example in the Unicode Standard, section 3.9, table 3-8.
  EXPECT_EQ(
      LossyUtf8("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
      "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));
  EXPECT_FALSE(IsValidUtf8("ok\xC3"));
}

TEST(ByteLevelTest, MapsBytesToGpt2Alphabet) {
  std::string mapped;
  AppendByteLevel(" \n!\xAD\xFF", &mapped);
  EXPECT_EQ(mapped, "Ġ\xC4\x8A!\xC5\x83\xC3\xBF");  // Ġ Ċ ! Ń ÿ
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  mapped.clear();
  AppendByteLevel(all, &mapped);
  std::string back;
  ASSERT_TRUE(AppendFromByteLevel(mapped, &back));
  EXPECT_EQ(back, all);
  back = "x";
  EXPECT_FALSE(AppendFromByteLevel("<｜begin", &back));
  EXPECT_EQ(back, "x");
}

TEST(RegexTest, TranslatesOnigurumaEscapes) {
  EXPECT_EQ(TranslateOnigurumaPattern(R"(\s+(?!\S)|[^\s\p{L}]|\\s|\h)"),
            R"(\p{White_Space}+(?!\P{White_Space})|[^\p{White_Space}\p{L}])"
            R"(|\\s|\p{ASCII_Hex_Digit})");
}

std::vector<std::pair<size_t, size_t>> Matches(const std::string& pattern,
                                               const std::string& text) {
  absl::StatusOr<std::unique_ptr<Regex>> regex =
      Regex::Compile(pattern, /*literal=*/false);
  EXPECT_TRUE(regex.ok()) << regex.status();
  return regex.ok() ? (*regex)->FindAll(text)
                    : std::vector<std::pair<size_t, size_t>>{};
}

TEST(RegexTest, UnicodeSemantics) {
  // \s is White_Space: U+0085 in, U+FEFF out.
  EXPECT_THAT(Matches(R"(\s+)", "a\xC2\x85\xEF\xBB\xBF"),
              ElementsAre(Pair(1, 3)));
  // Unicode case folding: 'ſ (long s) matches 's.
  EXPECT_THAT(Matches(R"((?i:'s))", "it'ſ"), ElementsAre(Pair(2, 5)));
  // \p{N} covers all numerics; {1,3} splits left to right.
  EXPECT_THAT(Matches(R"(\p{N}{1,3})", "12345 Ⅻ"),
              ElementsAre(Pair(0, 3), Pair(3, 5), Pair(6, 9)));
  // Empty matches yield nothing and do not stall.
  EXPECT_THAT(Matches("x*", "abxxc"), ElementsAre(Pair(2, 4)));
}

TEST(PreTokenizerTest, SequenceOfSplitsIsolatesMatches) {
  const nlohmann::json json = nlohmann::json::parse(R"({
    "type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"},
       "behavior": "Isolated", "invert": false},
      {"type": "Split", "pattern": {"String": "-"},
       "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})");
  absl::StatusOr<PreTokenizer> pre_tokenizer =
      PreTokenizer::FromJson(json, "pre_tokenizer");
  ASSERT_TRUE(pre_tokenizer.ok()) << pre_tokenizer.status();
  EXPECT_TRUE(pre_tokenizer->byte_level());
  std::vector<absl::string_view> pieces;
  pre_tokenizer->Split("ab12345-c-", &pieces);
  EXPECT_THAT(pieces, ElementsAre("ab", "123", "45", "-", "c", "-"));
}

TEST(AddedTokenMatcherTest, LeftmostLongest) {
  AddedTokenMatcher matcher;
  matcher.Add("<a>", 1);
  matcher.Add("<a><b>", 2);
  matcher.Add("b>", 3);
  const auto find = [&](absl::string_view text, size_t from) {
    const std::optional<AddedTokenMatcher::Match> match =
        matcher.Find(text, from);
    return match.has_value() ? std::vector<size_t>{match->begin, match->length,
                                                   size_t(match->id)}
                             : std::vector<size_t>{};
  };
  EXPECT_THAT(find("x<a><b>", 0), ElementsAre(1, 6, 2));
  EXPECT_THAT(find("x<a><c>", 0), ElementsAre(1, 3, 1));
  EXPECT_THAT(find("x<a><b>", 2), ElementsAre(5, 2, 3));
  EXPECT_THAT(find("<A><a", 0), ElementsAre());
}

}  // namespace
}  // namespace ringmoe::tokenizer

#include "base/json.h"

#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace ringmoe::json {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Json ParseOrDie(const std::string& text) {
  absl::StatusOr<Json> json = Parse(text);
  EXPECT_TRUE(json.ok()) << json.status();
  return json.ok() ? *std::move(json) : Json();
}

void ExpectInvalid(const absl::Status& status, const std::string& message) {
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(message));
}

TEST(ParseTest, ParsesValues) {
  const Json json = ParseOrDie(R"({"a": [1, 2.5, "x", null, true]})");
  EXPECT_EQ(json["a"].size(), 5);
  EXPECT_EQ(json["a"][2], "x");
}

TEST(ParseTest, BadTextIsAnErrorNotAnException) {
  for (const char* text : {"", "{", "{\"a\": }", "[1,]", "nul", "{} x"}) {
    absl::StatusOr<Json> json = Parse(text);
    ASSERT_FALSE(json.ok()) << text;
    ExpectInvalid(json.status(), "parse error");
  }
}

// Found by fuzzing (tests/fuzz/corpus/config/regression_number_overflow):
// nlohmann throws out_of_range, not parse_error, for these.
TEST(ParseTest, NumberOutOfRangeIsAnErrorNotAnException) {
  for (const char* text : {"1e400", "{\"a\": -21e4001}", "[0, 1E+999]"}) {
    absl::StatusOr<Json> json = Parse(text);
    ASSERT_FALSE(json.ok()) << text;
    ExpectInvalid(json.status(), "number overflow");
  }
}

TEST(ParseTest, KeepsTheLastOfRepeatedKeys) {
  EXPECT_EQ(ParseOrDie(R"({"a": 1, "a": 2})")["a"], 2);
}

TEST(ParseStrictTest, AcceptsWellFormedInput) {
  absl::StatusOr<Json> json = ParseStrict(R"({"a": {"b": [1]}})", 3);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)["a"]["b"][0], 1);
}

TEST(ParseStrictTest, RejectsSyntaxErrors) {
  ExpectInvalid(ParseStrict("{\"a\": ", 8).status(), "parse error");
}

TEST(ParseStrictTest, RejectsDuplicateKeys) {
  ExpectInvalid(ParseStrict(R"({"a": 1, "a": 2})", 8).status(),
                "duplicate key \"a\" in the top-level object");
  ExpectInvalid(ParseStrict(R"({"p": {"b": 1, "b": 2}})", 8).status(),
                "duplicate key \"b\" inside \"p\"");
  // The same key in different objects is fine.
  EXPECT_TRUE(ParseStrict(R"({"a": {"a": 1}, "b": {"a": 2}})", 8).ok());
}

TEST(ParseStrictTest, RejectsDeepNesting) {
  EXPECT_TRUE(ParseStrict("[[[1]]]", 3).ok());
  ExpectInvalid(ParseStrict("[[[[1]]]]", 3).status(),
                "JSON nested deeper than 3 levels");
  // Far deeper than any stack would take recursively.
  const std::string deep = std::string(1000000, '[');
  ExpectInvalid(ParseStrict(deep, 64).status(), "nested deeper");
}

TEST(ParseStrictTest, OrderedKeepsMemberOrderAndNumberForms) {
  absl::StatusOr<OrderedJson> json =
      ParseStrictOrdered(R"({"z": 1, "a": 1.0, "m": [2]})", 3);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->dump(), R"({"z":1,"a":1.0,"m":[2]})");
  ExpectInvalid(ParseStrictOrdered(R"({"a": 1, "a": 2})", 8).status(),
                "duplicate key");
  ExpectInvalid(ParseStrictOrdered("[[[[1]]]]", 3).status(), "nested deeper");
}

TEST(ParseStrictTest, RejectsNulBytes) {
  ExpectInvalid(ParseStrict(std::string("{}\0{", 4), 8).status(),
                "NUL byte at offset 2");
}

TEST(ParseFileTest, ReadsAndNamesTheFile) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string good = dir + "/good.json";
  const std::string bad = dir + "/bad.json";
  std::ofstream(good) << R"({"k": "v"})";
  std::ofstream(bad) << R"({"k": )";

  absl::StatusOr<Json> json = ParseFile(good);
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ((*json)["k"], "v");

  ExpectInvalid(ParseFile(bad).status(), bad + ": invalid JSON: ");

  const absl::Status missing = ParseFile(dir + "/missing.json").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr(dir + "/missing.json: cannot open"));
}

TEST(PathTest, JoinsKeysAndIndices) {
  EXPECT_EQ(FieldPath("", "model"), "model");
  EXPECT_EQ(FieldPath("model", "merges"), "model.merges");
  EXPECT_EQ(IndexPath("model.merges", 3), "model.merges[3]");
  ExpectInvalid(FieldError("a.b", "bad"), "a.b: bad");
  ExpectInvalid(FieldError("", "bad"), "document root: bad");
}

TEST(GetTest, ReadsRequiredMembers) {
  const Json json =
      ParseOrDie(R"({"s": "text", "l": [1], "n": null, "i": 4, "f": 4096.0})");
  absl::StatusOr<const Json*> member = GetMember(json, "n");
  ASSERT_TRUE(member.ok());
  EXPECT_TRUE((*member)->is_null());
  absl::StatusOr<const Json*> list = GetList(json, "l");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)->size(), 1);
  EXPECT_EQ(GetString(json, "s").value(), "text");
  EXPECT_EQ(GetPositiveInt(json, "i").value(), 4);
  EXPECT_EQ(GetPositiveInt(json, "f").value(), 4096);
}

TEST(GetTest, MissingRequiredMembersNameTheirPath) {
  const Json json = ParseOrDie(R"({"n": null, "zero": 0})");
  ExpectInvalid(GetMember(json, "x", "outer").status(),
                "missing required field 'outer.x'");
  ExpectInvalid(GetList(json, "x").status(), "missing required list field 'x'");
  ExpectInvalid(GetString(json, "x").status(),
                "missing required string field 'x'");
  ExpectInvalid(GetPositiveInt(json, "x").status(),
                "missing required integer field 'x'");
  // Null counts as missing for an integer, not for a string.
  ExpectInvalid(GetPositiveInt(json, "n").status(),
                "missing required integer field 'n'");
  ExpectInvalid(GetString(json, "n").status(),
                "field 'n' must be a string, got null");
  ExpectInvalid(GetPositiveInt(json, "zero").status(),
                "field 'zero' is 0, must be at least 1");
}

TEST(GetTest, WrongTypesNameThePathAndTheValue) {
  const Json json = ParseOrDie(
      R"({"s": 7, "l": {"a": 1}, "i": "two", "f": 1.5, "b": "yes",
          "d": [1], "e": [1, "x"]})");
  ExpectInvalid(GetString(json, "s", "p").status(),
                "field 'p.s' must be a string, got 7");
  ExpectInvalid(GetList(json, "l").status(),
                "field 'l' must be a list, got {\"a\":1}");
  ExpectInvalid(GetPositiveInt(json, "i").status(),
                "field 'i' must be an integer, got \"two\"");
  ExpectInvalid(GetOptionalInt(json, "f").status(),
                "field 'f' must be an integer, got 1.5");
  ExpectInvalid(GetOptionalBool(json, "b").status(),
                "field 'b' must be true or false, got \"yes\"");
  ExpectInvalid(GetOptionalDouble(json, "d").status(),
                "field 'd' must be a number, got [1]");
  ExpectInvalid(GetOptionalString(json, "s").status(),
                "field 's' must be a string, got 7");
  ExpectInvalid(GetIntOrIntList(json, "e").status(),
                "field 'e' must be an integer or a list of integers");
}

// Found by fuzzing (tests/fuzz/corpus/config/regression_float_outside_int64):
// the float-to-integer conversion ran before the range was known.
TEST(GetTest, WholeFloatsOutsideInt64AreNotIntegers) {
  const Json json = ParseOrDie(
      R"({"big": 5.1e105, "small": -1e19, "edge": 9223372036854775808.0,
          "low": -9223372036854775808.0})");
  for (const char* key : {"big", "small", "edge"}) {
    ExpectInvalid(GetOptionalInt(json, key).status(), "must be an integer");
  }
  EXPECT_EQ(GetOptionalInt(json, "low").value(),
            std::numeric_limits<int64_t>::min());
}

TEST(GetTest, LongValuesAreCut) {
  const Json json = {{"k", std::string(200, 'x')}};
  const absl::Status status = GetOptionalInt(json, "k").status();
  EXPECT_LT(status.message().size(), 120);
}

TEST(GetTest, OptionalMembers) {
  const Json json = ParseOrDie(
      R"({"i": 3, "d": 2, "b": false, "s": "x", "n": null, "one": 5,
          "list": [1, 2]})");
  EXPECT_EQ(GetOptionalInt(json, "i").value(), 3);
  EXPECT_EQ(GetOptionalDouble(json, "d").value(), 2.0);
  EXPECT_EQ(GetOptionalBool(json, "b").value(), false);
  EXPECT_EQ(GetOptionalString(json, "s").value(), "x");
  for (const char* key : {"n", "missing"}) {
    EXPECT_EQ(GetOptionalInt(json, key).value(), std::nullopt) << key;
    EXPECT_EQ(GetOptionalDouble(json, key).value(), std::nullopt) << key;
    EXPECT_EQ(GetOptionalBool(json, key).value(), std::nullopt) << key;
    EXPECT_EQ(GetOptionalString(json, key).value(), std::nullopt) << key;
    EXPECT_TRUE(GetIntOrIntList(json, key).value().empty()) << key;
  }
  EXPECT_THAT(GetIntOrIntList(json, "one").value(), ElementsAre(5));
  EXPECT_THAT(GetIntOrIntList(json, "list").value(), ElementsAre(1, 2));
}

TEST(GetTest, NestedLookupsCarryTheirPath) {
  const Json json = ParseOrDie(
      R"({"model": {"merges": ["a b", {"x": 1}]}, "rope": {"factor": "2"}})");
  absl::StatusOr<const Json*> model = GetMember(json, "model");
  ASSERT_TRUE(model.ok());
  absl::StatusOr<const Json*> merges = GetList(**model, "merges", "model");
  ASSERT_TRUE(merges.ok());
  const std::string item_path = IndexPath("model.merges", 1);
  ExpectInvalid(GetString((**merges)[1], "y", item_path).status(),
                "missing required string field 'model.merges[1].y'");
  ExpectInvalid(GetOptionalDouble(json["rope"], "factor", "rope").status(),
                "field 'rope.factor' must be a number, got \"2\"");
}

TEST(GetTest, ReadsOnlyFromObjects) {
  const Json list = ParseOrDie("[1]");
  ExpectInvalid(GetMember(list, "a").status(),
                "the document root must be an object, got [1]");
  ExpectInvalid(GetOptionalInt(list, "a", "outer.inner").status(),
                "field 'outer.inner' must be an object, got [1]");
}

}  // namespace
}  // namespace ringmoe::json

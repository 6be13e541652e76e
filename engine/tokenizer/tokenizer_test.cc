#include "engine/tokenizer/tokenizer.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "engine/tokenizer/test_data.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace ringmoe::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Json = nlohmann::json;

std::vector<int32_t> Ids(const Json& json) {
  return json.get<std::vector<int32_t>>();
}

// Golden tests over tests/testdata/tokenizers/<name>, one instance per name.
class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    tokenizer_ = testdata::GetTokenizer(GetParam());
    if (tokenizer_ == nullptr) {
      GTEST_SKIP() << GetParam() << ": tokenizer.json not found (for gpt_oss "
                   << "set RINGMOE_GPT_OSS_TOKENIZER_JSON)";
    }
  }

  std::vector<Json> Lines(const char* file) const {
    return testdata::ReadJsonLines(
        absl::StrCat(testdata::GoldenDir(GetParam()), "/", file));
  }

  const Tokenizer* tokenizer_ = nullptr;
};

// Every field of every line of cases.jsonl. The unicode_version_sensitive
// lines need Unicode 16 character tables, newer than PCRE2 10.42's; they are
// counted and reported, not required.
TEST_P(GoldenTest, Cases) {
  const std::vector<Json> cases = Lines("cases.jsonl");
  ASSERT_EQ(cases.size(), 188);
  int unicode16_total = 0;
  int unicode16_passed = 0;
  for (const Json& c : cases) {
    const std::string id = c["case_id"];
    // Invalid UTF-8 cases carry the raw bytes; `text` is their lossy decoding
    // and must tokenize the same.
    std::vector<std::string> inputs = {c["text"]};
    if (c.contains("text_hex")) {
      inputs.push_back(testdata::HexToBytes(c["text_hex"].get<std::string>()));
    }
    const std::vector<int32_t> ids = Ids(c["ids"]);
    const std::vector<int32_t> ids_with_special = Ids(c["ids_with_special"]);
    const std::string decoded = tokenizer_->Decode(ids);
    const std::string decoded_skip =
        tokenizer_->Decode(ids_with_special, /*skip_special_tokens=*/true);
    if (c["category"] == "unicode_version_sensitive") {
      ++unicode16_total;
      bool ok =
          decoded == c["decoded"] && decoded_skip == c["decoded_skip_special"];
      for (const std::string& input : inputs) {
        ok = ok && tokenizer_->Encode(input, false) == ids &&
             tokenizer_->Encode(input, true) == ids_with_special;
      }
      unicode16_passed += ok;
      continue;
    }
    for (const std::string& input : inputs) {
      EXPECT_EQ(tokenizer_->Encode(input, /*add_special_tokens=*/false), ids)
          << id;
      EXPECT_EQ(tokenizer_->Encode(input, /*add_special_tokens=*/true),
                ids_with_special)
          << id;
    }
    EXPECT_EQ(decoded, c["decoded"]) << id;
    EXPECT_EQ(decoded_skip, c["decoded_skip_special"]) << id;
  }
  ASSERT_GT(unicode16_total, 0);
  std::printf(
      "%s: unicode_version_sensitive (Unicode 16) cases passed: %d/%d\n",
      GetParam().c_str(), unicode16_passed, unicode16_total);
  RecordProperty("unicode16_passed", unicode16_passed);
  RecordProperty("unicode16_total", unicode16_total);
}

TEST_P(GoldenTest, DecodeLines) {
  const std::vector<Json> lines = Lines("decode.jsonl");
  ASSERT_GT(lines.size(), 30);
  for (const Json& line : lines) {
    const std::vector<int32_t> ids = Ids(line["ids"]);
    const std::string where = absl::StrCat(line["category"].get<std::string>(),
                                           " [", absl::StrJoin(ids, ","), "]");
    EXPECT_EQ(tokenizer_->Decode(ids, false), line["decoded"]) << where;
    EXPECT_EQ(tokenizer_->Decode(ids, true), line["decoded_skip_special"])
        << where;
  }
}

// chat.jsonl's rendered prompts, encoded without adding special tokens (the
// templates write BOS themselves). Special-token strings typed inside the
// content become special ids too.
TEST_P(GoldenTest, ChatPrompts) {
  const std::string path = testdata::GoldenDir(GetParam()) + "/chat.jsonl";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no chat.jsonl";
  const std::vector<Json> chats = testdata::ReadJsonLines(path);
  ASSERT_EQ(chats.size(), 10);
  for (size_t i = 0; i < chats.size(); ++i) {
    EXPECT_EQ(tokenizer_->Encode(chats[i]["prompt"].get<std::string>(), false),
              Ids(chats[i]["ids"]))
        << "chat line " << i + 1;
  }
}

TEST_P(GoldenTest, TokenStringsRoundTrip) {
  for (int32_t id = 0; id < tokenizer_->vocab_size(); id += 97) {
    const std::string token = tokenizer_->IdToToken(id);
    ASSERT_FALSE(token.empty()) << id;
    EXPECT_EQ(tokenizer_->TokenToId(token), id) << token;
  }
  EXPECT_EQ(tokenizer_->IdToToken(tokenizer_->vocab_size()), "");
  EXPECT_EQ(tokenizer_->IdToToken(-1), "");
  EXPECT_EQ(tokenizer_->TokenToId("no such token \x01"), std::nullopt);
}

// Out-of-range ids name no token and are skipped.
TEST_P(GoldenTest, DecodeSkipsUnknownIds) {
  const std::vector<int32_t> ids = tokenizer_->Encode("Hello world", false);
  std::vector<int32_t> noisy = {-5};
  noisy.insert(noisy.end(), ids.begin(), ids.end());
  noisy.push_back(tokenizer_->vocab_size());
  noisy.push_back(INT32_MAX);
  EXPECT_EQ(tokenizer_->Decode(noisy), tokenizer_->Decode(ids));
  EXPECT_EQ(tokenizer_->Decode(noisy), "Hello world");
}

// The server encodes from several threads while the pre-token cache fills.
TEST_P(GoldenTest, ConcurrentEncodeMatchesSequential) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> fresh =
      Tokenizer::FromFile(testdata::TokenizerJsonPath(GetParam()));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const std::vector<Json> cases = Lines("cases.jsonl");
  std::vector<std::vector<std::vector<int32_t>>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 2; ++round) {
        results[t].clear();
        for (const Json& c : cases) {
          results[t].push_back((*fresh)->Encode(c["text"].get<std::string>()));
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (size_t t = 0; t < results.size(); ++t) {
    ASSERT_EQ(results[t].size(), cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(results[t][i],
                tokenizer_->Encode(cases[i]["text"].get<std::string>()))
          << cases[i]["case_id"];
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, GoldenTest,
                         ::testing::ValuesIn(testdata::AllNames()),
                         [](const auto& info) { return info.param; });

const Tokenizer& Get(absl::string_view name) {
  const Tokenizer* tokenizer = testdata::GetTokenizer(name);
  EXPECT_NE(tokenizer, nullptr) << name;
  return *tokenizer;
}

TEST(TokenizerTest, SpecialTokenIds) {
  const Tokenizer& qwen3 = Get("qwen3");
  EXPECT_EQ(qwen3.bos_token_id(), std::nullopt);
  EXPECT_EQ(qwen3.eos_token_id(), 151645);  // <|im_end|>
  EXPECT_EQ(qwen3.vocab_size(), 151669);
  EXPECT_TRUE(qwen3.IsSpecial(151644));  // <|im_start|>
  EXPECT_FALSE(qwen3.IsSpecial(*qwen3.TokenToId("<think>")));
  EXPECT_FALSE(qwen3.IsSpecial(9707));  // "Hello"

  const Tokenizer& deepseek = Get("deepseek_v3");
  EXPECT_EQ(deepseek.bos_token_id(), 0);
  EXPECT_EQ(deepseek.eos_token_id(), 1);
  EXPECT_EQ(deepseek.vocab_size(), 128815);
  EXPECT_EQ(deepseek.IdToToken(0), "<｜begin▁of▁sentence｜>");

  const Tokenizer& mistral = Get("mistral");
  EXPECT_EQ(mistral.bos_token_id(), 1);
  EXPECT_EQ(mistral.eos_token_id(), 2);
  EXPECT_EQ(mistral.vocab_size(), 32000);
  EXPECT_THAT(mistral.Encode(""), ElementsAre(1));
  EXPECT_THAT(mistral.Encode("", false), ElementsAre());
}

TEST(TokenizerTest, LoadTokenizerAcceptsDirectoryOrFile) {
  const std::string dir = testdata::GoldenDir("mistral");
  for (const std::string& path : {dir, dir + "/tokenizer.json"}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(path);
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
    EXPECT_THAT((*tokenizer)->Encode("Hello world!"),
                ElementsAre(1, 22557, 1526, 28808));
  }
}

// Loading errors, on small files written for the purpose.
class LoadErrorTest : public ::testing::Test {
 protected:
  // Writes tokenizer.json (and tokenizer_config.json unless empty) into a
  // fresh directory and loads them.
  absl::Status Load(const std::string& tokenizer_json,
                    const std::string& config_json = "") {
    dir_ = absl::StrCat(
        std::getenv("TEST_TMPDIR"), "/",
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ + "/tokenizer.json") << tokenizer_json;
    if (!config_json.empty()) {
      std::ofstream(dir_ + "/tokenizer_config.json") << config_json;
    }
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        Tokenizer::FromDirectory(dir_);
    if (tokenizer.ok()) tokenizer_ = *std::move(tokenizer);
    return tokenizer.status();
  }

  // A tiny BPE tokenizer.json (vocab a, b, ab, <unk>), with extra model
  // fields, merges and top-level fields spliced in.
  static std::string Minimal(const std::string& model_extra = "",
                             const std::string& merges = R"(["a b"])",
                             const std::string& top_extra = "") {
    return absl::StrCat(
        R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2,)",
        R"( "<unk>": 3})", model_extra, R"(, "merges": )", merges, "}",
        top_extra, "}");
  }

  std::string dir_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(LoadErrorTest, MissingFileIsNotFound) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::FromFile("/nonexistent/tokenizer.json");
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(tokenizer.status().message(),
              HasSubstr("/nonexistent/tokenizer.json"));
}

TEST_F(LoadErrorTest, InvalidJsonNamesTheFile) {
  const absl::Status status = Load("{\"model\": ");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tokenizer.json: invalid JSON"));
}

TEST_F(LoadErrorTest, MinimalFileLoadsAndEncodes) {
  ASSERT_TRUE(Load(Minimal()).ok());
  EXPECT_THAT(tokenizer_->Encode("abab"), ElementsAre(2, 2));
  EXPECT_EQ(tokenizer_->Decode({2, 0}), "ab a");  // No decoder: joined by " ".
}

TEST_F(LoadErrorTest, UnsupportedModelType) {
  const absl::Status status =
      Load(R"({"model": {"type": "Unigram", "vocab": []}})");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("tokenizer.json: model.type"));
  EXPECT_THAT(status.message(), HasSubstr("Unigram"));
}

TEST_F(LoadErrorTest, MergeOutsideVocab) {
  const absl::Status status = Load(Minimal("", R"(["a b", ["b", "c"]])"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.merges[1]"));
  EXPECT_THAT(status.message(), HasSubstr("\"c\""));
}

TEST_F(LoadErrorTest, WrongFieldTypeNamesThePath) {
  const absl::Status status = Load(Minimal(
      "", R"(["a b"])", R"(, "added_tokens": [{"id": 3, "content": 7}])"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("added_tokens[0].content"));
}

TEST_F(LoadErrorTest, UnsupportedPreTokenizer) {
  const absl::Status status = Load(
      Minimal("", R"(["a b"])", R"(, "pre_tokenizer": {"type": "Metaspace"})"));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(status.message(), HasSubstr("pre_tokenizer.type"));
}

TEST_F(LoadErrorTest, BadRegexNamesThePattern) {
  const absl::Status status =
      Load(Minimal("", R"(["a b"])",
                   R"(, "pre_tokenizer": {"type": "Split", "pattern": )"
                   R"({"Regex": "(unclosed"}, "behavior": "Isolated"})"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("pre_tokenizer.pattern"));
  EXPECT_THAT(status.message(), HasSubstr("(unclosed"));
}

TEST_F(LoadErrorTest, ConfigTokenOutsideVocabNamesTheConfig) {
  const absl::Status status = Load(Minimal(), R"({"bos_token": "<s>"})");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tokenizer_config.json: bos_token"));
}

// Llama tokenizer classes get Python transformers' BOS/EOS post-processor.
TEST_F(LoadErrorTest, LlamaConfigAddsBosAndEos) {
  ASSERT_TRUE(Load(Minimal(), R"({"tokenizer_class": "LlamaTokenizerFast",)"
                              R"( "bos_token": "a", "eos_token": {"content":)"
                              R"( "b"}, "add_eos_token": true})")
                  .ok());
  EXPECT_THAT(tokenizer_->Encode("ab"), ElementsAre(0, 2, 1));
  EXPECT_THAT(tokenizer_->Encode("ab", false), ElementsAre(2));
}

// Characters outside the vocabulary: unk, fused when fuse_unk.
TEST_F(LoadErrorTest, UnknownCharacters) {
  ASSERT_TRUE(
      Load(Minimal(R"(, "unk_token": "<unk>", "fuse_unk": true)")).ok());
  EXPECT_THAT(tokenizer_->Encode("xyabz"), ElementsAre(3, 2, 3));
  ASSERT_TRUE(Load(Minimal(R"(, "unk_token": "<unk>")")).ok());
  EXPECT_THAT(tokenizer_->Encode("xyabz"), ElementsAre(3, 3, 2, 3));
}

}  // namespace
}  // namespace ringmoe::tokenizer

#include "server/kserve_request.h"

#include <memory>
#include <string>

#include "engine/runtime/engine.h"
#include "gtest/gtest.h"

namespace ringmoe::server {
namespace {

// The adder: a model with a tokenizer, so text prompts go through.
class KServeRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    runtime::EngineOptions options;
    options.model_dir = "tests/testdata/moe-adder";
    auto engine = runtime::Engine::Load(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = engine->release();
  }
  static void TearDownTestSuite() { delete engine_; }

  serving::ServedModel Model() const {
    serving::ServedModel model;
    model.name = "adder";
    model.engine = engine_;
    return model;
  }

  static runtime::Engine* engine_;
};

runtime::Engine* KServeRequestTest::engine_;

inference::ModelInferRequest TextRequest(const std::string& text) {
  inference::ModelInferRequest r;
  r.set_model_name("adder");
  r.set_id("r1");
  auto* t = r.add_inputs();
  t->set_name("text_input");
  t->set_datatype("BYTES");
  t->add_shape(1);
  t->mutable_contents()->add_bytes_contents(text);
  return r;
}

TEST_F(KServeRequestTest, TextWithSettingsFromEveryPlace) {
  inference::ModelInferRequest r = TextRequest("37+485=");
  (*r.mutable_parameters())["max_tokens"].set_int64_param(4);
  (*r.mutable_parameters())["stop"].set_string_param("9");
  auto* temperature = r.add_inputs();
  temperature->set_name("temperature");
  temperature->set_datatype("FP32");
  temperature->add_shape(1);
  temperature->mutable_contents()->add_fp32_contents(0.5f);
  auto* json = r.add_inputs();
  json->set_name("sampling_parameters");
  json->set_datatype("BYTES");
  json->add_shape(1);
  json->mutable_contents()->add_bytes_contents(
      R"({"top_k": 5, "stop": ["x"], "seed": 7})");
  absl::StatusOr<InferJob> job = ParseInferRequest(Model(), r, true);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id, "r1");
  EXPECT_TRUE(job->stream);
  EXPECT_EQ(job->generation.id, "r1");
  EXPECT_EQ(job->generation.prompt_ids,
            engine_->tokenizer()->Encode("37+485=", true));
  EXPECT_EQ(job->generation.max_tokens, 4);
  EXPECT_FLOAT_EQ(job->generation.sampling.temperature, 0.5f);
  EXPECT_EQ(job->generation.sampling.top_k, 5);
  EXPECT_EQ(*job->generation.sampling.seed, 7u);
  EXPECT_EQ(job->generation.sampling.stop_strings,
            (std::vector<std::string>{"9", "x"}));
  EXPECT_EQ(job->outputs, (std::vector<std::string>{"text_output"}));
  // A unary call answers with the whole text.
  EXPECT_FALSE(ParseInferRequest(Model(), r, false)->stream);
}

TEST_F(KServeRequestTest, TextErrorsNameTheirCause) {
  auto expect = [this](const inference::ModelInferRequest& r,
                       const std::string& want) {
    absl::Status s = ParseInferRequest(Model(), r, false).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
  };
  expect(TextRequest(""), "'text_input' is empty");
  inference::ModelInferRequest r = TextRequest("1+1=");
  (*r.mutable_parameters())["top_k"].set_double_param(1.5);
  expect(r, "'top_k' must be an integer");
  r = TextRequest("1+1=");
  r.add_outputs()->set_name("logits");
  expect(r, "unknown output 'logits' for text_input");
  r = TextRequest("1+1=");
  auto* bad = r.add_inputs();
  bad->set_name("sampling_parameters");
  bad->set_datatype("BYTES");
  bad->add_shape(1);
  bad->mutable_contents()->add_bytes_contents(R"({"best_of": 2})");
  expect(r, "'best_of' is not supported");
  r = TextRequest("1+1=");
  r.set_id(std::string(1000, 'x'));
  expect(r, "more than the limit of 256");
  r = TextRequest("1+1=");
  r.set_model_version("2");
  expect(r, "has no version '2'");
}

TEST_F(KServeRequestTest, InputIdsToLogits) {
  inference::ModelInferRequest r;
  r.set_model_name("adder");
  auto* t = r.add_inputs();
  t->set_name("input_ids");
  t->set_datatype("FP32");
  t->add_shape(1);
  t->add_shape(1);
  t->mutable_contents()->add_fp32_contents(1);
  absl::Status s = ParseInferRequest(Model(), r, false).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("INT32 or INT64"), absl::string_view::npos) << s;
  t->set_datatype("INT32");
  t->clear_contents();
  t->mutable_contents()->add_int_contents(1);
  t->mutable_contents()->add_int_contents(2);
  t->clear_shape();
  t->add_shape(2);
  s = ParseInferRequest(Model(), r, false).status();
  EXPECT_NE(s.message().find("[batch, seq]"), absl::string_view::npos) << s;
  t->clear_shape();
  t->add_shape(2);
  t->add_shape(1);
  absl::StatusOr<InferJob> job = ParseInferRequest(Model(), r, false);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_TRUE(job->logits);
  EXPECT_EQ(job->rows, (std::vector<std::vector<int32_t>>{{1}, {2}}));
  r.set_model_name("nope");
  EXPECT_EQ(ParseInferRequest(Model(), r, false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ringmoe::server

// Both front ends in-process: request parsing errors, and calls through a
// real gRPC channel against the tiny Mixtral.
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/engine.h"
#include "engine/serving/scheduler.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"
#include "server/generation_service.h"
#include "server/kserve_service.h"
#include "server/kserve_tensors.h"
#include "server/metrics.h"
#include "server/open_calls.h"
#include "server/service_util.h"
#include "server/unparsable_request_interceptor.h"

namespace ringmoe::server {

using serving::Scheduler;
using serving::ServedModel;
namespace {

class ServicesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    runtime::EngineOptions options;
    options.model_dir = "tests/testdata/moe-tiny/mixtral";
    auto engine = runtime::Engine::Load(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = engine->release();
    metrics_ = new Metrics(std::make_shared<prometheus::Registry>());
    scheduler_ = new Scheduler(engine_, {}, metrics_);
    model_ = new ServedModel{"tiny", engine_, scheduler_, metrics_};
    generation_ = new GenerationService(*model_);
    kserve_ = new KServeService(*model_, "test");
    grpc::ServerBuilder builder;
    std::vector<
        std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(UnparsableRequestInterceptorFactory(metrics_));
    open_calls_ = new OpenCalls;
    interceptors.push_back(open_calls_->InterceptorFactory());
    grpc::EnableDefaultHealthCheckService(true);
    builder.experimental().SetInterceptorCreators(std::move(interceptors));
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(generation_);
    builder.RegisterService(kserve_);
    server_ = builder.BuildAndStart().release();
    channel_ = new std::shared_ptr<grpc::Channel>(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
  }

  static void TearDownTestSuite() {
    server_->Shutdown();
    delete server_;
    delete scheduler_;
  }

  static runtime::Engine* engine_;
  static Metrics* metrics_;
  static Scheduler* scheduler_;
  static ServedModel* model_;
  static GenerationService* generation_;
  static KServeService* kserve_;
  static grpc::Server* server_;
  static OpenCalls* open_calls_;
  static std::shared_ptr<grpc::Channel>* channel_;
};

runtime::Engine* ServicesTest::engine_;
Metrics* ServicesTest::metrics_;
Scheduler* ServicesTest::scheduler_;
ServedModel* ServicesTest::model_;
GenerationService* ServicesTest::generation_;
KServeService* ServicesTest::kserve_;
grpc::Server* ServicesTest::server_;
OpenCalls* ServicesTest::open_calls_;
std::shared_ptr<grpc::Channel>* ServicesTest::channel_;

std::string RenderMetrics(const Metrics& metrics) {
  return prometheus::TextSerializer().Serialize(metrics.registry()->Collect());
}

TEST_F(ServicesTest, GenerateRequestErrors) {
  v1::GenerateRequest r;
  r.set_text("hello");
  EXPECT_NE(
      RequestFromProto(*model_, r).status().message().find("no tokenizer"),
      absl::string_view::npos);
  r.clear_text();
  EXPECT_NE(RequestFromProto(*model_, r).status().message().find("empty"),
            absl::string_view::npos);
  r.add_input_ids(1);
  r.set_model("other");
  EXPECT_NE(RequestFromProto(*model_, r)
                .status()
                .message()
                .find("unknown model 'other'"),
            absl::string_view::npos);
  r.set_model("tiny");
  r.set_max_tokens(0);
  auto ok = RequestFromProto(*model_, r);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->max_tokens, 0);  // present: the scheduler refuses it
}

TEST_F(ServicesTest, GenerateConversationNeedsATemplateAndJson) {
  v1::GenerateRequest r;
  v1::ChatMessage* m = r.add_messages();
  m->set_role("user");
  m->set_content("hi");
  absl::Status s = RequestFromProto(*model_, r).status();
  // The tiny model has no tokenizer (and so no template).
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("no tokenizer"), absl::string_view::npos) << s;
  r.set_tools_json("[not json");
  s = RequestFromProto(*model_, r).status();
  EXPECT_NE(s.message().find("tools_json is not valid JSON"),
            absl::string_view::npos)
      << s;
  r.clear_tools_json();
  r.add_input_ids(1);
  s = RequestFromProto(*model_, r).status();
  EXPECT_NE(s.message().find("give one prompt"), absl::string_view::npos) << s;
}

TEST_F(ServicesTest, GenerateStreamsAndLogitsAnswer) {
  auto stub = v1::Generation::NewStub(*channel_);
  grpc::ClientContext context;
  v1::GenerateRequest request;
  for (int id : {1, 2, 3}) request.add_input_ids(id);
  request.set_max_tokens(5);
  request.mutable_sampling()->set_temperature(0);
  request.set_ignore_eos(true);
  auto reader = stub->Generate(&context, request);
  v1::GenerateResponse response;
  int tokens = 0;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  while (reader->Read(&response)) {
    tokens += response.token_ids_size();
    reason = response.finish_reason();
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 5);
  EXPECT_EQ(reason, v1::FINISH_REASON_LENGTH);
  // Counted before the client saw its status: a scrape now finds it.
  EXPECT_NE(RenderMetrics(*metrics_).find(
                "ringmoe_requests_total{method=\"Generate\",status=\"OK\"}"),
            std::string::npos);

  auto kserve = inference::GRPCInferenceService::NewStub(*channel_);
  grpc::ClientContext infer_context;
  inference::ModelInferRequest infer;
  infer.set_model_name("tiny");
  infer.set_id("abc");
  auto* t = infer.add_inputs();
  t->set_name("input_ids");
  t->set_datatype("INT64");
  t->add_shape(2);
  t->add_shape(2);
  for (int64_t id : {1, 2, 3, 4}) t->mutable_contents()->add_int64_contents(id);
  inference::ModelInferResponse out;
  ASSERT_TRUE(kserve->ModelInfer(&infer_context, infer, &out).ok());
  EXPECT_EQ(out.id(), "abc");
  ASSERT_EQ(out.outputs_size(), 1);
  EXPECT_EQ(out.outputs(0).name(), "logits");
  EXPECT_EQ(out.outputs(0).shape(1), 512);
  EXPECT_EQ(out.outputs(0).contents().fp32_contents_size(), 2 * 512);
}

// What a shutdown waits for: our calls from start to end, and not gRPC's
// own (a health watch open meanwhile).
TEST_F(ServicesTest, OpenCallsAreOursFromStartToEnd) {
  ASSERT_TRUE(open_calls_->WaitUntilNone(absl::Seconds(10)));
  // A health watch, open throughout.
  grpc::GenericStub generic(*channel_);
  grpc::CompletionQueue cq;
  grpc::ClientContext watch_context;
  auto watch =
      generic.PrepareCall(&watch_context, "/grpc.health.v1.Health/Watch", &cq);
  void* tag;
  bool ok;
  auto await = [&](intptr_t want) {
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_EQ(reinterpret_cast<intptr_t>(tag), want);
  };
  watch->StartCall(reinterpret_cast<void*>(1));
  await(1);
  grpc::Slice empty("");
  grpc::ByteBuffer watch_request(&empty, 1);
  watch->WriteLast(watch_request, grpc::WriteOptions(),
                   reinterpret_cast<void*>(2));
  await(2);
  grpc::ByteBuffer health;
  watch->Read(&health, reinterpret_cast<void*>(3));
  await(3);
  ASSERT_TRUE(ok) << "the watch sent no status";

  // A KServe stream, open until its client half-closes and reads the end.
  auto kserve = inference::GRPCInferenceService::NewStub(*channel_);
  grpc::ClientContext stream_context;
  auto stream = kserve->ModelStreamInfer(&stream_context);
  inference::ModelInferRequest infer;
  infer.set_model_name("tiny");
  auto* t = infer.add_inputs();
  t->set_name("input_ids");
  t->set_datatype("INT64");
  t->add_shape(1);
  t->add_shape(2);
  for (int64_t id : {1, 2}) t->mutable_contents()->add_int64_contents(id);
  ASSERT_TRUE(stream->Write(infer));
  inference::ModelStreamInferResponse answer;
  ASSERT_TRUE(stream->Read(&answer));
  EXPECT_EQ(answer.error_message(), "");
  // Answered, and still open: counted, the watch not.
  EXPECT_EQ(open_calls_->count(), 1);
  EXPECT_FALSE(open_calls_->WaitUntilNone(absl::Milliseconds(50)));
  ASSERT_TRUE(stream->WritesDone());
  while (stream->Read(&answer)) {
  }
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_TRUE(open_calls_->WaitUntilNone(absl::Seconds(10)));

  watch_context.TryCancel();
  grpc::Status watch_status;
  watch->Finish(&watch_status, reinterpret_cast<void*>(4));
  for (bool finished = false; !finished;) {
    ASSERT_TRUE(cq.Next(&tag, &ok));
    finished = tag == reinterpret_cast<void*>(4);
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

// Sends `bytes` as the request of unary `method`; returns the status.
grpc::Status CallWithBytes(const std::shared_ptr<grpc::Channel>& channel,
                           const std::string& method,
                           const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(status); });
  return done.get_future().get();
}

TEST_F(ServicesTest, UnparsableRequestsAreInvalidArgumentAndCounted) {
  // Field 1 claims 255 bytes that are not there.
  const grpc::Status garbage = CallWithBytes(
      *channel_, "/inference.GRPCInferenceService/ModelInfer", "\x0a\xff");
  EXPECT_EQ(garbage.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(garbage.error_message().find("not a valid message for ModelInfer"),
            std::string::npos)
      << garbage.error_message();
  // A string field (model_name) that is not UTF-8.
  const grpc::Status not_utf8 =
      CallWithBytes(*channel_, "/inference.GRPCInferenceService/ModelMetadata",
                    std::string("\x0a\x02\xff\xfe", 4));
  EXPECT_EQ(not_utf8.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  const std::string text = RenderMetrics(*metrics_);
  EXPECT_NE(text.find("ringmoe_requests_total{method=\"ModelInfer\",status="
                      "\"INVALID_ARGUMENT\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("ringmoe_requests_total{method=\"ModelMetadata\","
                      "status=\"INVALID_ARGUMENT\"} 1"),
            std::string::npos)
      << text;
}

TEST(ServiceUtilTest, StatusConversion) {
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(ToGrpcStatus(absl::ResourceExhaustedError("x")).error_message(),
            "x");
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
}

}  // namespace
}  // namespace ringmoe::server

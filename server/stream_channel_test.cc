#include "server/stream_channel.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe::server {
namespace {

// A response with the one protobuf method the channel uses.
struct Text {
  std::string s;
  Text() = default;
  Text(const char* text) : s(text) {}  // NOLINT: brevity in tests
  explicit Text(std::string text) : s(std::move(text)) {}
  size_t ByteSizeLong() const { return s.size(); }
};

// Records what the channel asks of a gRPC reactor.
struct FakeReactor {
  std::vector<std::string> written;
  int writes_in_flight = 0;
  bool finished = false;
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  std::string message;
  void StartWrite(const Text* t) {
    written.push_back(t->s);
    ++writes_in_flight;
  }
  void Finish(const grpc::Status& s) {
    finished = true;
    code = s.error_code();
    message = s.error_message();
  }
};

using Channel = StreamChannel<FakeReactor, Text>;

// What on_finish was told, and whether the reactor had been finished yet.
struct FinishLog {
  std::vector<grpc::StatusCode> codes;
  bool reactor_finished_first = false;
  Channel::FinishFn Recorder(const FakeReactor& r) {
    return [this, &r](grpc::StatusCode code) {
      codes.push_back(code);
      reactor_finished_first |= r.finished;
    };
  }
};

TEST(StreamChannelTest, OneWriteAtATimeThenFinish) {
  FakeReactor r;
  FinishLog log;
  Channel channel(&r, nullptr, log.Recorder(r));
  EXPECT_TRUE(channel.Push("a"));
  EXPECT_TRUE(channel.Push("b"));
  channel.Finish(grpc::Status::OK);
  EXPECT_EQ(r.written, std::vector<std::string>{"a"});
  EXPECT_FALSE(r.finished);
  channel.OnWriteDone(true);
  EXPECT_EQ(r.written, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(r.finished);
  channel.OnWriteDone(true);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.code, grpc::StatusCode::OK);
  EXPECT_FALSE(channel.Push("late"));
  // Reported once, before gRPC could tell the client.
  channel.Finish(grpc::Status::OK);
  EXPECT_EQ(log.codes, std::vector<grpc::StatusCode>{grpc::StatusCode::OK});
  EXPECT_FALSE(log.reactor_finished_first);
}

TEST(StreamChannelTest, MergesWhileAWriteIsInFlight) {
  FakeReactor r;
  Channel channel(&r, [](Text& last, const Text& next) {
    last.s += next.s;
    return true;
  });
  channel.Push("a");
  channel.Push("b");
  channel.Push("c");
  channel.OnWriteDone(true);
  EXPECT_EQ(r.written, (std::vector<std::string>{"a", "bc"}));
}

TEST(StreamChannelTest, FailedWriteFinishesCancelledAndDetachDropsPushes) {
  FakeReactor r;
  FinishLog log;
  Channel channel(&r, nullptr, log.Recorder(r));
  channel.Push("a");
  channel.Push("b");
  channel.OnWriteDone(false);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.code, grpc::StatusCode::CANCELLED);
  EXPECT_EQ(log.codes,
            std::vector<grpc::StatusCode>{grpc::StatusCode::CANCELLED});
  channel.Detach();
  EXPECT_FALSE(channel.Push("c"));
  EXPECT_EQ(r.written, std::vector<std::string>{"a"});
}

TEST(StreamChannelTest, AbortReplacesOnlyAStatusNotYetSent) {
  // Finished while a write is in flight: the OK status is not out yet, so
  // a cancel now is what the client sees.
  FakeReactor queued;
  FinishLog before_log;
  Channel before(&queued, nullptr, before_log.Recorder(queued));
  before.Push("a");
  before.Push("b");
  before.Finish(grpc::Status::OK);
  before.Abort(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  EXPECT_FALSE(queued.finished);
  before.OnWriteDone(true);
  EXPECT_TRUE(queued.finished);
  EXPECT_EQ(queued.code, grpc::StatusCode::CANCELLED);
  EXPECT_EQ(before_log.codes,
            std::vector<grpc::StatusCode>{grpc::StatusCode::CANCELLED});
  EXPECT_EQ(queued.written, std::vector<std::string>{"a"});

  // The status already went out: a cancel crossing it changes nothing.
  FakeReactor sent;
  FinishLog after_log;
  Channel after(&sent, nullptr, after_log.Recorder(sent));
  after.Push("a");
  after.OnWriteDone(true);
  after.Finish(grpc::Status::OK);
  EXPECT_TRUE(sent.finished);
  after.Abort(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
  EXPECT_EQ(sent.code, grpc::StatusCode::OK);
  EXPECT_EQ(after_log.codes,
            std::vector<grpc::StatusCode>{grpc::StatusCode::OK});

  // Finished while a write is in flight, and the write fails: the client
  // is gone before the OK status could go out.
  FakeReactor gone;
  FinishLog failed_log;
  Channel failed(&gone, nullptr, failed_log.Recorder(gone));
  failed.Push("a");
  failed.Finish(grpc::Status::OK);
  failed.OnWriteDone(false);
  EXPECT_TRUE(gone.finished);
  EXPECT_EQ(gone.code, grpc::StatusCode::CANCELLED);
  EXPECT_EQ(failed_log.codes,
            std::vector<grpc::StatusCode>{grpc::StatusCode::CANCELLED});
}

TEST(StreamChannelTest, AClientThatDoesNotReadIsCutOffAtTheLimit) {
  StreamBuffers::SetLimits(/*per_stream=*/100, /*total=*/250);
  const int64_t overflows = StreamBuffers::overflows();
  FakeReactor r;
  {
    Channel channel(&r);
    // The first write is in flight (and never completes); the rest wait.
    EXPECT_TRUE(channel.Push(Text(std::string(60, 'x'))));
    EXPECT_TRUE(channel.Push(Text(std::string(60, 'y'))));
    EXPECT_EQ(StreamBuffers::buffered_bytes(), 60);
    EXPECT_TRUE(channel.Push(Text(std::string(30, 'z'))));
    EXPECT_FALSE(channel.Push(Text(std::string(30, 'w'))));  // 120 > 100
    EXPECT_EQ(StreamBuffers::overflows(), overflows + 1);
    EXPECT_EQ(StreamBuffers::buffered_bytes(), 0);
    // The queue is dropped; the call ends once the write in flight does.
    channel.OnWriteDone(true);
    EXPECT_TRUE(r.finished);
    EXPECT_EQ(r.code, grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(r.message.find("not reading"), std::string::npos) << r.message;
    EXPECT_EQ(r.written.size(), 1u);
  }
  // The process-wide limit binds several streams together.
  FakeReactor a, b, c;
  Channel ca(&a), cb(&b), cc(&c);
  for (Channel* ch : {&ca, &cb, &cc}) ch->Push("first");  // in flight
  EXPECT_TRUE(ca.Push(Text(std::string(90, 'a'))));
  EXPECT_TRUE(cb.Push(Text(std::string(90, 'b'))));
  EXPECT_FALSE(cc.Push(Text(std::string(90, 'c'))));  // 270 > 250
  EXPECT_TRUE(ca.Push("small"));
  StreamBuffers::SetLimits(int64_t{64} << 20, int64_t{1} << 30);
}

}  // namespace
}  // namespace ringmoe::server

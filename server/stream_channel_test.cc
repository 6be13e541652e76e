#include "server/stream_channel.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace ringmoe::server {
namespace {

// Records what the channel asks of a gRPC reactor.
struct FakeReactor {
  std::vector<std::string> written;
  int writes_in_flight = 0;
  bool finished = false;
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  void StartWrite(const std::string* s) {
    written.push_back(*s);
    ++writes_in_flight;
  }
  void Finish(const grpc::Status& s) {
    finished = true;
    code = s.error_code();
  }
};

using Channel = StreamChannel<FakeReactor, std::string>;

TEST(StreamChannelTest, OneWriteAtATimeThenFinish) {
  FakeReactor r;
  Channel channel(&r);
  channel.Push("a");
  channel.Push("b");
  channel.Finish(grpc::Status::OK);
  EXPECT_EQ(r.written, std::vector<std::string>{"a"});
  EXPECT_FALSE(r.finished);
  channel.OnWriteDone(true);
  EXPECT_EQ(r.written, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(r.finished);
  channel.OnWriteDone(true);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.code, grpc::StatusCode::OK);
}

TEST(StreamChannelTest, MergesWhileAWriteIsInFlight) {
  FakeReactor r;
  Channel channel(&r, [](std::string& last, const std::string& next) {
    last += next;
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
  Channel channel(&r);
  channel.Push("a");
  channel.Push("b");
  channel.OnWriteDone(false);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.code, grpc::StatusCode::CANCELLED);
  EXPECT_EQ(channel.final_code(), grpc::StatusCode::CANCELLED);
  channel.Detach();
  channel.Push("c");
  EXPECT_EQ(r.written, std::vector<std::string>{"a"});
}

}  // namespace
}  // namespace ringmoe::server

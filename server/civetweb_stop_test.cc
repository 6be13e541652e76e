#include "server/civetweb_stop.h"

#include <memory>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "prometheus/exposer.h"
#include "server/http_server.h"

namespace ringmoe::server {
namespace {

// Civetweb's listener polls for two seconds at a time from its start: a
// server stopped 0.1 s after it started would take 1.9 s left to itself.
// What is asserted: well under that, with room for a loaded machine.
constexpr absl::Duration kPromptStop = absl::Milliseconds(1000);

TEST(CivetwebStopTest, HttpServerStopsWithinMilliseconds) {
  for (const char* host : {"127.0.0.1", "0.0.0.0"}) {
    HttpServerOptions options;
    options.host = host;
    options.port = 0;
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start(options, [](const HttpRequest&, HttpResponse& r) {
          r.Send(200, "text/plain", "ok");
        });
    ASSERT_TRUE(server.ok()) << server.status();
    absl::SleepFor(absl::Milliseconds(100));
    const absl::Time start = absl::Now();
    server->reset();
    EXPECT_LT(absl::Now() - start, kPromptStop) << host;
  }
}

TEST(CivetwebStopTest, ExposerStopsWithinMilliseconds) {
  auto exposer = std::make_unique<prometheus::Exposer>(
      std::vector<std::string>{"listening_ports", "127.0.0.1:0"});
  const std::vector<int> ports = exposer->GetListeningPorts();
  ASSERT_EQ(ports.size(), 1u);
  absl::SleepFor(absl::Milliseconds(100));
  const absl::Time start = absl::Now();
  StopCivetwebPromptly("127.0.0.1", ports, [&exposer] { exposer.reset(); });
  EXPECT_LT(absl::Now() - start, kPromptStop);
  EXPECT_EQ(exposer, nullptr);
}

// An address nothing answers on only loses the speed-up: the stop still
// returns, at civetweb's pace.
TEST(CivetwebStopTest, UnreachablePortStillStops) {
  auto exposer = std::make_unique<prometheus::Exposer>(
      std::vector<std::string>{"listening_ports", "127.0.0.1:0"});
  const absl::Time start = absl::Now();
  StopCivetwebPromptly("127.0.0.1", {0}, [&exposer] { exposer.reset(); });
  EXPECT_EQ(exposer, nullptr);
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

}  // namespace
}  // namespace ringmoe::server

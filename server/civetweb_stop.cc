#include "server/civetweb_stop.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace ringmoe::server {
namespace {

// One connection to host:port, closed at once. Nonblocking would gain
// nothing: a connect to a listening port on this machine completes or is
// refused without waiting.
void Knock(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  // Civetweb binds "[::]" style addresses with brackets; the resolver
  // wants them bare.
  std::string name = host;
  if (name.size() > 2 && name.front() == '[' && name.back() == ']') {
    name = name.substr(1, name.size() - 2);
  }
  if (getaddrinfo(name.c_str(), absl::StrCat(port).c_str(), &hints, &found) !=
      0) {
    return;
  }
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    const bool connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
    if (connected) break;
  }
  freeaddrinfo(found);
}

}  // namespace

void StopCivetwebPromptly(const std::string& host,
                          const std::vector<int>& ports,
                          absl::AnyInvocable<void() &&> stop) {
  absl::Notification stopped;
  std::thread stopper([&] {
    std::move(stop)();
    stopped.Notify();
  });
  // The first knock may come before the stop flag is set: the listener
  // then takes it as a connection that sends nothing and closes, and the
  // next knock wakes it again.
  do {
    for (int port : ports) Knock(host, port);
  } while (!stopped.WaitForNotificationWithTimeout(absl::Milliseconds(5)));
  stopper.join();
}

}  // namespace ringmoe::server

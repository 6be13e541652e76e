// Stops a civetweb server (ours, or the one inside prometheus-cpp's
// Exposer) within milliseconds instead of seconds.
//
// Civetweb's listener thread notices its stop flag only when a poll of its
// listening sockets returns, and that poll waits up to two seconds when no
// one connects: every server stopped one after the other added up to two
// seconds to a shutdown. A connection to the listening port makes the poll
// return at once; the connection itself is closed unread.
#ifndef RINGMOE_SERVER_CIVETWEB_STOP_H_
#define RINGMOE_SERVER_CIVETWEB_STOP_H_

#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"

namespace ringmoe::server {

// Runs `stop` (mg_stop, or the destructor of what owns the civetweb
// context) on another thread while connecting to `ports` on `host` every
// few milliseconds, and returns once `stop` has. A connection that fails
// (a firewall, an address that cannot be reached from here) costs only
// the speed-up: `stop` still returns, at civetweb's own pace.
void StopCivetwebPromptly(const std::string& host,
                          const std::vector<int>& ports,
                          absl::AnyInvocable<void() &&> stop);

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_CIVETWEB_STOP_H_

// The process-wide bound on output waiting for slow clients: every stream
// (gRPC reactors through StreamChannel, HTTP event streams) adds what it
// queues to one count and ends itself when its own queue or the total
// passes the limits (--max_stream_buffer_bytes).
#ifndef RINGMOE_SERVER_STREAM_BUFFERS_H_
#define RINGMOE_SERVER_STREAM_BUFFERS_H_

#include <atomic>
#include <cstdint>

namespace ringmoe::server {

// Replies waiting for slow clients, over every stream of the process.
class StreamBuffers {
 public:
  // Limits: per stream, and for the whole process.
  static void SetLimits(int64_t per_stream, int64_t total) {
    per_stream_limit().store(per_stream);
    total_limit().store(total);
  }
  static int64_t per_stream() { return per_stream_limit().load(); }
  static int64_t total() { return total_limit().load(); }
  // Bytes waiting now, and streams ended for not reading.
  static std::atomic<int64_t>& buffered_bytes() {
    static std::atomic<int64_t> bytes{0};
    return bytes;
  }
  static std::atomic<int64_t>& overflows() {
    static std::atomic<int64_t> count{0};
    return count;
  }

 private:
  static std::atomic<int64_t>& per_stream_limit() {
    static std::atomic<int64_t> limit{int64_t{64} << 20};
    return limit;
  }
  static std::atomic<int64_t>& total_limit() {
    static std::atomic<int64_t> limit{int64_t{1} << 30};
    return limit;
  }
};

}  // namespace ringmoe::server

#endif  // RINGMOE_SERVER_STREAM_BUFFERS_H_

#pragma once
// Per-request facts for the one-line request log. cpp-httplib runs the pre-routing handler, the route handler, a
// streaming content provider and the logger of one request on the same worker thread, so a thread_local record
// carries them from the handler to the logger (which runs after the body, streamed or not, was written).
#include <chrono>
#include <cstdint>
#include <string>

namespace cmfx::driver::serve {

struct request_log {
  std::chrono::steady_clock::time_point start{};
  bool started = false;
  int64_t prompt_tokens = -1, cached_tokens = -1, completion_tokens = -1;
  std::string prompt_text;  // only with --log-prompts
  std::string note;         // e.g. "cancelled", "timeout"
};

inline request_log& current_request_log() {
  thread_local request_log log;
  return log;
}

}  // namespace cmfx::driver::serve

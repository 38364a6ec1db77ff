#pragma once
// Server counters and gauges, rendered as Prometheus text (GET /metrics). Thread-safe.
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

namespace cmfx::driver::serve {

/// Prometheus text exposition helpers: "# HELP / # TYPE" lines, one sample line (labels: "{k=\"v\"}" or ""), both,
/// and a label value escaped (backslash, double quote, newline).
void prom_head(std::string& o, const char* name, const char* type, const char* help);
void prom_value(std::string& o, const char* name, double v, const char* labels = "");
void prom_metric(std::string& o, const char* name, const char* type, const char* help, double v);
std::string prom_label(std::string_view v);

class metrics {
 public:
  void count_request(int status) {
    std::lock_guard lk(m_);
    ++by_status_[status];
  }
  void add_prefill(uint64_t tokens, double seconds) {
    std::lock_guard lk(m_);
    prefill_tokens_ += tokens;
    prefill_s_ += seconds;
  }
  void add_decode(uint64_t tokens, double seconds) {
    std::lock_guard lk(m_);
    decode_tokens_ += tokens;
    decode_s_ += seconds;
  }
  /// Decode tokens chosen on the device in a burst (scheduler::try_chain; also counted by add_decode).
  void add_chained(uint64_t tokens) {
    std::lock_guard lk(m_);
    chained_tokens_ += tokens;
  }
  /// One scheduler step: time in forward_batch (all of it, and the share of its decode tokens), in the sampling
  /// phase (every slot's sampler, in parallel, then the output pipelines), and the whole step (bookkeeping
  /// included).
  void add_step(double forward_s, double decode_forward_s, double sample_s, double step_s) {
    std::lock_guard lk(m_);
    ++steps_;
    forward_s_ += forward_s;
    decode_forward_s_ += decode_forward_s;
    sample_s_ += sample_s;
    step_s_ += step_s;
  }
  /// HTTP side of a stream: one write of SSE chunks (JSON built and written to the socket), and its CPU seconds.
  void add_stream_write(uint64_t chunks, double seconds) {
    std::lock_guard lk(m_);
    stream_chunks_ += chunks;
    stream_write_s_ += seconds;
  }
  /// The engine's own metrics (serve::engine::metrics_text), appended to the rendering as they are.
  void set_engine_text(std::string t) {
    std::lock_guard lk(m_);
    engine_text_ = std::move(t);
  }
  uint64_t requests_with_status(int status) const {
    std::lock_guard lk(m_);
    const auto it = by_status_.find(status);
    return it == by_status_.end() ? 0 : it->second;
  }

  std::atomic<uint64_t> prompt_tokens{0}, cached_tokens{0}, completion_tokens{0};
  std::atomic<uint64_t> cancelled{0}, timed_out{0}, failed{0};
  std::atomic<uint64_t> queue_depth{0}, busy_slots{0}, state_bytes{0};
  uint64_t slots = 0;

  /// Prometheus text exposition format 0.0.4.
  std::string prometheus() const;

 private:
  mutable std::mutex m_;
  std::map<int, uint64_t> by_status_;
  uint64_t prefill_tokens_ = 0, decode_tokens_ = 0, chained_tokens_ = 0;
  double prefill_s_ = 0.0, decode_s_ = 0.0;
  uint64_t steps_ = 0, stream_chunks_ = 0;
  std::string engine_text_;
  double forward_s_ = 0.0, decode_forward_s_ = 0.0, sample_s_ = 0.0, step_s_ = 0.0, stream_write_s_ = 0.0;
};

}  // namespace cmfx::driver::serve

// Prometheus rendering of the server metrics.
#include "serve/metrics.hpp"

#include <cstdio>

namespace cmfx::driver::serve {

void prom_head(std::string& o, const char* name, const char* type, const char* help) {
  o += "# HELP ";
  o += name;
  o += ' ';
  o += help;
  o += "\n# TYPE ";
  o += name;
  o += ' ';
  o += type;
  o += '\n';
}

void prom_value(std::string& o, const char* name, double v, const char* labels) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  o += name;
  o += labels;
  o += ' ';
  o += buf;
  o += '\n';
}

void prom_metric(std::string& o, const char* name, const char* type, const char* help, double v) {
  prom_head(o, name, type, help);
  prom_value(o, name, v);
}

std::string prom_label(std::string_view v) {
  std::string o;
  for (const char c : v) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

namespace {

double u(const std::atomic<uint64_t>& a) { return static_cast<double>(a.load(std::memory_order_relaxed)); }

}  // namespace

std::string metrics::prometheus() const {
  std::string o;
  std::map<int, uint64_t> by_status;
  uint64_t pt, dt, ct, steps, chunks;
  double ps, ds, fs, dfs, ss, sts, ws;
  {
    std::lock_guard lk(m_);
    by_status = by_status_;
    pt = prefill_tokens_;
    dt = decode_tokens_;
    ct = chained_tokens_;
    ps = prefill_s_;
    ds = decode_s_;
    steps = steps_;
    chunks = stream_chunks_;
    fs = forward_s_;
    dfs = decode_forward_s_;
    ss = sample_s_;
    sts = step_s_;
    ws = stream_write_s_;
  }
  prom_head(o, "cmfx_requests_total", "counter", "HTTP requests answered, by status code.");
  for (const auto& [status, n] : by_status) {
    const std::string labels = "{status=\"" + std::to_string(status) + "\"}";
    prom_value(o, "cmfx_requests_total", static_cast<double>(n), labels.c_str());
  }
  prom_metric(o, "cmfx_prompt_tokens_total", "counter", "Prompt tokens of finished generations.", u(prompt_tokens));
  prom_metric(o, "cmfx_prompt_tokens_cached_total", "counter",
         "Prompt tokens reused from a slot's state (prefix reuse) instead of being prefilled.", u(cached_tokens));
  prom_metric(o, "cmfx_completion_tokens_total", "counter", "Generated tokens of finished generations.",
         u(completion_tokens));
  prom_metric(o, "cmfx_prefill_tokens_total", "counter", "Prompt tokens run through the model.", static_cast<double>(pt));
  prom_metric(o, "cmfx_prefill_seconds_total", "counter", "Seconds spent in prefill steps.", ps);
  prom_metric(o, "cmfx_decode_tokens_total", "counter", "Tokens produced by decode steps.", static_cast<double>(dt));
  prom_metric(o, "cmfx_decode_seconds_total", "counter", "Seconds spent in decode steps (forward + sampling).", ds);
  prom_metric(o, "cmfx_decode_chained_tokens_total", "counter",
         "Decode tokens chosen on the device in bursts (one request decoding alone: chained steps, or step by step "
         "where the graph does not chain).",
         static_cast<double>(ct));
  prom_metric(o, "cmfx_prompt_tokens_per_second", "gauge", "Prefill throughput since start (tokens / prefill seconds).",
         ps > 0 ? static_cast<double>(pt) / ps : 0.0);
  prom_metric(o, "cmfx_decode_tokens_per_second", "gauge",
         "Decode throughput since start, all slots together (tokens / decode seconds).",
         ds > 0 ? static_cast<double>(dt) / ds : 0.0);
  // Where the time goes (docs/SERVING.md "Performance"; scripts/serve_bench.py reads these).
  prom_metric(o, "cmfx_steps_total", "counter", "Scheduler steps (one forward_batch over every active slot each).",
         static_cast<double>(steps));
  prom_metric(o, "cmfx_step_seconds_total", "counter", "Seconds in scheduler steps (forward, sampling, bookkeeping).", sts);
  prom_metric(o, "cmfx_forward_seconds_total", "counter", "Seconds in the model's forward pass (prefill and decode).", fs);
  prom_metric(o, "cmfx_decode_forward_seconds_total", "counter",
         "Share of the forward seconds that belongs to decode tokens (a step's time split by token count).", dfs);
  prom_metric(o, "cmfx_sample_seconds_total", "counter",
         "Seconds in the steps' sampling phase: the slots' samplers (in parallel on the model's threads), then "
         "the output pipeline (detokenizer, stop strings, chat parser) and the events.",
         ss);
  prom_metric(o, "cmfx_stream_chunks_total", "counter", "Server-sent event writes to streaming clients.",
         static_cast<double>(chunks));
  prom_metric(o, "cmfx_stream_write_cpu_seconds_total", "counter",
         "CPU seconds the HTTP threads spent building (JSON) and writing server-sent events.", ws);
  prom_metric(o, "cmfx_requests_cancelled_total", "counter", "Generations stopped because the client went away.",
         u(cancelled));
  prom_metric(o, "cmfx_requests_timed_out_total", "counter", "Generations stopped by --timeout-s.", u(timed_out));
  prom_metric(o, "cmfx_requests_failed_total", "counter", "Generations stopped by an internal error.", u(failed));
  prom_metric(o, "cmfx_queue_depth", "gauge", "Requests waiting for a slot.", u(queue_depth));
  prom_metric(o, "cmfx_busy_slots", "gauge", "Slots generating for a request.", u(busy_slots));
  prom_metric(o, "cmfx_slots", "gauge", "Slots (--parallel).", static_cast<double>(slots));
  prom_metric(o, "cmfx_state_bytes", "gauge",
         "Bytes allocated for per-sequence model state (KV rings, compressed entries; snapshots included).",
         u(state_bytes));
  {
    std::lock_guard lk(m_);
    o += engine_text_;
  }
  return o;
}

}  // namespace cmfx::driver::serve

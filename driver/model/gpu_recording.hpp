#pragma once
// One token of a GPU graph recorded ahead (V4 dsv4_gpu.cpp, V4.1 dsv41_gpu.cpp): its command buffer(s) and the
// timestamps of a profiled step, folded into a gpu_graph_profile after it ran.
#include <algorithm>
#include <chrono>
#include <coroutine>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cmfx/vk/device.hpp"
#include "gpu_expert_cache.hpp"
#include "gpu_graph.hpp"

namespace cmfx::driver {

/// Per-op device time of profiled prefill chunks (V4 dsv4_gpu_chunk.cpp, V4.1 dsv41_gpu_chunk.cpp): a timestamp after
/// each op group of a chunk's recording (≤ 1024 per recording), summed per name over the chunks that ran.
struct gpu_chunk_profile {
  std::vector<std::pair<std::string, double>> ops;  // name → device seconds, in first-seen order
  uint64_t rows = 0;                                // positions profiled
  /// One recording's marks: stamp(name) after each op group while on.
  struct marks {
    gpu::commands& c;
    bool on = false;
    uint32_t start = 0;
    std::vector<std::pair<const char*, uint32_t>> v;
    marks(gpu::commands& cc, bool enabled, uint32_t first) : c(cc), on(enabled), start(first) {}
    void stamp(const char* name) {
      if (on) v.emplace_back(name, c.timestamp());
    }
  };
  /// After the recording ran: its marks added per name, `positions` rows.
  void fold(const marks& m, uint64_t positions) {
    if (!m.on) return;
    uint32_t prev = m.start;
    for (const auto& [name, slot] : m.v) {
      auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& e) { return e.first == name; });
      if (it == ops.end()) it = ops.insert(ops.end(), {name, 0.0});
      it->second += m.c.seconds(prev, slot);
      prev = slot;
    }
    rows += positions;
  }
  /// One line per op (ms, share, ms per position) and the total; empty when nothing was profiled.
  std::string text() const {
    double total = 0;
    for (const auto& e : ops) total += e.second;
    std::string out;
    char b[200];
    for (const auto& [name, sec] : ops) {
      std::snprintf(b, sizeof b, "  %-52s %9.3f ms  %5.1f %%  (%.3f ms per position)\n", name.c_str(), sec * 1e3,
                    total > 0 ? 100 * sec / total : 0.0, rows ? sec * 1e3 / double(rows) : 0.0);
      out += b;
    }
    if (!out.empty()) {
      std::snprintf(b, sizeof b, "  %-52s %9.3f ms over %llu positions\n", "total", total * 1e3,
                    (unsigned long long)rows);
      out += b;
    }
    return out;
  }
};

/// Phase timestamps of a profiled step (slots of commands::timestamp, folded into gpu_graph_profile after submit).
struct gpu_stamps {
  gpu::commands& c;
  bool on = false;
  std::vector<std::pair<double gpu_graph_profile::*, std::pair<uint32_t, uint32_t>>> marks;
  uint32_t last = 0;
  gpu_stamps(gpu::commands& cc, bool enabled) : c(cc), on(enabled) {
    if (on) op_last = last = c.timestamp();
  }
  void mark(double gpu_graph_profile::*field) {
    if (!on) return;
    const uint32_t t = c.timestamp();
    marks.push_back({field, {last, t}});
    last = t;
    op_last = t;
  }
  // Per-op detail (profile_ops): a timestamp after every op of the layers in `detail_layers`.
  bool detail = false;
  std::string prefix;
  std::vector<std::pair<std::string, std::pair<uint32_t, uint32_t>>> ops;
  uint32_t op_last = 0;
  void op(const char* name) {
    if (!on || !detail) return;
    const uint32_t t = c.timestamp();
    std::string full = prefix;
    full += name;
    ops.push_back({std::move(full), {op_last, t}});
    op_last = t;
  }
};

struct gpu_recording {
  gpu::commands c;
  std::vector<gpu::commands> segs;  // expert cache: the rest of the token, one per layer (after its routing)
  gpu_stamps ts;
  uint64_t pos = 0;
  int mode = 0;
  int64_t variant = 0;         // model-specific inputs of the recording besides pos and mode (V4.1: prefill, keys owner)
  std::vector<int> keys_from;  // V4.1: per layer, whose index keys an index source scored (−1: none)
  bool profiled = false;
  std::vector<uint32_t> profile_layers;
  uint32_t dispatches = 0;
  double record_s = 0;
  /// Device time of the whole step (a timestamp at each end of a one-buffer recording, where the device has them):
  /// next to the wall time per token it shows the host's share (submission, the argmax read-back).
  bool stamped = false;
  uint32_t t_begin = 0, t_end = 0;
  gpu_recording(gpu::commands&& cc, bool prof, bool stamps) : c(std::move(cc)), ts(c, prof) {
    if (stamps) t_begin = c.timestamp(), stamped = true;
  }
  /// After record(): the closing timestamp (nothing for a recording cut into segments: the expert cache).
  void close() {
    if (stamped && segs.empty()) t_end = c.timestamp();
    else stamped = false;
  }
  /// After the step ran: its device seconds (0 when not stamped).
  double device_seconds() const { return stamped ? c.seconds(t_begin, t_end) : 0.0; }
};

/// Adds the timestamps of a profiled recording that ran to p.
inline void gpu_fold_profile(gpu_recording& rec, gpu_graph_profile& p) {
  gpu::commands& c = rec.c;
  for (auto& [field, span] : rec.ts.marks) {
    const double s = c.seconds(span.first, span.second);
    p.*field += s;
    p.total += s;
  }
  for (auto& [name, span] : rec.ts.ops) {
    auto it = std::find_if(p.ops.begin(), p.ops.end(), [&](const auto& e) { return e.first == name; });
    if (it == p.ops.end()) it = p.ops.insert(p.ops.end(), {name, 0.0});
    it->second += c.seconds(span.first, span.second);
  }
  ++p.steps;
}

/// A token's recording made a layer at a time (a C++20 coroutine: the graphs' record_steps suspends after each
/// layer), so that the expert cache's run_token can record the next token in the gaps while it waits for this one's
/// parts — on the same thread, so the device object is never used by two threads. finish() runs what is left and
/// returns the recording, its record_s the time spent inside the steps (not the waits between them); an exception
/// inside is rethrown by step() or finish().
class record_task {
 public:
  struct promise_type {
    std::shared_ptr<gpu_recording> value;
    std::exception_ptr error;
    record_task get_return_object() { return record_task(std::coroutine_handle<promise_type>::from_promise(*this)); }
    std::suspend_always initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    std::suspend_always yield_value(int) noexcept { return {}; }
    void return_value(std::shared_ptr<gpu_recording> v) noexcept { value = std::move(v); }
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };
  record_task() = default;
  record_task(record_task&& o) noexcept : h_(std::exchange(o.h_, {})), active_s_(std::exchange(o.active_s_, 0.0)) {}
  record_task& operator=(record_task&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
      active_s_ = std::exchange(o.active_s_, 0.0);
    }
    return *this;
  }
  record_task(const record_task&) = delete;
  record_task& operator=(const record_task&) = delete;
  ~record_task() {
    if (h_) h_.destroy();
  }
  explicit operator bool() const noexcept { return bool(h_); }
  /// Records the next layer (or the rest); false once the recording is complete.
  bool step() {
    if (!h_ || h_.done()) return false;
    const auto t0 = std::chrono::steady_clock::now();
    h_.resume();
    active_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (h_.promise().error) std::rethrow_exception(std::exchange(h_.promise().error, nullptr));
    return !h_.done();
  }
  std::shared_ptr<gpu_recording> finish() {
    while (step()) {
    }
    if (!h_) return nullptr;
    std::shared_ptr<gpu_recording> r = std::move(h_.promise().value);
    if (r) r->record_s = active_s_;
    return r;
  }

 private:
  explicit record_task(std::coroutine_handle<promise_type> h) : h_(h) {}
  std::coroutine_handle<promise_type> h_;
  double active_s_ = 0;
};

/// Runs a token through the expert cache (gpu_expert_cache::run_token) while `ahead` (may be empty) records the
/// next position a layer at a time in its waits. Returns that recording, or null when there is none or when
/// recording it failed (it is speculative: dropped, and the next step records its own).
inline std::shared_ptr<gpu_recording> run_cached_token(gpu_expert_cache& cache, gpu::commands& pre, gpu_recording& rec,
                                                       record_task ahead) {
  const auto between = [&] {
    try {
      (void)ahead.step();
    } catch (...) {
      ahead = record_task();
    }
  };
  cache.run_token(pre, rec.c, rec.segs, ahead ? std::function<void()>(between) : std::function<void()>());
  try {
    return ahead.finish();
  } catch (...) {
    return nullptr;
  }
}

}  // namespace cmfx::driver

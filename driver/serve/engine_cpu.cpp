// serve::engine over a CPU graph, V4 (dsv4_model) or V4.1 (dsv41_model): a state per slot (and a copy as its
// snapshot), one forward_batch per scheduler step over every active slot, sampling on the model's worker threads
// (V4; V4.1's graph keeps its pool private: the samplers run on the scheduler thread).
#include <string>

#include "cmfx/core/thread_pool.hpp"
#include "model/dsv41_forward.hpp"
#include "model/dsv4_forward.hpp"
#include "model/prefix_reuse.hpp"
#include "serve/engine.hpp"
#include "serve/metrics.hpp"

namespace cmfx::driver::serve {

namespace {

uint64_t vec_bytes(const std::vector<float>& v) { return v.capacity() * sizeof(float); }

uint64_t bytes_of(const dsv4_state& st) {
  uint64_t b = 0;
  for (const auto& l : st.layers())
    b += vec_bytes(l.ring) + vec_bytes(l.comp.kv) + vec_bytes(l.comp.score) + vec_bytes(l.comp.entries) +
         vec_bytes(l.ix.kv) + vec_bytes(l.ix.score) + vec_bytes(l.ix.entries);
  return b;
}

uint64_t bytes_of(const dsv41_state& st) {
  uint64_t b = st.kv_bytes() + st.index_key_bytes();
  for (const auto& l : st.layers()) b += vec_bytes(l.ring) + vec_bytes(l.pend_kv) + vec_bytes(l.pend_sc);
  return b;
}

/// The engine over one CPU graph type (Segment / Logits: its forward_batch types; Rollback: its truncate reach).
template <class Model, class State, class Segment, class Logits, uint64_t Rollback>
class cpu_engine final : public engine {
 public:
  cpu_engine(Model& m, unsigned slots) : m_(m), live_(slots), snap_(slots) {}

  uint32_t vocab() const override { return m_.config().vocab; }
  uint32_t eos() const override { return m_.config().eos; }
  unsigned max_slots() const override { return unsigned(live_.size()); }
  uint64_t rollback_tokens() const override { return Rollback; }
  void reset(unsigned s) override { live(s).reset(); }
  void truncate(unsigned s, uint64_t n) override { live(s).truncate(n); }
  void mark_prefill(unsigned s, uint64_t end) override {
    if constexpr (requires(State& st) { st.mark_prefill(end); }) live(s).mark_prefill(end);
  }
  uint64_t reuse_limit(unsigned s, bool snapshot) const override {
    return driver::reuse_limit(m_, snapshot ? snap_[s] : live_[s]);
  }
  void save_snapshot(unsigned s) override { snap_[s] = live(s); }
  void restore_snapshot(unsigned s) override { live_[s] = snap_[s]; }
  void drop_snapshot(unsigned s) override { snap_[s] = State(); }
  uint64_t state_bytes(unsigned s) const override { return bytes_of(live_[s]) + bytes_of(snap_[s]); }

  std::vector<float> forward(std::span<const uint32_t> ids, std::span<const engine_segment> segs) override {
    sg_.clear();  // kept between steps (its capacity grows to the most segments of a step)
    for (const engine_segment& e : segs) sg_.push_back({&live(e.slot), e.first, e.count});
    return m_.forward_batch(ids, sg_, Logits::last);
  }

  void parallel(size_t n, const std::function<void(size_t)>& fn) override {
    if constexpr (requires { m_.pool(); }) {
      m_.pool().run(n, [&](uint64_t b, uint64_t e, unsigned) {
        for (uint64_t i = b; i < e; ++i) fn(size_t(i));
      });
    } else {
      for (size_t i = 0; i < n; ++i) fn(i);
    }
  }

  std::string metrics_text() const override {
    std::string o;
    prom_head(o, "cmfx_backend_info", "gauge", "The model's backend (cpu | vulkan) and device.");
    prom_value(o, "cmfx_backend_info", 1.0, "{backend=\"cpu\",device=\"cpu\"}");
    return o;
  }
  std::string describe() const override {
    if constexpr (requires { m_.pool(); }) return "cpu, " + std::to_string(m_.pool().size()) + " threads";
    return "cpu";
  }

 private:
  /// The slot's live state, created on first use (a state holds the model's ring buffers).
  State& live(unsigned s) {
    if (live_[s].layers().empty()) live_[s] = m_.new_state();
    return live_[s];
  }
  Model& m_;
  std::vector<State> live_, snap_;
  std::vector<Segment> sg_;  // forward's segments (one forward at a time: the scheduler's thread)
};

}  // namespace

std::unique_ptr<engine> make_cpu_engine(dsv4_model& m, unsigned slots) {
  return std::make_unique<cpu_engine<dsv4_model, dsv4_state, dsv4_segment, dsv4_logits, dsv4_rollback_tokens>>(m,
                                                                                                              slots);
}

std::unique_ptr<engine> make_cpu_engine(dsv41_model& m, unsigned slots) {
  return std::make_unique<cpu_engine<dsv41_model, dsv41_state, dsv41_segment, dsv41_logits, dsv41_rollback_tokens>>(
      m, slots);
}

}  // namespace cmfx::driver::serve

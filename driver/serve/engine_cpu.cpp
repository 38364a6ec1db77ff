// serve::engine over the V4 CPU graph: a dsv4_state per slot (and a copy as its snapshot), one forward_batch per
// scheduler step over every active slot, sampling on the model's worker threads.
#include <string>

#include "cmfx/core/thread_pool.hpp"
#include "model/dsv4_forward.hpp"
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

class cpu_engine final : public engine {
 public:
  cpu_engine(dsv4_model& m, unsigned slots) : m_(m), live_(slots), snap_(slots) {}

  uint32_t vocab() const override { return m_.config().vocab; }
  uint32_t eos() const override { return m_.config().eos; }
  unsigned max_slots() const override { return unsigned(live_.size()); }
  uint64_t rollback_tokens() const override { return dsv4_rollback_tokens; }
  void reset(unsigned s) override { live(s).reset(); }
  void truncate(unsigned s, uint64_t n) override { live(s).truncate(n); }
  void save_snapshot(unsigned s) override { snap_[s] = live(s); }
  void restore_snapshot(unsigned s) override { live_[s] = snap_[s]; }
  void drop_snapshot(unsigned s) override { snap_[s] = dsv4_state(); }
  uint64_t state_bytes(unsigned s) const override { return bytes_of(live_[s]) + bytes_of(snap_[s]); }

  std::vector<float> forward(std::span<const uint32_t> ids, std::span<const engine_segment> segs) override {
    std::vector<dsv4_segment> sg;
    sg.reserve(segs.size());
    for (const engine_segment& e : segs) sg.push_back({&live(e.slot), e.first, e.count});
    return m_.forward_batch(ids, sg, dsv4_logits::last);
  }

  void parallel(size_t n, const std::function<void(size_t)>& fn) override {
    m_.pool().run(n, [&](uint64_t b, uint64_t e, unsigned) {
      for (uint64_t i = b; i < e; ++i) fn(size_t(i));
    });
  }

  std::string metrics_text() const override {
    std::string o;
    prom_head(o, "cmfx_backend_info", "gauge", "The model's backend (cpu | vulkan) and device.");
    prom_value(o, "cmfx_backend_info", 1.0, "{backend=\"cpu\",device=\"cpu\"}");
    return o;
  }
  std::string describe() const override { return "cpu, " + std::to_string(m_.pool().size()) + " threads"; }

 private:
  /// The slot's live state, created on first use (a state holds the model's ring buffers).
  dsv4_state& live(unsigned s) {
    if (live_[s].layers().empty()) live_[s] = m_.new_state();
    return live_[s];
  }
  dsv4_model& m_;
  std::vector<dsv4_state> live_, snap_;
};

}  // namespace

std::unique_ptr<engine> make_cpu_engine(dsv4_model& m, unsigned slots) {
  return std::make_unique<cpu_engine>(m, slots);
}

}  // namespace cmfx::driver::serve

// serve::engine over a model on a Vulkan device (gpu_runner: the V4 or V4.1 graph): one slot, because the device
// holds one sequence; its state and snapshot are device buffers (gpu_graph::save_snapshot / restore_snapshot), and
// there is no rollback (a prefix is reused when the live state or the snapshot ends exactly there). The expert
// cache's counters (hit rate, bytes moved) go to /metrics.
#include <stdexcept>
#include <string>

#include "cmfx/core/error.hpp"
#include "model/gpu_runner.hpp"
#include "serve/engine.hpp"
#include "serve/metrics.hpp"

namespace cmfx::driver::serve {

namespace {

class gpu_engine final : public engine {
 public:
  explicit gpu_engine(gpu_runner& r) : r_(r) {}

  uint32_t vocab() const override { return r_.config().vocab; }
  uint32_t eos() const override { return r_.config().eos; }
  unsigned max_slots() const override { return 1; }
  uint64_t rollback_tokens() const override { return 0; }
  void reset(unsigned) override { r_.model().reset(); }
  void truncate(unsigned, uint64_t n) override {
    if (n == 0) {
      r_.model().reset();
    } else if (n != r_.model().pos()) {
      throw std::logic_error("gpu engine: truncate to " + std::to_string(n) + " of " +
                             std::to_string(r_.model().pos()) + " positions (the device state has no rollback)");
    }
  }
  void mark_prefill(unsigned, uint64_t end) override { r_.model().mark_prefill(end); }
  uint64_t reuse_limit(unsigned, bool snapshot) const override { return r_.model().reuse_limit(snapshot); }
  void save_snapshot(unsigned) override { r_.model().save_snapshot(); }
  void restore_snapshot(unsigned) override { r_.model().restore_snapshot(); }
  void drop_snapshot(unsigned) override {}  // the snapshot's device buffers stay allocated for the next one
  uint64_t state_bytes(unsigned) const override { return r_.model().state_bytes(); }

  std::vector<float> forward(std::span<const uint32_t> ids, std::span<const engine_segment> segs) override {
    if (segs.size() != 1 || segs[0].slot != 0)
      throw std::logic_error("gpu engine: one segment of slot 0 per step (the device holds one sequence)");
    return r_.forward(ids.subspan(segs[0].first, segs[0].count), true);
  }

  void parallel(size_t n, const std::function<void(size_t)>& fn) override {
    for (size_t i = 0; i < n; ++i) fn(i);
  }

  std::string metrics_text() const override {
    std::string o;
    const std::string labels = "{backend=\"vulkan\",device=\"" + prom_label(r_.device_name()) + "\"}";
    prom_head(o, "cmfx_backend_info", "gauge", "The model's backend (cpu | vulkan) and device.");
    prom_value(o, "cmfx_backend_info", 1.0, labels.c_str());
    const gpu_graph& g = r_.model();
    prom_metric(o, "cmfx_device_weight_bytes", "gauge", "Device bytes of the model's weights (expert slots included).",
                double(g.weight_bytes()));
    prom_metric(o, "cmfx_device_state_bytes", "gauge", "Device bytes of the sequence state and scratch.",
                double(g.state_bytes()));
    const gpu_expert_cache_stats& c = g.cache_stats();
    prom_metric(o, "cmfx_expert_cache_active", "gauge",
                "1 when routed experts are cached per layer under --vram-budget, 0 when every expert is resident.",
                c.active ? 1.0 : 0.0);
    prom_metric(o, "cmfx_expert_cache_slots", "gauge", "Routed-expert slots per layer (0 when every expert is resident).",
                double(c.slots));
    prom_metric(o, "cmfx_expert_cache_tokens_total", "counter", "Model steps run with the expert cache.",
                double(c.tokens));
    prom_metric(o, "cmfx_expert_cache_lookups_total", "counter", "Routed experts selected (top-k per layer per token).",
                double(c.lookups));
    prom_metric(o, "cmfx_expert_cache_hits_total", "counter", "Selected routed experts that were already on the device.",
                double(c.hits));
    prom_metric(o, "cmfx_expert_cache_bytes_moved_total", "counter", "Expert bytes copied from host to device.",
                double(c.bytes_moved));
    prom_metric(o, "cmfx_expert_cache_copy_seconds_total", "counter",
                "Host seconds spent packing missing experts into the upload ring.", c.move_seconds);
    prom_metric(o, "cmfx_expert_cache_cpu_experts_total", "counter",
                "Selected routed experts computed on the CPU instead of copied in (--cold-experts cpu).",
                double(c.cpu_experts));
    prom_metric(o, "cmfx_expert_cache_cpu_seconds_total", "counter",
                "Host seconds spent computing experts on the CPU (--cold-experts cpu).", c.cpu_seconds);
    prom_metric(o, "cmfx_expert_cache_chunk_layers_total", "counter",
                "Layers of prefill chunks run with the expert cache (each in passes of the slots).",
                double(c.chunk_layers));
    prom_metric(o, "cmfx_expert_cache_chunk_passes_total", "counter", "Passes of those layers.",
                double(c.chunk_passes));
    prom_metric(o, "cmfx_expert_cache_chunk_bytes_moved_total", "counter",
                "Expert bytes copied from host to device for prefill chunks.", double(c.chunk_bytes_moved));
    prom_metric(o, "cmfx_expert_cache_chunk_experts_total", "counter",
                "Distinct routed experts the prefill chunks' layers selected.", double(c.chunk_experts));
    prom_metric(o, "cmfx_expert_cache_chunk_hits_total", "counter",
                "Of those, the experts already on the device when the layer's chunk began.", double(c.chunk_hits));
    prom_metric(o, "cmfx_expert_cache_chunk_pack_seconds_total", "counter",
                "Host seconds packing the chunks' missing experts into the upload ring.", c.chunk_move_seconds);
    prom_metric(o, "cmfx_expert_cache_chunk_ring_wait_seconds_total", "counter",
                "Host seconds waiting for the device's copies to free a group of the upload ring.",
                c.chunk_wait_seconds);
    prom_metric(o, "cmfx_expert_cache_chunk_routing_wait_seconds_total", "counter",
                "Host seconds waiting for each chunk layer's part up to its routing.", c.chunk_cut_seconds);
    prom_metric(o, "cmfx_expert_cache_chunk_copy_device_seconds_total", "counter",
                "Device seconds of the chunks' expert copies (timestamps; 0 where they are off).",
                c.chunk_copy_device_seconds);
    prom_metric(o, "cmfx_expert_cache_chunk_pass_device_seconds_total", "counter",
                "Device seconds of the chunks' expert passes (timestamps; 0 where they are off).",
                c.chunk_pass_device_seconds);
    prom_metric(o, "cmfx_expert_cache_chunk_prefetched_total", "counter",
                "Experts copied in while their layer's routing ran (prefetch; counted in the bytes moved).",
                double(c.chunk_prefetched));
    prom_metric(o, "cmfx_expert_cache_chunk_prefetch_used_total", "counter",
                "Of those, the experts their layer's chunk selected (the rest were copied in vain).",
                double(c.chunk_prefetch_used));
    prom_metric(o, "cmfx_expert_cache_chunk_d2d_device_seconds_total", "counter",
                "Device seconds copying the prefetched experts into their slots (timestamps; 0 where they are off).",
                c.chunk_d2d_device_seconds);
    return o;
  }

  std::string describe() const override { return "vulkan: " + r_.device_name() + ", " + r_.cache_line(); }

  bool can_chain(unsigned, uint64_t steps) const override { return r_.model().can_chain(steps); }
  uint64_t chain_greedy(unsigned, uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token) override {
    return r_.model().decode_greedy_each(first, max, on_token);
  }
  bool can_sample(unsigned, uint64_t steps) const override { return r_.model().can_sample(steps); }
  uint64_t chain_sampled(unsigned, uint32_t first, uint64_t max, const device_sampling& ds,
                         const std::function<bool(uint32_t)>& on_token) override {
    return r_.model().decode_sampled_each(first, max, ds, on_token);
  }

 private:
  gpu_runner& r_;
};

}  // namespace

std::unique_ptr<engine> make_gpu_engine(gpu_runner& r) { return std::make_unique<gpu_engine>(r); }

}  // namespace cmfx::driver::serve

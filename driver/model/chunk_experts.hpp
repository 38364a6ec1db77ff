#pragma once
// A prefill chunk's routed experts, shared by the V4 and V4.1 GPU graphs (dsv4_gpu_chunk.cpp, dsv41_gpu_chunk.cpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "cmfx/core/error.hpp"
#include "cmfx/kernels/act_precision.hpp"
#include "cmfx/kernels/moe.hpp"
#include "cmfx/vk/device.hpp"
#include "cmfx/vk/kernels.hpp"
#include "gpu_expert_cache.hpp"
#include "prefill_experts.hpp"

namespace cmfx::driver {

/// Records layer l's routed experts over a chunk's T rows into c (after its routing wrote ridx / rw): kernels::moe
/// on a resident layer. Under the expert cache the chunk's recording is cut here: c (with a copy of the selected
/// ids for the host) is submitted and waited for, the cache runs the layer's passes (gpu_expert_cache::run_passes,
/// each a kernels::moe with moe_extras::pass) and c becomes a new part that opens with kernels::moe_pass_sum — the
/// resident layer's bits. The caller keeps m's routed_only_scope around the call, waits for c's last part and then
/// calls the cache's finish_passes (drop_passes on an error path); the previous layer's passes are finished here.
/// `dispatches`: the dispatches of the parts submitted here are added to it.
inline void record_chunk_experts(gpu::kernels& k, gpu::device& dev, gpu::commands& c, gpu_expert_cache& cache,
                                 uint32_t l, const gpu::gpu_moe& m, gpu::view u, uint32_t T, gpu::view ridx,
                                 gpu::view rw, uint32_t top_k, float limit, gpu::view h, gpu::view out,
                                 act_precision act, uint32_t& dispatches) {
  if (!cache.active()) {
    k.moe(c, m, u, T, ridx, rw, top_k, limit, h, out, act);
    return;
  }
  const uint64_t pairs = uint64_t(T) * top_k;
  c.copy(gpu::view(*ridx.buf, ridx.offset, pairs * 4), cache.chunk_ids(pairs), pairs * 4);
  dispatches += c.dispatch_count();
  dev.submit_async(c);
  cache.prefetch(l, pairs);  // while the part runs (with the option; the copy engine would wait otherwise)
  cache.wait_cut(c);
  // c opened with the barrier after the previous layer's passes: they ran; their command buffers go back to the
  // device's spares (one layer's live at a time, not the chunk's)
  cache.finish_passes();
  c = dev.begin();
  gpu::moe_extras mx;
  mx.pass = true;
  (void)cache.run_passes(l, cache.read_chunk_ids(pairs), [&](gpu::commands& part, bool first) {
    mx.pass_shared = first;
    k.moe(part, m, u, T, ridx, rw, top_k, limit, h, out, act, cache.slot_map(l), mx);
    dispatches += part.dispatch_count();
  });
  c.barrier();  // after the passes (submitted before this part)
  k.moe_pass_sum(c, m, T, ridx, top_k, h, out);
}

/// Whether a chunk of `rows` rows can run layer m's experts in passes under the expert cache (the cache has slots
/// for them and the pass's path applies to m's chunk shape — m as record_chunk_experts gets it — with act).
inline bool chunk_experts_pass(const gpu::kernels& k, const gpu_expert_cache& cache, const gpu::gpu_moe& m,
                               uint32_t rows, uint32_t top_k, gpu::view h, act_precision act) {
  return cache.pass_slots() > 0 && act == act_precision::i8 && k.moe_takes_pass(m, rows, top_k, h);
}

/// Before the experts are placed: whether chunks of prefill_chunk rows could run experts like e in passes under
/// an expert cache — int8 chunk experts (prefill_expert_act) of formats with an int8 kernel, chunks of ≥ 3 rows (the
/// shapes and the scratch are checked by chunk_experts_pass once the experts are placed).
inline bool chunk_passes_possible(const gpu::kernels& k, const expert_view& e, prefill_expert_mode mode,
                                  act_precision expert_act, uint32_t prefill_chunk) {
  return prefill_chunk >= 3 && prefill_expert_act(mode, expert_act, e.gate_fmt) == act_precision::i8 &&
         k.has_i8(e.gate_fmt) && k.has_i8(e.up_fmt) && k.has_i8(e.down_fmt);
}

/// Whether every layer of a graph (Impl: its impl, with the chunk scratch allocated and the experts placed) can run
/// its chunk experts in passes — each layer as its chunks record it (the shared expert scoped out where it runs apart).
template <class Impl>
bool chunk_passes_apply(Impl& m) {
  for (auto& G : m.layers) {
    const gpu::routed_only_scope routed(G.moe, G.shared_apart_chunks);
    if (!chunk_experts_pass(m.k, *m.experts, G.moe, m.ch->C, m.cfg.top_k, gpu::view(m.ch->moe_h),
                            prefill_expert_act(m.opt.prefill_experts, m.opt.expert_act, G.moe.gate_up.w.fmt)))
      return false;
  }
  return true;
}

/// The routed experts' placement of a GPU graph (V4 and V4.1 constructors; Impl: the graph's impl, after its
/// weights and state) under a vram_budget with prefill chunks: the chunk scratch is allocated first, so that the
/// placement counts it, then —
/// - every expert fits beside it: resident, the chunks as without a budget;
/// - every expert fits without it (not with it): the scratch is dropped (prompts token by token) and the experts stay
///   resident — the decode's speed before the prompt's — unless opt.budget_keeps_chunks (then as below);
/// - else the expert cache: the scratch stays where its chunks can run the experts in passes (`chunks_can_run`, the
///   graph's own conditions, and chunk_passes_possible), else it is dropped first and its bytes go to the slots;
///   where the budget leaves no room for the cache's minimum beside the scratch, the scratch is dropped (a budget
///   below the minimum without it is refused naming both minimums); where the pass path turns out not to apply to
///   the placed layers (shapes, scratch alignment: chunk_passes_apply), the scratch is freed (its bytes stay
///   unused).
/// Without a budget or chunks: the placement alone. Returns the device bytes the placement took.
template <class Impl>
uint64_t place_experts(Impl& m, bool chunks_can_run, bool passes_possible, gpu_expert_cache_options o) {
  auto drop = [&] {
    m.state_bytes -= m.ch->bytes;
    m.ch.reset();
    m.chunks_off = true;
  };
  if (o.budget && m.opt.prefill_chunk > 1) {
    m.alloc_chunk();
    const uint64_t used = m.weight_bytes + m.state_bytes, all = m.experts->resident_bytes();
    const bool fits_without = used - m.ch->bytes + all <= o.budget && !m.opt.budget_keeps_chunks;
    if (used + all > o.budget && (fits_without || !chunks_can_run || !passes_possible))
      drop();
  }
  if (!m.ch) o.prefetch_bytes = 0;  // prompts token by token: no chunk reads prefetch images
  const uint64_t with = m.ch && o.budget ? m.experts->minimum_bytes(m.weight_bytes + m.state_bytes, o.cold) : 0;
  if (m.ch && o.budget && o.budget < with) {
    drop();
    o.prefetch_bytes = 0;
    try {
      return m.experts->place(m.weight_bytes + m.state_bytes, o);
    } catch (const usage_error& e) {
      throw usage_error(std::string(e.what()) + "; prompts in prefill chunks under the expert cache need at least " +
                        std::to_string(with) + " bytes (with the chunks' scratch)");
    }
  }
  uint64_t took = m.experts->place(m.weight_bytes + m.state_bytes, o);
  if (m.ch && m.experts->active() && !chunk_passes_apply(m)) {
    drop();
    took -= m.experts->drop_prefetch();
  }
  return took;
}

/// A chunk's recording under the expert cache: unless released (after the cache's finish_passes), the destructor
/// waits for the passes submitted and empties the cache (an error path: the slots may not hold what the host
/// believes).
class chunk_pass_guard {
 public:
  explicit chunk_pass_guard(gpu_expert_cache* cache) : cache_(cache) {}
  ~chunk_pass_guard() {
    if (cache_) cache_->drop_passes();
  }
  chunk_pass_guard(const chunk_pass_guard&) = delete;
  chunk_pass_guard& operator=(const chunk_pass_guard&) = delete;
  void release() noexcept { cache_ = nullptr; }

 private:
  gpu_expert_cache* cache_;
};

/// The end of the chunk that starts at b of n ids in chunks of C: min(n, b + C) — one row earlier under the expert
/// cache where the last chunk would otherwise have one row (a pass needs two; the graphs chunk there with C ≥ 3).
inline size_t chunk_end(size_t n, size_t b, size_t C, bool cached) {
  size_t e = std::min(n, b + C);
  if (cached && n - e == 1) --e;
  return e;
}

}  // namespace cmfx::driver

// V4.1's decode chained on the device (dsv41_gpu_options::device_embedding; docs/VULKAN.md "A step's chosen id
// without a download"): greedy (decode_greedy_each) or drawn on the device by the chooser (decode_sampled_each, with
// the step's logprobs in the chooser's ring slot of the step's id). V4 chains its steps because everything a step
// needs from its token is on the device; a V4.1 step also needs its token's Engram rows, and those tables stay on
// the host (two of ~98 GB in the release).
// So each step, recorded ahead, goes out in two parts:
//   part A — the token's embedding gathered from the previous step's argmax (kernels::embed_rows) and the layers
//            before the first Engram layer — submitted while the previous step still runs;
//   part B — the step's Engram rows copied from a host-visible staging slot, the remaining layers, the head and its
//            argmax into the id ring — submitted once the host has read the previous step's id, added it to the
//            Engram history and gathered the rows (tens of µs, while part A runs).
// The numbers are the step-by-step path's: the same recordings but for the embedding's source and the rows' copy.
#include <cstring>
#include <string>
#include <vector>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/vk/device.hpp"
#include "dsv41_gpu_internal.hpp"
#include "gpu_recording.hpp"

namespace cmfx::driver {

static_assert(dsv41_gpu_model::impl::ring_slots <= gpu_chooser::slots, "a chained step's logprobs record per id slot");

uint64_t dsv41_gpu_model::impl::decode_chained(uint32_t first, uint64_t max,
                                               const std::function<bool(uint32_t)>& on_token, int logits_mode,
                                               step_logprobs* lp) {
  if (max == 0) return 0;
  if (first >= cfg.vocab)
    throw usage_error("gpu model: token id " + std::to_string(first) + " >= vocab " + std::to_string(cfg.vocab));
  if (pos + max > opt.max_ctx)
    throw usage_error("gpu model: positions " + std::to_string(pos) + ".." + std::to_string(pos + max - 1) +
                      " reach beyond the device context of " + std::to_string(opt.max_ctx) + " positions (--ctx)");
  next.reset();
  const uint64_t d = cfg.dim, p0 = pos;
  const bool eg = !cfg.engram_layers.empty();
  const uint8_t* ring = dev.mapped(ids_ring);
  float* stage = eg ? reinterpret_cast<float*>(dev.mapped(eg_stage)) : nullptr;
  const size_t c0 = cids.size();
  // The token of position p: its compressed id joins the Engram history, its rows go to staging slot s.
  auto stage_rows = [&](uint32_t tok, uint64_t p, uint32_t s) {
    if (!eg) return;
    cids.push_back(uint32_t(engram.map(tok)));
    engram_rows(p, stage + uint64_t(s) * eg_floats);
  };
  // The first step's embedding comes from the host.
  gpu::commands pre = dev.begin();
  pre.barrier();
  {
    std::vector<float> x(d);
    visit_format(embed.fmt, [&]<class F>() { F::decode_row(embed.v, first, x.data()); });
    for (uint64_t j = 0; j < cfg.hc; ++j) pre.update(gpu::view(X, j * d * 4, d * 4), x.data(), d * 4);
  }
  std::shared_ptr<gpu_recording> prev, cur;  // prev: the step whose part B runs; cur: the one being issued
  int owner = last_owner, prev_owner_after = last_owner, done_owner = last_owner;
  uint64_t delivered = 0, disp = 0, issued = 0;
  double rec_s = 0;
  bool stop = false;
  auto drain = [&] {  // everything submitted has run (before its recordings go)
    dev.wait(pre);
    for (const auto& r : {prev, cur})
      if (r) {
        dev.wait(r->c);
        for (gpu::commands& s : r->segs) dev.wait(s);
      }
  };
  try {
    for (uint64_t i = 0; i <= max && !stop; ++i) {
      int owner_after = owner;
      if (i < max) {
        const uint64_t p = p0 + i;
        cur = record_steps(p, logits_mode, false, owner, i > 0, int(i % ring_slots)).finish();
        disp += cur->dispatches, rec_s += cur->record_s, ++issued;
        if (const int pub = dsv41_decode_publisher(cfg, p); pub >= 0) owner_after = pub;
        if (i == 0) dev.submit_async(pre);
        dev.submit_async(cur->c);  // part A (after the previous step's part B in the queue)
      }
      if (prev) {  // the previous step's id: this step's token
        dev.wait(prev->c);
        for (gpu::commands& s : prev->segs) dev.wait(s);
        uint32_t id = 0;
        std::memcpy(&id, ring + ((i - 1) % ring_slots) * 4, 4);
        if (lp) chooser.read(dev, uint32_t((i - 1) % ring_slots), cfg.vocab, *lp);
        prev.reset();
        ++delivered;
        pos = p0 + delivered, done_owner = prev_owner_after;
        if (!on_token(id)) stop = true;
        if (!stop && i < max) stage_rows(id, p0 + i, uint32_t(i % ring_slots));
      } else if (i == 0) {
        stage_rows(first, p0, 0);
      }
      if (i == max) break;
      if (stop) {  // part A ran ahead of the stop: dropped (it wrote state of positions past pos only)
        dev.wait(cur->c);
        cur.reset();
        break;
      }
      for (gpu::commands& s : cur->segs) dev.submit_async(s);  // part B
      prev = std::move(cur), prev_owner_after = owner_after, owner = owner_after;
    }
    dev.wait(pre);
  } catch (...) {
    drain();
    if (eg) cids.resize(c0 + delivered);
    pos = p0 + delivered, last_owner = done_owner;
    throw;
  }
  if (eg) cids.resize(c0 + delivered);
  pos = p0 + delivered, last_owner = done_owner;
  dispatches = issued ? uint32_t(disp / issued) : 0, record_s = issued ? rec_s / double(issued) : 0.0;
  device_s = 0, host_s = {};  // (two command buffers per step: no single pair of timestamps)
  return delivered;
}

bool dsv41_gpu_model::chains_decode() const noexcept {
  const impl& m = *p_;
  return chaining() && m.embed_dev.data && !m.opt.profile && m.pos > 0 && !m.official_prefill.covers(m.pos);
}

uint64_t dsv41_gpu_model::decode_greedy_each(uint32_t first, uint64_t max,
                                             const std::function<bool(uint32_t)>& on_token) {
  if (!chains_decode()) return gpu_graph::decode_greedy_each(first, max, on_token);
  return p_->decode_chained(first, max, on_token);
}

}  // namespace cmfx::driver

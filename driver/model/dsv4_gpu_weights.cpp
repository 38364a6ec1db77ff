// Uploads of the V4 GPU graph: every weight of dsv4_weights into device memory (matrices in their storage
// format, small vectors as f32), the rope position tables, and the per-sequence state and scratch buffers.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/vk/device.hpp"
#include "dsv4_gpu_internal.hpp"

namespace cmfx::driver {

namespace {

uint64_t matrix_bytes(const gpu::gpu_matrix& m) { return m.data.size() + (m.scale ? m.scale.size() : 0); }

/// Bytes a batch-1 product reads: the payload (and scales) of the matrix.
uint64_t view_bytes(const matrix_view& v) { return v.data_bytes + v.scale_bytes; }

}  // namespace

dsv4_gpu_model::impl::impl(const dsv4_weights& w, gpu::device& d, gpu::kernels& kk, const dsv4_gpu_options& opts)
    : cfg(w.cfg), embed(w.embed), keep_alive(w.keep_alive), dev(d), k(kk), opt(opts) {
  if (opt.max_ctx == 0) throw usage_error("gpu model: max_ctx must be > 0");
  if (cfg.head_dim > gpu::kernels::attn_max_head_dim)
    throw usage_error("gpu model: head dim " + std::to_string(cfg.head_dim) + " exceeds the attention kernel's " +
                      std::to_string(gpu::kernels::attn_max_head_dim));
  if (cfg.experts > gpu::kernels::route_max_experts || cfg.top_k > gpu::kernels::route_max_k)
    throw usage_error("gpu model: expert count or top-k beyond the routing kernel's limits");
  upload_weights(w);
  alloc_state();
  place_experts();
}

void dsv4_gpu_model::impl::upload_weights(const dsv4_weights& w) {
  auto vec = [&](const std::vector<float>& v) {
    gpu::buffer b = dev.alloc(std::max<uint64_t>(v.size() * 4, 4));
    if (!v.empty()) dev.upload(b, v.data(), v.size() * 4);
    weight_bytes += b.size();
    return b;
  };
  auto mat = [&](const dsv4_matrix& m, bool read_per_token = true) {
    gpu::gpu_matrix g = gpu::upload_matrix(dev, m.fmt, m.v);
    weight_bytes += matrix_bytes(g);
    if (read_per_token) token_bytes += view_bytes(m.v);
    return g;
  };
  auto comp = [&](const dsv4_compressor_w& c, dsv4_gpu_comp& g) {
    // The recording shares one window-position buffer per ratio (dsv4_gpu.cpp): V4's two compressor kinds only.
    if (!((c.ratio == 4 && c.overlap) || (c.ratio == 128 && !c.overlap)))
      throw usage_error("gpu model: compressor ratio " + std::to_string(c.ratio) +
                        (c.overlap ? " with" : " without") + " overlap is not a V4 compressor (4 with, 128 without)");
    g.ratio = c.ratio, g.width = c.width, g.overlap = c.overlap, g.cw = c.coff() * c.width;
    g.cap = c.coff() * c.ratio;
    g.wkv = mat(c.wkv);
    g.wgate = mat(c.wgate);
    g.ape = vec(c.ape);
    g.norm = vec(c.norm);
  };
  head = mat(w.head);
  norm = vec(w.norm);
  hc_head_fn = vec(w.hc_head_fn);
  hc_head_base = vec(w.hc_head_base);
  hc_head_scale = w.hc_head_scale;
  layers.resize(cfg.layers);
  for (uint32_t l = 0; l < cfg.layers; ++l) {
    const dsv4_layer_w& L = w.layers[l];
    dsv4_gpu_layer& G = layers[l];
    G.kind = L.kind;
    G.attn_norm = vec(L.attn_norm), G.ffn_norm = vec(L.ffn_norm), G.q_norm = vec(L.q_norm);
    G.kv_norm = vec(L.kv_norm), G.sink = vec(L.attn_sink);
    G.hc_attn_fn = vec(L.hc_attn_fn), G.hc_attn_base = vec(L.hc_attn_base), G.hc_attn_scale = vec(L.hc_attn_scale);
    G.hc_ffn_fn = vec(L.hc_ffn_fn), G.hc_ffn_base = vec(L.hc_ffn_base), G.hc_ffn_scale = vec(L.hc_ffn_scale);
    G.wq_a = mat(L.wq_a), G.wq_b = mat(L.wq_b), G.wkv = mat(L.wkv), G.wo_b = mat(L.wo_b);
    // wo_a runs one row block per output group (kernels::matmul_rows); a group that starts inside a scale tile
    // (FP8 tiles of 128 rows and o_lora < 128: toy sizes only) is uploaded decoded to f32 — the same values.
    uint32_t tile_rows = 1;
    visit_format(L.wo_a.fmt, [&]<class F>() { tile_rows = F::block_rows; });
    if (cfg.o_lora % tile_rows == 0) {
      G.wo_a = mat(L.wo_a);
    } else {
      std::vector<float> dec(L.wo_a.rows() * L.wo_a.cols());
      visit_format(L.wo_a.fmt, [&]<class F>() {
        for (uint64_t r = 0; r < L.wo_a.rows(); ++r) F::decode_row(L.wo_a.v, r, dec.data() + r * L.wo_a.cols());
      });
      const matrix_view v{reinterpret_cast<const uint8_t*>(dec.data()), dec.size() * 4, nullptr, 0,
                          scale_encoding::none, L.wo_a.rows(), L.wo_a.cols()};
      G.wo_a = gpu::upload_matrix(dev, format::f32, v);
      weight_bytes += matrix_bytes(G.wo_a);
      token_bytes += view_bytes(L.wo_a.v);
    }
    if (L.kind.ratio) comp(L.comp, G.comp);
    if (L.kind.indexer) {
      comp(L.ix_comp, G.ix);
      G.ix_wq_b = mat(L.ix_wq_b);
      G.ix_wp = mat(L.ix_weights_proj);
    }
    G.gate = mat(L.gate);
    if (L.kind.hash) {
      G.tid2eid = gpu::upload_tid2eid(dev, std::span<const int32_t>(L.tid2eid), cfg.top_k, cfg.experts);
      weight_bytes += G.tid2eid.size();
    } else {
      G.gate_bias = vec(L.gate_bias);
    }
    // Routed experts stacked (and the shared one with them when its formats match); top_k of them per token.
    const expert_view& e0 = L.experts.at(0);
    const uint64_t expert_read = view_bytes(e0.gate) + view_bytes(e0.up) + view_bytes(e0.down);
    const bool stack_shared = L.shared.gate_fmt == e0.gate_fmt && L.shared.up_fmt == e0.up_fmt &&
                              L.shared.down_fmt == e0.down_fmt && L.shared.gate.rows == e0.gate.rows &&
                              L.shared.gate.cols == e0.gate.cols;
    // Uploaded (or cached) by place_experts, once the budget left by everything else is known.
    host_experts.push_back(L.experts);
    host_shared.push_back(L.shared);
    G.moe.experts = cfg.experts, G.moe.shared = stack_shared;
    G.moe.dim = e0.down.rows, G.moe.inter = e0.down.cols;
    token_bytes += expert_read * cfg.top_k;
    G.shared_apart = !stack_shared;
    if (stack_shared) {
      token_bytes += expert_read;
    } else {
      G.sh_gate = mat({L.shared.gate, L.shared.gate_fmt});
      G.sh_up = mat({L.shared.up, L.shared.up_fmt});
      G.sh_down = mat({L.shared.down, L.shared.down_fmt});
    }
  }
}

void dsv4_gpu_model::impl::alloc_state() {
  const dsv4_config& c = cfg;
  const uint64_t ctx = opt.max_ctx, W = c.window, hd = c.head_dim, d = c.dim, f = 4;
  auto buf = [&](uint64_t bytes) {
    gpu::buffer b = dev.alloc(std::max<uint64_t>(bytes, 16));
    state_bytes += b.size();
    return b;
  };
  // Rope tables for every position < max_ctx (f32 cos, sin pairs).
  for (int t = 0; t < 2; ++t) {
    const rope_table rt(dsv4_rope_config(c, t == 1));
    std::vector<double> cs(c.rope_dim);
    std::vector<float> tab(ctx * c.rope_dim);
    for (uint64_t p = 0; p < ctx; ++p) {
      rt.rotation(int64_t(p), cs);
      for (uint32_t i = 0; i < c.rope_dim; ++i) tab[p * c.rope_dim + i] = float(cs[i]);
    }
    gpu::buffer& b = t ? cs_comp : cs_swa;
    b = buf(tab.size() * f);
    dev.upload(b, tab);
  }
  uint64_t max_score = 1;
  for (uint32_t l = 0; l < c.layers; ++l) {
    dsv4_gpu_layer& G = layers[l];
    G.ring = buf(W * hd * f);
    auto comp_state = [&](dsv4_gpu_comp& g) {
      g.max_entries = std::max<uint64_t>(ctx / g.ratio, 1);
      g.kv = buf(uint64_t(g.cap) * g.cw * f);
      g.score = buf(uint64_t(g.cap) * g.cw * f);
      g.entries = buf(g.max_entries * g.width * f);
    };
    if (G.kind.ratio) {
      comp_state(G.comp);
      G.keys_cap = uint32_t(W + (G.kind.indexer ? c.index_topk : G.comp.max_entries));
      G.idx = buf(uint64_t(G.keys_cap) * 4);
    }
    if (G.kind.indexer) {
      comp_state(G.ix);
      max_score = std::max(max_score, G.ix.max_entries);
    }
    G.route_idx = buf(c.top_k * 4);
    G.route_w = buf(c.top_k * 4);
  }
  swa_idx = buf(W * 4);
  token = buf(4);
  win4 = buf(8);
  win128 = buf(8);
  gpu::kernels::hc_shape sh;
  sh.hc = c.hc, sh.d = c.dim;
  const uint64_t hcd = uint64_t(c.hc) * d, mix_rows = uint64_t(2 + c.hc) * c.hc;
  X = buf(hcd * f), Xn = buf(hcd * f);
  partials = buf(k.hc_partials_bytes(sh, 1, uint32_t(mix_rows)));
  coeff = buf(gpu::kernels::hc_coeff_floats(c.hc) * f);
  u = buf(d * f), attn_out = buf(d * f), moe_out = buf(d * f), sh_out = buf(d * f);
  qr = buf(c.q_lora * f);
  q = buf(uint64_t(c.heads) * hd * f), o = buf(uint64_t(c.heads) * hd * f);
  {  // split scratch of one row (any key count)
    gpu::kernels::attn_shape as;
    as.rows = 1, as.heads = c.heads, as.head_dim = uint32_t(hd);
    attn_x = buf(gpu::kernels::attn_scratch_floats(as) * f);
  }
  z = buf(uint64_t(c.o_groups) * c.o_lora * f);
  iq = buf(uint64_t(c.index_heads) * c.index_head_dim * f), iw = buf(c.index_heads * f);
  score = buf(max_score * f);
  rlogits = buf(c.experts * f);
  uint64_t moe_floats = 0;  // G.moe holds its shape here (place_experts uploads the matrices)
  for (const dsv4_gpu_layer& G : layers)
    moe_floats = std::max(moe_floats, gpu::kernels::moe_scratch_floats(G.moe, 1, c.top_k));
  moe_h = buf(moe_floats * f);
  sh_g = buf(c.moe_inter * f), sh_u = buf(c.moe_inter * f);
  logits = buf(uint64_t(c.vocab) * f);
  best = buf(16);
}

void dsv4_gpu_model::impl::place_experts() {
  const uint32_t E = cfg.experts, K = cfg.top_k, nl = cfg.layers;
  uint64_t one = 0, shared_one = 0;  // host bytes of one routed expert, of a stacked shared expert
  {
    const expert_view& e0 = host_experts.at(0).at(0);
    one = view_bytes(e0.gate) + view_bytes(e0.up) + view_bytes(e0.down);
  }
  uint64_t all = 0;
  for (uint32_t l = 0; l < nl; ++l) {
    const expert_view& s0 = host_shared[l];
    shared_one = layers[l].moe.shared ? view_bytes(s0.gate) + view_bytes(s0.up) + view_bytes(s0.down) : 0;
    all += uint64_t(E) * one + shared_one;
  }
  const uint64_t used = weight_bytes + state_bytes;
  const bool fits = opt.vram_budget == 0 || used + all <= opt.vram_budget;
  uint64_t slots = E;
  if (!fits) {
    auto gib = [](uint64_t b) { return std::to_string(double(b) / double(1ull << 30)).substr(0, 6) + " GiB"; };
    const uint64_t per_layer_min = uint64_t(K) * one + shared_one;
    if (used + per_layer_min * nl > opt.vram_budget)
      throw usage_error("gpu model: --vram-budget " + gib(opt.vram_budget) + " is below the " + gib(used) +
                        " of non-expert weights, state and scratch plus top_k = " + std::to_string(K) +
                        " experts per layer (" + gib(per_layer_min * nl) + "); at least " +
                        std::to_string(used + per_layer_min * nl) + " bytes (" + gib(used + per_layer_min * nl) +
                        ") are needed");
    slots = std::min<uint64_t>(E, ((opt.vram_budget - used) / nl - shared_one) / one);
  }
  for (uint32_t l = 0; l < nl; ++l) {
    dsv4_gpu_layer& G = layers[l];
    const expert_view* sh = G.moe.shared ? &host_shared[l] : nullptr;
    if (fits)
      G.moe = gpu::upload_moe(dev, host_experts[l], sh);
    else
      G.moe = gpu::alloc_moe_slots(dev, host_experts[l].at(0), E, uint32_t(slots), sh);
    weight_bytes += matrix_bytes(G.moe.gate_up.w) + matrix_bytes(G.moe.down.w);
  }
  if (fits) {
    host_experts.clear();
    host_shared.clear();
    return;
  }
  if (opt.profile) throw usage_error("gpu model: profiling is not available with the expert cache");
  cstats.active = true;
  cstats.slots = uint32_t(slots);
  cstats.slot_bytes = gpu::moe_slot_bytes(layers.at(0).moe);
  // Every expert is checked now (formats, shapes, sizes; one slot size for all layers: the ring and the budget
  // assume it), not in the middle of a token.
  for (uint32_t l = 0; l < nl; ++l) {
    if (gpu::moe_slot_bytes(layers[l].moe) != cstats.slot_bytes)
      throw usage_error("gpu model: the expert cache needs one expert size; layer " + std::to_string(l) + "'s is " +
                        std::to_string(gpu::moe_slot_bytes(layers[l].moe)) + " bytes, layer 0's " +
                        std::to_string(cstats.slot_bytes));
    for (uint32_t e = 0; e < E; ++e) try {
        (void)gpu::moe_slot_sources(layers[l].moe, host_experts[l][e]);
      } catch (const usage_error& err) {
        throw usage_error("gpu model: layer " + std::to_string(l) + ", expert " + std::to_string(e) + ": " + err.what());
      }
  }
  ring = dev.alloc_upload(uint64_t(K) * cstats.slot_bytes);
  copiers = std::make_unique<thread_pool>(
      std::max(1u, std::min(opt.copy_threads, std::max(1u, std::thread::hardware_concurrency()))));
  readback = dev.alloc_upload(uint64_t(nl) * K * 4);
  cache.resize(nl);
  for (uint32_t l = 0; l < nl; ++l) {
    dsv4_gpu_cache_layer& C = cache[l];
    C.slot_of.assign(E, 0xFFFFFFFFu);
    C.expert_in.assign(slots, -1);
    C.last_use.assign(slots, 0);
    C.map = dev.alloc(uint64_t(E) * 4);
    dev.upload(C.map, C.slot_of);
    weight_bytes += C.map.size();
  }
}

void dsv4_gpu_model::impl::cache_invalidate() {
  for (dsv4_gpu_cache_layer& C : cache) {
    C.slot_of.assign(C.slot_of.size(), 0xFFFFFFFFu);
    C.expert_in.assign(C.expert_in.size(), -1);
    C.last_use.assign(C.last_use.size(), 0);
    dev.upload(C.map, C.slot_of);
  }
}

bool dsv4_gpu_model::impl::cache_fill(uint32_t l, const uint32_t* ids, gpu::commands& c) {
  dsv4_gpu_cache_layer& C = cache.at(l);
  const uint32_t K = cfg.top_k, E = cfg.experts;
  const uint64_t tick = ++cache_tick;
  uint8_t* const staged = dev.mapped(ring);
  uint32_t moved = 0;
  std::vector<ring_chunk>& chunks = ring_chunks;  // the packed images, in pieces of ≤ 1 MiB for the copy threads
  chunks.clear();
  constexpr uint64_t piece = 1ull << 20;
  // First every selected expert that is resident is marked used by this token (so that no miss evicts it), then
  // the misses take the least recently used other slots.
  for (uint32_t j = 0; j < K; ++j)
    if (ids[j] < E && C.slot_of[ids[j]] != 0xFFFFFFFFu) C.last_use[C.slot_of[ids[j]]] = tick;
  for (uint32_t j = 0; j < K; ++j) {
    const uint32_t e = ids[j];
    if (e >= E) continue;  // an invalid id: the MoE turns the token into NaN (as without the cache)
    ++cstats.lookups;
    if (C.slot_of[e] != 0xFFFFFFFFu) {
      ++cstats.hits;
      continue;
    }
    // The least recently used slot not taken by this token (slots >= top_k, so one always exists).
    uint32_t victim = 0;
    uint64_t oldest = ~uint64_t(0);
    for (uint32_t s = 0; s < C.expert_in.size(); ++s)
      if (C.last_use[s] != tick && C.last_use[s] < oldest) oldest = C.last_use[s], victim = s;
    if (C.expert_in[victim] >= 0) C.slot_of[size_t(C.expert_in[victim])] = 0xFFFFFFFFu;
    // The packed image goes to the ring (the previous layer's copies have run: run() waited for its part), the
    // device copies it into the slot before this layer's MoE (submission order).
    const uint64_t off = uint64_t(moved) * cstats.slot_bytes;
    if (!moved) {
      c.barrier();
      if (dev.info().timestamps) (void)c.timestamp();  // stamp 0; stamp 1 after the copies (run() reads them)
    }
    uint8_t* to = staged + off;
    for (const auto& [from, bytes] : gpu::moe_slot_sources(layers[l].moe, host_experts[l][e]))
      for (uint64_t at = 0; at < bytes; at += piece) {
        chunks.push_back({to, from + at, std::min(piece, bytes - at)});
        to += chunks.back().bytes;
      }
    gpu::record_moe_slot(c, layers[l].moe, victim, gpu::view(ring, off, cstats.slot_bytes));
    cstats.bytes_moved += cstats.slot_bytes;
    ++moved;
    C.expert_in[victim] = int64_t(e);
    C.slot_of[e] = victim;
    C.last_use[victim] = tick;
  }
  if (!moved) return false;
  const auto t0 = std::chrono::steady_clock::now();
  copiers->run(chunks.size(), [&](uint64_t b, uint64_t e, unsigned) {
    for (uint64_t i = b; i < e; ++i) std::memcpy(chunks[i].to, chunks[i].from, chunks[i].bytes);
  });
  cstats.move_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  c.update(C.map, C.slot_of.data(), uint64_t(E) * 4);
  if (dev.info().timestamps) (void)c.timestamp();
  return true;
}

}  // namespace cmfx::driver

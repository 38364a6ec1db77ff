// Uploads of the V4 GPU graph: every weight of dsv4_weights into device memory (matrices in their storage
// format, small vectors as f32), the rope position tables, and the per-sequence state and scratch buffers.
#include <algorithm>
#include <cmath>
#include <string>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/vk/device.hpp"
#include "chunk_experts.hpp"
#include "dsv4_gpu_internal.hpp"
#include "gpu_upload.hpp"

namespace cmfx::driver {


dsv4_gpu_model::impl::impl(const dsv4_weights& w, gpu::device& d, gpu::kernels& kk, const dsv4_gpu_options& opts)
    : cfg(w.cfg), embed(w.embed), keep_alive(w.keep_alive), dev(d), k(kk), opt(opts) {
  if (opt.max_ctx == 0) throw usage_error("gpu model: max_ctx must be > 0");
  if (cfg.head_dim > gpu::kernels::attn_max_head_dim)
    throw usage_error("gpu model: head dim " + std::to_string(cfg.head_dim) + " exceeds the attention kernel's " +
                      std::to_string(gpu::kernels::attn_max_head_dim));
  if (cfg.experts > gpu::kernels::route_max_experts || cfg.top_k > gpu::kernels::route_max_k)
    throw usage_error("gpu model: expert count or top-k beyond the routing kernel's limits");
  experts = std::make_unique<gpu_expert_cache>(dev, cfg.experts, cfg.top_k);
  upload_weights(w);
  alloc_state();
  // The experts resident or in the expert cache, under a budget with the chunk scratch counted (chunk_experts.hpp
  // place_experts says when the scratch stays).
  weight_bytes += place_experts(*this, chunkable(),
                                chunk_passes_possible(k, w.layers.at(0).experts.at(0), opt.prefill_experts,
                                                      opt.expert_act, opt.prefill_chunk),
                                expert_cache_options(opt, float(cfg.swiglu_limit)));
  if (experts->active() && opt.profile) throw usage_error("gpu model: profiling is not available with the expert cache");
  // The embedding on the device for chained greedy decode: not with the expert cache (its steps are cut per layer),
  // nor past the budget or one storage binding (with room for the binding's alignment slack). Optional: where the
  // device memory runs out, decode steps one token at a time as before.
  const uint64_t ebytes = view_bytes(embed.v);
  if (opt.device_embedding && !experts->active() && ebytes + 4096 <= dev.info().max_storage_range &&
      (!opt.vram_budget || weight_bytes + state_bytes + ebytes <= opt.vram_budget)) {
    try {
      gpu::gpu_matrix e = gpu::upload_matrix(dev, embed.fmt, embed.v);
      gpu::buffer ring = dev.alloc_upload(ring_slots * 4);
      weight_bytes += gpu_matrix_bytes(e);
      embed_dev = std::move(e);
      ids_ring = std::move(ring);
    } catch (const gpu::gpu_error&) {
      embed_dev = gpu::gpu_matrix{};
    }
  }
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
    weight_bytes += gpu_matrix_bytes(g);
    if (read_per_token) token_bytes += view_bytes(m.v);
    return g;
  };
  auto comp = [&](const dsv4_compressor_w& c, dsv4_gpu_comp& g) {
    // The recording shares one window-position buffer per ratio (dsv4_gpu.cpp): V4's two compressor kinds only.
    if (!((c.ratio == 4 && c.overlap) || (c.ratio == 128 && !c.overlap)))
      throw usage_error("gpu model: compressor ratio " + std::to_string(c.ratio) +
                        (c.overlap ? " with" : " without") + " overlap is not a V4 compressor (4 with, 128 without)");
    g.ratio = c.ratio, g.width = c.width, g.overlap = c.overlap, g.cw = c.coff() * c.width;
    // pending-window ring: whole windows (a multiple of the ratio); with prefill chunks ≥ chunk + 2·ratio rows so a
    // chunk never overwrites a row its own pools still read (dsv4_gpu_chunk.cpp)
    g.cap = opt.prefill_chunk > 1 ? uint32_t((opt.prefill_chunk + c.ratio - 1) / c.ratio * c.ratio + 2 * c.ratio)
                                  : c.coff() * c.ratio;
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
    // wo_a runs one row block per output group (kernels::matmul_rows).
    G.wo_a = upload_row_groups(dev, L.wo_a, cfg.o_lora);
    weight_bytes += gpu_matrix_bytes(G.wo_a);
    token_bytes += view_bytes(L.wo_a.v);
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
    token_bytes += experts->add_layer(L.experts, L.shared, &G.moe);  // placed once the budget is known
    G.shared_apart = !G.moe.shared;
    G.shared_apart_chunks = G.moe.shared && opt.prefill_shared_apart && opt.prefill_chunk > 1 && opt.vram_budget == 0;
    if (G.shared_apart || G.shared_apart_chunks) {  // chunks only: copies, not read by decode steps
      G.sh_gate = mat({L.shared.gate, L.shared.gate_fmt}, G.shared_apart);
      G.sh_up = mat({L.shared.up, L.shared.up_fmt}, G.shared_apart);
      G.sh_down = mat({L.shared.down, L.shared.down_fmt}, G.shared_apart);
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
  cs_swa = upload_rope_table(dev, dsv4_rope_config(c, false), ctx);
  cs_comp = upload_rope_table(dev, dsv4_rope_config(c, true), ctx);
  state_bytes += cs_swa.size() + cs_comp.size();
  if (opt.prefill_chunk > 1) {  // entry j of ratio r ropes at its window's first position j·r
    cs_ent4 = upload_rope_table(dev, dsv4_rope_config(c, true), std::max<uint64_t>(ctx / 4, 1), 4);
    cs_ent128 = upload_rope_table(dev, dsv4_rope_config(c, true), std::max<uint64_t>(ctx / 128, 1), 128);
    state_bytes += cs_ent4.size() + cs_ent128.size();
  }
  ring_rows = W + (opt.prefill_chunk > 1 ? opt.prefill_chunk : 0);
  uint64_t max_score = 1;
  for (uint32_t l = 0; l < c.layers; ++l) {
    dsv4_gpu_layer& G = layers[l];
    G.ring = buf(ring_rows * hd * f);
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
  coeff = buf(gpu::kernels::hc_coeff_floats(c.hc) * f), coeff_f = buf(gpu::kernels::hc_coeff_floats(c.hc) * f);
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
  // the indexer's kernel variant changes with the entry count: build them all now, not mid-generation
  k.prepare_index_score(c.index_heads, c.index_head_dim, uint32_t(std::min<uint64_t>(max_score, UINT32_MAX)));
  rlogits = buf(c.experts * f);
  uint64_t moe_floats = 0;  // G.moe holds its shape here (experts->place uploads the matrices)
  for (const dsv4_gpu_layer& G : layers)
    moe_floats = std::max(moe_floats, gpu::kernels::moe_scratch_floats(G.moe, 1, c.top_k));
  moe_h = buf(moe_floats * f);
  sh_g = buf(c.moe_inter * f), sh_u = buf(c.moe_inter * f);
  if (opt.dense_act == act_precision::i8) {
    const uint64_t gcols = uint64_t(c.heads) * hd / c.o_groups;
    q_u.alloc(dev, d), q_qr.alloc(dev, c.q_lora), q_o.alloc(dev, gcols, c.o_groups);
    q_z.alloc(dev, uint64_t(c.o_groups) * c.o_lora);
    state_bytes += q_u.buf.size() + q_qr.buf.size() + q_o.buf.size() + q_z.buf.size();
  }
  logits = buf(uint64_t(c.vocab) * f);
  best = buf(16);
  best_host = dev.alloc_readback(16);
}

}  // namespace cmfx::driver

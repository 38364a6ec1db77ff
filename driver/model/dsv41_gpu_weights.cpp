// Uploads of the V4.1 GPU graph: every weight of dsv41_weights into device memory (matrices in their storage format,
// small vectors as f32), the rope position tables, and the per-sequence state and scratch buffers.
#include <algorithm>
#include <string>

#include "cmfx/core/error.hpp"
#include "cmfx/vk/device.hpp"
#include "chunk_experts.hpp"
#include "dsv41_gpu_internal.hpp"
#include "gpu_upload.hpp"

namespace cmfx::driver {

dsv41_gpu_model::impl::impl(const dsv41_weights& w, gpu::device& d, gpu::kernels& kk, const dsv41_gpu_options& opts)
    : cfg(w.cfg), embed(w.embed), keep_alive(w.keep_alive), engram(dsv41_make_engram(w)), dev(d), k(kk), opt(opts) {
  if (opt.max_ctx == 0) throw usage_error("gpu model: max_ctx must be > 0");
  if (cfg.head_dim > gpu::kernels::attn_max_head_dim || cfg.head_dim > gpu::kernels::pool_max_width)
    throw usage_error("gpu model: head dim " + std::to_string(cfg.head_dim) + " exceeds the attention kernels' " +
                      std::to_string(gpu::kernels::attn_max_head_dim));
  if (cfg.index_head_dim > gpu::kernels::index_max_head_dim)
    throw usage_error("gpu model: index head dim beyond the indexer kernel's " +
                      std::to_string(gpu::kernels::index_max_head_dim));
  if (cfg.experts > gpu::kernels::route_max_experts || cfg.top_k > gpu::kernels::route_max_k)
    throw usage_error("gpu model: expert count or top-k beyond the routing kernel's limits");
  if (cfg.index_topk > gpu::kernels::topk_max_k || cfg.candidate_topk_blocks > gpu::kernels::topk_max_k)
    throw usage_error("gpu model: index_topk / candidate_topk_blocks beyond the top-k kernel's " +
                      std::to_string(gpu::kernels::topk_max_k));
  if (cfg.head_dim % dsv41_kv_fp4_block || cfg.head_dim % dsv41_act_block ||
      (cfg.index_head_dim && cfg.index_head_dim % dsv41_index_fp4_block))
    throw usage_error("gpu model: V4.1 KV quantisation needs head dims divisible by 32");
  for (uint32_t l = 0; l < cfg.layers; ++l) {
    const dsv41_layer_plan& p = cfg.plan[l];
    if (p.mode == dsv41_mode::full && p.ratio > 2)
      throw usage_error("gpu model: KV source with ratio " + std::to_string(p.ratio) + " (V4.1 has 1 and 2)");
    // A consumer of the candidate pool with another ratio than its source could see fewer pool entries than
    // index_topk among its own (t+1)/ratio; the CPU then drops the −inf picks, the GPU top-k would keep them.
    if (p.uses_candidates && p.ratio != cfg.plan[size_t(cfg.candidate_source)].ratio)
      throw usage_error("gpu model: index layer " + std::to_string(l) + " (ratio " + std::to_string(p.ratio) +
                        ") uses the candidate pool of layer " + std::to_string(cfg.candidate_source) +
                        " with another ratio: not supported on the GPU");
  }
  for (const dsv41_layer_w& L : w.layers) host_layers.push_back(&L);
  experts = std::make_unique<gpu_expert_cache>(dev, cfg.experts, cfg.top_k);
  upload_weights(w);
  alloc_state();
  // The experts resident or in the expert cache, under a budget with the chunk scratch counted (chunk_experts.hpp
  // place_experts says when the scratch stays).
  weight_bytes += place_experts(*this, true,
                                chunk_passes_possible(k, w.layers.at(0).experts.at(0), opt.prefill_experts,
                                                      opt.expert_act, opt.prefill_chunk),
                                expert_cache_options(opt, float(cfg.swiglu_limit)));
  if (experts->active() && opt.profile) throw usage_error("gpu model: profiling is not available with the expert cache");
  // Chained greedy decode (dsv41_gpu_options::device_embedding) as V4's: not with the expert cache (its steps are
  // cut per layer), nor past the budget or one storage binding; where the device memory runs out, steps run one at
  // a time as before. The Engram rows stay on the host: a ring of staging slots the host fills per step.
  const uint64_t ebytes = view_bytes(embed.v);
  if (opt.device_embedding && !experts->active() && ebytes + 4096 <= dev.info().max_storage_range &&
      (!opt.vram_budget || weight_bytes + state_bytes + ebytes <= opt.vram_budget)) {
    try {
      gpu::gpu_matrix e = gpu::upload_matrix(dev, embed.fmt, embed.v);
      gpu::buffer ring = dev.alloc_readback(ring_slots * 4);
      gpu::buffer stage = dev.alloc_upload(std::max<uint64_t>(ring_slots * eg_floats * 4, 16));
      weight_bytes += gpu_matrix_bytes(e);
      embed_dev = std::move(e);
      ids_ring = std::move(ring);
      eg_stage = std::move(stage);
    } catch (const gpu::gpu_error&) {
      embed_dev = gpu::gpu_matrix{};
    }
  }
}

void dsv41_gpu_model::impl::upload_weights(const dsv41_weights& w) {
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
  head = mat(w.head);
  norm = vec(w.norm);
  layers.resize(cfg.layers);
  for (uint32_t l = 0; l < cfg.layers; ++l) {
    const dsv41_layer_w& L = w.layers[l];
    const dsv41_layer_plan& P = cfg.plan[l];
    dsv41_gpu_layer& G = layers[l];
    G.attn_norm = vec(L.attn_norm), G.ffn_norm = vec(L.ffn_norm), G.q_norm = vec(L.q_norm);
    G.kv_norm = vec(L.kv_norm), G.sink = vec(L.attn_sink);
    G.hc_attn_fn = vec(L.hc_attn_fn), G.hc_attn_base = vec(L.hc_attn_base), G.hc_attn_scale = vec(L.hc_attn_scale);
    G.hc_ffn_fn = vec(L.hc_ffn_fn), G.hc_ffn_base = vec(L.hc_ffn_base), G.hc_ffn_scale = vec(L.hc_ffn_scale);
    G.wq_a = mat(L.wq_a), G.wq_b = mat(L.wq_b), G.wkv = mat(L.wkv), G.wo_b = mat(L.wo_b);
    G.wo_a = upload_row_groups(dev, L.wo_a, cfg.o_lora);  // one row block per output group (matmul_rows)
    weight_bytes += gpu_matrix_bytes(G.wo_a);
    token_bytes += view_bytes(L.wo_a.v);
    if (P.mode == dsv41_mode::full) {
      G.comp_wkv = mat(L.comp_wkv);
      if (P.ratio > 1) G.comp_wgate = mat(L.comp_wgate);
      G.comp_norm = vec(L.comp_norm);
      G.ix_wk = mat(L.ix_wk);
      G.ix_k_norm = vec(L.ix_k_norm);
    }
    if (P.mode == dsv41_mode::full || P.mode == dsv41_mode::reindex) {
      G.ix_wq_b = mat(L.ix_wq_b);
      G.ix_wp = mat(L.ix_weights_proj);
    }
    if (P.engram >= 0) {
      G.eg_wkv = mat(L.eg_wkv);
      G.eg_qk = vec(engram.qk.at(size_t(P.engram)));
    }
    G.gate = mat(L.gate);
    G.gate_bias = vec(L.gate_bias);
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

void dsv41_gpu_model::impl::alloc_state() {
  const dsv41_config& c = cfg;
  const uint64_t ctx = opt.max_ctx, W = c.window, hd = c.head_dim, d = c.dim, f = 4;
  auto buf = [&](uint64_t bytes) {
    gpu::buffer b = dev.alloc(std::max<uint64_t>(bytes, 16));
    state_bytes += b.size();
    return b;
  };
  cs_swa = upload_rope_table(dev, dsv41_rope_config(c, false), ctx);
  cs_comp = upload_rope_table(dev, dsv41_rope_config(c, true), ctx);
  state_bytes += cs_swa.size() + cs_comp.size();
  if (opt.prefill_chunk > 1)  // the prefill chunks rope the closing groups at their positions j·r
    for (const dsv41_layer_plan& P : c.plan)
      if (P.mode == dsv41_mode::full && P.ratio > 1) {
        if (cs_ent.size() <= P.ratio) cs_ent.resize(P.ratio + 1);
        if (cs_ent[P.ratio]) continue;
        cs_ent[P.ratio] =
            upload_rope_table(dev, dsv41_rope_config(c, true), std::max<uint64_t>(ctx / P.ratio, 1), P.ratio);
        state_bytes += cs_ent[P.ratio].size();
      }
  ent_cap = ctx;  // a ratio-1 source writes one entry per position; one capacity for all keeps one window offset
  // the indexer's kernel variant changes with the entry count: build them all now, not mid-generation
  k.prepare_index_score(c.index_heads, c.index_head_dim, uint32_t(std::min<uint64_t>(ent_cap, UINT32_MAX)));
  for (uint32_t l = 0; l < c.layers; ++l) {
    const dsv41_layer_plan& P = c.plan[l];
    dsv41_gpu_layer& G = layers[l];
    G.ring = buf(W * hd * f);
    if (P.mode == dsv41_mode::full) {
      if (P.ratio > 1) G.pend_kv = buf(P.ratio * hd * f), G.pend_sc = buf(P.ratio * hd * f);
      G.entries = buf(ent_cap * hd * f);
      G.keys = buf(ent_cap * c.index_head_dim * f);
    }
    if (P.mode == dsv41_mode::full || P.mode == dsv41_mode::reindex) G.idx = buf((W + c.index_topk) * 4);
    G.route_idx = buf(c.top_k * 4);
    G.route_w = buf(c.top_k * 4);
  }
  swa_idx = buf(W * 4);
  {
    // A closing ratio-2 group starts at a multiple of the ratio: its first pending row is always row 0.
    const uint32_t w2[2] = {0, 0xFFFFFFFFu};
    win2 = buf(8);
    dev.upload(win2, w2, 8);
    std::vector<float> one(c.hc, 0.0f);
    one[0] = 1.0f;
    fold0 = buf(c.hc * f);
    dev.upload(fold0, one);
  }
  for (size_t e = 0; e < c.engram_layers.size(); ++e) eg_E.push_back(buf(engram.cfg.embed_dim() * f));
  eg_floats = engram.cfg.embed_dim() * c.engram_layers.size();
  gpu::kernels::hc_shape sh;
  sh.hc = c.hc, sh.d = c.dim;
  const uint64_t hcd = uint64_t(c.hc) * d, mix_rows = uint64_t(2 + c.hc) * c.hc;
  X = buf(hcd * f), Xn = buf(hcd * f);
  partials = buf(k.hc_partials_bytes(sh, 1, uint32_t(mix_rows)));
  coeff_a = buf(gpu::kernels::hc_coeff_floats(c.hc) * f), coeff_f = buf(gpu::kernels::hc_coeff_floats(c.hc) * f);
  u = buf(d * f), attn_out = buf(d * f), moe_out = buf(d * f), sh_out = buf(d * f);
  qr = buf(c.q_lora * f);
  q = buf(uint64_t(c.heads) * hd * f), o = buf(uint64_t(c.heads) * hd * f);
  {
    gpu::kernels::attn_shape as;
    as.rows = 1, as.heads = c.heads, as.head_dim = uint32_t(hd);
    attn_x = buf(gpu::kernels::attn_scratch_floats(as) * f);
  }
  z = buf(uint64_t(c.o_groups) * c.o_lora * f);
  iq = buf(uint64_t(c.index_heads) * c.index_head_dim * f), iw = buf(c.index_heads * f);
  score = buf(ent_cap * f);
  const uint64_t bs = std::max<uint32_t>(c.candidate_block_size, 1);
  cand_blk = buf((ent_cap + bs - 1) / bs * f);
  cand_idx = buf(uint64_t(c.candidate_topk_blocks) * 4);
  rlogits = buf(c.experts * f);
  uint64_t moe_floats = 0;
  for (const dsv41_gpu_layer& G : layers)
    moe_floats = std::max(moe_floats, gpu::kernels::moe_scratch_floats(G.moe, 1, c.top_k));
  moe_h = buf(moe_floats * f);
  sh_g = buf(c.moe_inter * f), sh_u = buf(c.moe_inter * f);
  eg_kv = buf(uint64_t(c.hc + 1) * d * f);
  if (opt.dense_act == act_precision::i8) {
    const uint64_t gcols = uint64_t(c.heads) * hd / c.o_groups;
    q_u.alloc(dev, d), q_qr.alloc(dev, c.q_lora), q_o.alloc(dev, gcols, c.o_groups);
    q_z.alloc(dev, uint64_t(c.o_groups) * c.o_lora), q_ent.alloc(dev, hd);
    state_bytes += q_u.buf.size() + q_qr.buf.size() + q_o.buf.size() + q_z.buf.size() + q_ent.buf.size();
    for (const dsv41_gpu_layer& G : layers)  // every Engram layer's projection has the same input width
      if (G.eg_wkv.rows && !q_eg.cols) {
        q_eg.alloc(dev, G.eg_wkv.cols);
        state_bytes += q_eg.buf.size();
      }
  }
  logits = buf(uint64_t(c.vocab) * f);
  best = buf(16);
  best_host = dev.alloc_readback(16);
}

}  // namespace cmfx::driver

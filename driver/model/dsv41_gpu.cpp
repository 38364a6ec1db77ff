// One token of the V4.1 graph recorded into one command buffer (dsv4-architecture.md §4; the CPU twin is
// dsv41_forward.cpp / dsv41_attention.cpp). What depends on the position only (window slots, which groups close,
// whose index keys an index source scores) is decided when recording; the token's own inputs (embedding, Engram
// rows) are written by run() into a small command buffer submitted before it.
//
// Per layer: [Engram: wkv · E → gated add → mix + hc_pre_finish_fold (the previous FFN's pre) + attn_norm] →
// projections of u (concurrent) → norms → wq_b, ix_wq_b, kv rope, compressor pooling → q / iq ropes, KV FP8,
// index key projection → FP4 quantisations → indexer score (+ candidate pool / mask) → top-k → sparse attention over
// [KV source's entries | window] → inverse rope → wo_a groups → wo_b → hc_post + mix + hc_pre_finish_fold (the
// attention's pre) + ffn_norm (one dispatch) → router → routing → experts (→ shared) → hc_post (+ the next layer's
// mix, hc_pre_finish_fold and attn_norm). Head: hc_fold with the last FFN's pre + norm → head matmul (→ device
// argmax). With dense_act = i8 the dense products of an int8 format read int8 copies of their inputs
// (gpu_dense_i8.hpp, the V4 graph's scheme): u quantised in a step before the projections, qr by its norm, o by
// wo_a group, z, a closing entry before ix_wk, the Engram row, u beside the router for a shared expert apart and
// before the head.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/vk/device.hpp"
#include "chunk_experts.hpp"
#include "dsv41_gpu_internal.hpp"
#include "gpu_moe_step.hpp"
#include "gpu_recording.hpp"
#include "gpu_upload.hpp"

namespace cmfx::driver {

namespace {

using gpu::view;
using fq = gpu::kernels::fq_format;

view row(const gpu::buffer& b, uint64_t r, uint64_t floats) { return view(b, r * floats * 4, floats * 4); }

/// The recording's variant key: prefill flag and the previous call's index-key owner.
int64_t variant_of(bool prefill, int prev_owner) { return (prefill ? 1 : 0) | (int64_t(prev_owner + 1) << 1); }

}  // namespace

std::shared_ptr<gpu_recording> dsv41_gpu_model::impl::record(uint64_t t, int logits_mode, bool prefill,
                                                            int prev_owner) {
  return record_steps(t, logits_mode, prefill, prev_owner).finish();
}

record_task dsv41_gpu_model::impl::record_steps(uint64_t t, int logits_mode, bool prefill, int prev_owner, bool fed,
                                                int chain_slot) {
  const dsv41_config& cf = cfg;
  const auto t_rec = std::chrono::steady_clock::now();
  const uint64_t d = cf.dim, hc = cf.hc, hd = cf.head_dim, rd = cf.rope_dim, W = cf.window;
  const uint32_t H = cf.heads, IH = cf.index_heads, IHD = cf.index_head_dim, K = cf.top_k, TK = cf.index_topk;
  const float eps = float(cf.norm_eps);
  gpu::kernels::hc_shape sh;
  sh.hc = uint32_t(hc), sh.d = uint32_t(d), sh.norm_eps = eps, sh.hc_eps = float(cf.hc_eps), sh.iters = cf.hc_iters;
  const uint32_t mix_rows = uint32_t((2 + hc) * hc), cstride = gpu::kernels::hc_coeff_floats(uint32_t(hc));

  auto rec = std::make_shared<gpu_recording>(dev.begin(), opt.profile, dev.info().timestamps);
  gpu::commands* cur = &rec->c;
  const bool segmented = experts->active();
  if (segmented) rec->segs.reserve(size_t(cf.layers) * 2);  // two per layer with cpu_fallback()
  auto cut = [&] {
    rec->segs.push_back(dev.begin());
    cur = &rec->segs.back();
    cur->barrier();
  };
  gpu_stamps& ts = rec->ts;
  rec->pos = t, rec->mode = logits_mode, rec->profiled = opt.profile, rec->profile_layers = opt.profile_layers;
  rec->variant = chain_slot >= 0 ? -1 : variant_of(prefill, prev_owner);  // a chained recording: never reused by run()
  cur->barrier();
  if (fed) k.embed_rows(*cur, embed_dev, view(best, 0, 4), 1, uint32_t(hc), X);  // the previous step's argmax
  bool staged = chain_slot < 0;  // a chained step's Engram rows: copied from eg_stage at the start of part B
  // ---- position parameters: window slots (SWA layers raw, index sources after the compressed capacity)
  {
    std::vector<int32_t> win(W, -1), wix(W, -1);
    const uint64_t first = t + 1 > W ? t + 1 - W : 0;
    for (uint64_t s = first; s <= t; ++s) {
      win[s - first] = int32_t(s % W);
      wix[s - first] = int32_t(s % W + ent_cap);
    }
    cur->update(swa_idx, win.data(), W * 4);
    for (const dsv41_gpu_layer& G : layers)
      if (G.idx) cur->update(view(G.idx, 0, W * 4), wix.data(), W * 4);
  }
  if (ts.on) ts.op_last = ts.last = cur->timestamp();

  // A sublayer boundary is one dispatch (kernels::hc_post_finish): hc_post with the next site's mix, then — in its
  // last workgroup — that site's hc_pre_finish_fold (collapse weighted by the previous site's pre `fold`, the new
  // coefficients into `out`) and input norm; the Sinkhorn C apart.
  auto folded = [&](const gpu::buffer& base, const gpu::buffer& scale, const gpu::buffer& norm_w, view fold, view out) {
    gpu::kernels::hc_finish_args f;
    f.base = base, f.scale = scale, f.sinkhorn = false, f.y = u, f.norm = norm_w;
    f.fold = fold, f.fold_stride = cstride, f.coeff_out = out;
    return f;
  };
  // the dense products (int8 inputs where dense_act = i8 and the format has an int8 kernel: gpu_dense_i8.hpp)
  const gpu_dense_act da{k, opt.dense_act};
  std::vector<int> keys_from(cf.layers, -1);
  for (uint32_t l = 0; l < cf.layers; ++l) {
    dsv41_gpu_layer& G = layers[l];
    const dsv41_layer_plan& P = cf.plan[l];
    ts.detail = std::find(opt.profile_layers.begin(), opt.profile_layers.end(), l) != opt.profile_layers.end();
    if (ts.detail) {
      char name[32];
      std::snprintf(name, sizeof name, "L%u %s ", l, dsv41_mode_name(P.mode));
      ts.prefix = name;
    }
    // ---- Engram (before the attention's mixes: its partial mixes are taken after the add)
    if (P.engram >= 0 && !staged) {  // part B of a chained step: the host stages the rows while part A runs
      cut();
      const uint64_t eb = eg_floats / cf.engram_layers.size() * 4;
      for (size_t e = 0; e < eg_E.size(); ++e)
        cur->copy(view(eg_stage, (uint64_t(chain_slot) * eg_E.size() + e) * eb, eb), view(eg_E[e], 0, eb), eb);
      staged = true;
    }
    if (P.engram >= 0) {
      const engram_config& ec = engram.cfg;
      const view eg_row = eg_E.at(size_t(P.engram));
      if (da.quantize(*cur, {&G.eg_wkv}, eg_row, q_eg)) ts.op("Engram row int8");
      da.matvec(*cur, G.eg_wkv, eg_row, q_eg, eg_kv);
      k.engram_gate_add(*cur, X, eg_kv, G.eg_qk, 1, uint32_t(hc), uint32_t(d), ec.eps, ec.gate_clamp);
      ts.op("engram");
    }
    // ---- attention sublayer: the collapse with the previous FFN's pre (one-hot before layer 0); the previous
    // layer's MoE boundary ran it unless an Engram add came between (then: the mix of X and the finish here). The
    // Sinkhorn C (first read by hc_post) runs apart, next to the projections.
    if (P.engram >= 0 || l == 0) {
      k.hc_post_finish(*cur, sh, view(), X, coeff_f, 1, view(), G.hc_attn_fn, mix_rows, partials,
                       folded(G.hc_attn_base, G.hc_attn_scale, G.attn_norm, l ? view(coeff_f) : view(fold0), coeff_a));
      ts.op("hc_mix + hc_pre_finish + attn_norm");
      ts.mark(&gpu_graph_profile::hc);
    }
    const uint32_t r = P.ratio;
    const bool full = P.mode == dsv41_mode::full, ixs = full || P.mode == dsv41_mode::reindex;
    const bool closes = full && (t + 1) % r == 0;
    const view cs_t = row(r ? cs_comp : cs_swa, t, rd);
    const view kv_row = row(G.ring, t % W, hd);
    const uint64_t ne_own = full ? (t + 1) / r : 0;
    if (ne_own > ent_cap) throw std::logic_error("gpu model: compressed entries beyond max_ctx");
    const view ent_row = closes ? row(G.entries, ne_own - 1, hd) : view();
    const view key_row = closes ? row(G.keys, ne_own - 1, IHD) : view();
    // With int8 inputs, u's quantisation is a step before the projections (as the V4 graph's); qr's copy is written
    // by its norm (kernels::rmsnorm_q8), a closing entry's before ix_wk, o's by wo_a group, z's before wo_b.
    const std::initializer_list<const gpu::gpu_matrix*> u_users = {
        &G.wq_a, &G.wkv, full ? &G.comp_wkv : nullptr, full && r > 1 ? &G.comp_wgate : nullptr,
        ixs ? &G.ix_wp : nullptr};
    cur->begin_concurrent();
    if (da.quantize(*cur, u_users, u, q_u)) {
      cur->end_concurrent();
      ts.op("u int8");
      cur->begin_concurrent();
    }
    k.hc_sinkhorn(*cur, sh, partials, G.hc_attn_base, G.hc_attn_scale, 1, coeff_a);
    da.matvec(*cur, G.wq_a, u, q_u, qr);
    da.matvec(*cur, G.wkv, u, q_u, kv_row);
    if (full && r > 1) {
      da.matvec(*cur, G.comp_wkv, u, q_u, row(G.pend_kv, t % r, hd));
      da.matvec(*cur, G.comp_wgate, u, q_u, row(G.pend_sc, t % r, hd));
    } else if (full) {
      da.matvec(*cur, G.comp_wkv, u, q_u, ent_row);  // ratio 1: every token closes its group
    }
    if (ixs) da.matvec(*cur, G.ix_wp, u, q_u, iw);
    cur->end_concurrent();
    ts.op("projections of u (concurrent)");
    const std::initializer_list<const gpu::gpu_matrix*> qr_users = {&G.wq_b, ixs ? &G.ix_wq_b : nullptr};
    const gpu::gpu_matrix* qr_q8 = da.first(qr_users);
    cur->begin_concurrent();
    if (qr_q8)
      k.rmsnorm_q8(*cur, qr, G.q_norm, qr, 1, cf.q_lora, eps, qr_q8->fmt, q_qr.at(qr_q8->fmt));
    else
      k.rmsnorm(*cur, qr, G.q_norm, qr, 1, cf.q_lora, eps);
    // the window KV's norm and rope in one dispatch (rmsnorm_rope: the values of the two), so that its FP8 cache
    // quantisation runs beside wq_b
    k.rmsnorm_rope(*cur, kv_row, G.kv_norm, kv_row, 1, uint32_t(hd), eps, cs_t, 1, uint32_t(rd));
    if (ixs) k.scale(*cur, iw, IH, float(1.0 / std::sqrt(double(IHD)) / std::sqrt(double(IH))));
    if (full && r == 1) k.rmsnorm(*cur, ent_row, G.comp_norm, ent_row, 1, uint32_t(hd), eps);
    cur->end_concurrent();
    ts.op("norms, iw scale (concurrent)");
    cur->begin_concurrent();
    const bool qr_second = da.quantize(*cur, qr_users, qr, q_qr, qr_q8);  // a second int8 format among them
    cur->end_concurrent();
    if (qr_second) ts.op("qr int8, a second format");
    ts.mark(&gpu_graph_profile::attn_proj);
    cur->begin_concurrent();
    da.matvec(*cur, G.wq_b, qr, q_qr, q);
    if (ixs) da.matvec(*cur, G.ix_wq_b, qr, q_qr, iq);
    if (opt.qat_kv) k.fake_quant(*cur, kv_row, 1, uint32_t(hd), dsv41_act_block, fq::e4m3);
    if (closes && r > 1) {
      gpu::kernels::pool_shape ps;
      ps.entries = 1, ps.ratio = r, ps.width = uint32_t(hd), ps.row_floats = uint32_t(hd), ps.overlap = false, ps.eps = eps;
      k.compress_pool(*cur, ps, G.pend_kv, G.pend_sc, win2, G.comp_norm, ent_row);
    }
    cur->end_concurrent();
    ts.op("wq_b, ix_wq_b, kv FP8, pool (concurrent)");
    // The latent is pre-rope here: the index key is projected from it before its own rope.
    if (closes && da.quantize(*cur, {&G.ix_wk}, ent_row, q_ent)) ts.op("entry int8");
    // (q's rope runs in the attention's workgroups: attn_shape::q_rope)
    if (ixs || closes) {
      cur->begin_concurrent();
      if (ixs) k.rope(*cur, iq, cs_t, 1, IH, IHD, uint32_t(rd), false);
      if (closes) da.matvec(*cur, G.ix_wk, ent_row, q_ent, key_row);
      cur->end_concurrent();
    }
    const view cs_g = closes ? row(cs_comp, t + 1 - r, rd) : view();  // the group's position
    if ((ixs && opt.qat_kv) || closes) {
      cur->begin_concurrent();
      if (ixs && opt.qat_kv) k.fake_quant(*cur, iq, 1, IH * IHD, dsv41_index_fp4_block, fq::e2m1);
      if (closes) {
        k.rmsnorm(*cur, key_row, G.ix_k_norm, key_row, 1, IHD, eps);
        k.rope(*cur, ent_row, cs_g, 1, 1, uint32_t(hd), uint32_t(rd), false);
      }
      cur->end_concurrent();
    }
    if (closes) {
      cur->begin_concurrent();
      k.rope(*cur, key_row, cs_g, 1, 1, IHD, uint32_t(rd), false);
      if (opt.qat_kv) k.fake_quant(*cur, ent_row, 1, uint32_t(hd), dsv41_kv_fp4_block, fq::e2m1_e4m3);
      cur->end_concurrent();
      if (opt.qat_kv) k.fake_quant(*cur, key_row, 1, IHD, dsv41_index_fp4_block, fq::e2m1);
    }
    if (ixs || closes) ts.op("index q / key ropes, entry / index quantisation");
    ts.mark(&gpu_graph_profile::compress);
    // ---- indexer: the published keys of keys_from, the candidate pool, the top-k into this layer's slots
    if (ixs) {
      const int kl = dsv41_keys_layer(cf, opt.stale_index_k, l, t, prefill, prev_owner);
      keys_from[l] = kl;
      const uint64_t ne = (t + 1) / r;
      const view picks(G.idx, W * 4, uint64_t(TK) * 4);
      if (ne > 0) {
        gpu::kernels::index_shape is;
        is.rows = 1, is.heads = IH, is.head_dim = IHD, is.n = uint32_t(ne);
        k.index_score(*cur, is, iq, layers.at(size_t(kl)).keys, iw, view(), score);
        ts.op("index_score");
        if (P.candidate_source) {  // the pool for the later index layers; its own top-k is not confined
          const uint32_t bs = cf.candidate_block_size, nb = uint32_t((ne + bs - 1) / bs);
          k.block_max(*cur, score, 1, uint32_t(ne), bs, cand_blk);
          k.topk(*cur, cand_blk, 1, nb, cf.candidate_topk_blocks, cand_idx, true);
        }
        if (P.uses_candidates)
          k.mask_scores(*cur, score, 1, uint32_t(ne), cf.candidate_block_size, cand_blk, cand_idx,
                        cf.candidate_topk_blocks);
        k.topk(*cur, score, 1, uint32_t(ne), TK, picks, true);  // the set matters, not its order
        ts.op("candidates + topk");
      } else {
        cur->fill(picks, uint64_t(TK) * 4, 0xFFFFFFFFu);
      }
      ts.mark(&gpu_graph_profile::index);
    }
    // ---- sparse attention with sink over [KV source's entries | window], the inverse rope in its write (and with
    // fold_o_q8, int8 inputs for wo_a, o's int8 copy by group, where it splits)
    const auto o_q8 = opt.fold_o_q8 ? da.attn_q8(G.wo_a, q_o) : std::nullopt;
    bool o_q8_done = false;
    gpu::kernels::attn_shape as;
    as.rows = 1, as.heads = H, as.head_dim = uint32_t(hd), as.scale = float(1.0 / std::sqrt(double(hd)));
    as.inv_rope_dim = uint32_t(rd), as.q_rope = true;  // q's rope in its workgroups (no per-head norm in V4.1)
    if (r) {
      as.keys = uint32_t(W + TK), as.kv_a_rows = uint32_t(ent_cap), as.kv_b_rows = uint32_t(W);
      o_q8_done = k.sparse_attention(*cur, as, q, layers.at(size_t(P.kv_from)).entries, G.ring,
                                     layers.at(size_t(P.topk_from)).idx, G.sink, o, attn_x, cs_t, o_q8 ? &*o_q8 : nullptr);
    } else {
      as.keys = uint32_t(W), as.kv_a_rows = uint32_t(W), as.kv_b_rows = 0;
      o_q8_done = k.sparse_attention(*cur, as, q, G.ring, view(), swa_idx, G.sink, o, attn_x, cs_t, o_q8 ? &*o_q8 : nullptr);
    }
    ts.op("sparse_attention + o inverse rope");
    ts.mark(&gpu_graph_profile::attn_core);
    const uint64_t Gs = cf.o_groups, ol = cf.o_lora, gcols = uint64_t(H) * hd / Gs;
    if (!o_q8_done && da.quantize(*cur, {&G.wo_a}, o, q_o)) ts.op("o int8 by group");  // one dispatch: a vector per group
    cur->begin_concurrent();
    for (uint64_t g = 0; g < Gs; ++g)
      da.matvec_rows(*cur, G.wo_a, g * ol, (g + 1) * ol, view(o, g * gcols * 4, gcols * 4), q_o,
                     view(z, g * ol * 4, ol * 4), uint32_t(g));
    cur->end_concurrent();
    ts.op("wo_a groups (concurrent)");
    if (da.quantize(*cur, {&G.wo_b}, z, q_z)) ts.op("z int8");
    da.matvec(*cur, G.wo_b, z, q_z, attn_out);
    ts.op("wo_b");
    // ---- MoE sublayer: the collapse with the attention's pre, in the boundary's dispatch
    k.hc_post_finish(*cur, sh, attn_out, X, coeff_a, 1, Xn, G.hc_ffn_fn, mix_rows, partials,
                     folded(G.hc_ffn_base, G.hc_ffn_scale, G.ffn_norm, coeff_a, coeff_f));
    ts.op("hc_post + mix + hc_pre_finish + ffn_norm");
    std::swap(X, Xn);
    ts.mark(&gpu_graph_profile::attn_out);
    gpu_moe_sublayer_io io;
    io.sh = sh, io.partials = partials, io.coeff = coeff_f, io.u = u, io.q_u = &q_u;
    io.rlogits = rlogits, io.moe_h = moe_h, io.moe_out = moe_out, io.sh_g = sh_g, io.sh_u = sh_u, io.sh_out = sh_out;
    io.rc.top_k = K, io.rc.route_scale = float(cf.route_scale);
    io.rc.norm_eps = float(dsv41_route_norm_eps), io.rc.temp = float(cf.gate_temp);
    io.experts = cf.experts, io.limit = float(cf.swiglu_limit), io.inter = cf.moe_inter, io.act = opt.expert_act;
    io.fuse_route = opt.fuse_route;
    const view moe_add = record_moe_sublayer(k, da, cur, ts, G, l, io, *experts, segmented, cut);
    // The next attention's mix and collapse come with this hc_post unless an Engram add changes X first.
    if (l + 1 < cf.layers && cf.plan[l + 1].engram < 0) {
      const dsv41_gpu_layer& N = layers[l + 1];
      k.hc_post_finish(*cur, sh, moe_out, X, coeff_f, 1, Xn, N.hc_attn_fn, mix_rows, partials,
                       folded(N.hc_attn_base, N.hc_attn_scale, N.attn_norm, coeff_f, coeff_a), moe_add);
      ts.op("hc_post + mix + hc_pre_finish + attn_norm");
    } else {
      k.hc_post(*cur, sh, moe_out, X, coeff_f, 1, Xn, view(), 0, view(), moe_add);
      ts.op("hc_post");
    }
    std::swap(X, Xn);
    ts.mark(&gpu_graph_profile::hc);
    co_yield 0;  // a layer recorded (record_task)
  }
  if (logits_mode) {
    k.hc_fold(*cur, sh, X, coeff_f, cstride, 1, u, norm);  // the last FFN's pre + the final norm
    if (da.quantize(*cur, {&head}, u, q_u)) ts.op("u int8 (head)");
    da.matvec(*cur, head, u, q_u, logits);
    if (logits_mode == 2) k.topk(*cur, logits, 1, cf.vocab, 1, best);
    if (logits_mode == 3) chooser.record_draw(k, *cur, logits, cf.vocab, best);
    if (logits_mode >= 2) chooser.record_logprobs(k, *cur, logits, cf.vocab, best, uint32_t(std::max(chain_slot, 0)));
    if (logits_mode >= 2)  // read by chosen_id(), or from the ring by decode_chained
      cur->copy(view(best, 0, 4), chain_slot >= 0 ? view(ids_ring, uint64_t(chain_slot) * 4, 4) : view(best_host, 0, 4), 4);
    ts.mark(&gpu_graph_profile::head);
  }
  rec->close();
  rec->dispatches = rec->c.dispatch_count();
  for (const gpu::commands& sc : rec->segs) rec->dispatches += sc.dispatch_count();
  rec->record_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_rec).count();
  rec->keys_from = std::move(keys_from);
  co_return rec;
}

void dsv41_gpu_model::impl::run(uint32_t tok, int logits_mode, bool prefill, dsv41_trace* trace, int next_mode) {
  const dsv41_config& cf = cfg;
  if (tok >= cf.vocab) throw usage_error("gpu model: token id " + std::to_string(tok) + " >= vocab " + std::to_string(cf.vocab));
  if (pos >= opt.max_ctx)
    throw usage_error("gpu model: position " + std::to_string(pos) + " reaches the device context of " +
                      std::to_string(opt.max_ctx) + " positions (--ctx)");
  const uint64_t d = cf.dim, hc = cf.hc, W = cf.window;
  const int prev_owner = prefill ? -1 : last_owner;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto since = [](clock::time_point a) { return std::chrono::duration<double>(clock::now() - a).count(); };
  host_s = {};
  // The token's own inputs: its embedding in every hc copy of X and its Engram rows (gathered and decoded here).
  gpu::commands pre = dev.begin();
  pre.barrier();
  // The id joins the Engram history for this step; on any failure before the step completes it leaves again.
  struct cid_guard {
    std::vector<uint32_t>* v = nullptr;
    ~cid_guard() {
      if (v) v->pop_back();
    }
  } guard;
  if (!cf.engram_layers.empty()) {
    cids.push_back(uint32_t(engram.map(tok)));
    guard.v = &cids;
  }
  {
    std::vector<float> x(d);
    visit_format(embed.fmt, [&]<class F>() { F::decode_row(embed.v, tok, x.data()); });
    for (uint64_t j = 0; j < hc; ++j) pre.update(view(X, j * d * 4, d * 4), x.data(), d * 4);
    if (!cf.engram_layers.empty()) {
      const uint64_t ed = engram.cfg.embed_dim();
      std::vector<float> E(eg_floats);
      engram_rows(pos, E.data());
      for (size_t e = 0; e < cf.engram_layers.size(); ++e)
        for (uint64_t o0 = 0; o0 < ed; o0 += gpu::commands::update_max / 4) {
          const uint64_t n = std::min<uint64_t>(ed - o0, gpu::commands::update_max / 4);
          pre.update(view(eg_E[e], o0 * 4, n * 4), E.data() + e * ed + o0, n * 4);
        }
    }
  }
  std::shared_ptr<gpu_recording> rec;
  bool reused_next = false;
  if (next && next->pos == pos && next->mode == logits_mode && next->profiled == opt.profile &&
      next->profile_layers == opt.profile_layers && next->variant == variant_of(prefill, prev_owner)) {
    rec = std::move(next);
    reused_next = true;
  } else {
    rec = record(pos, logits_mode, prefill, prev_owner);
  }
  next.reset();
  dispatches = rec->dispatches;
  device_s = 0;
  record_s = rec->record_s;
  // The index-key owner after this step (the next decode step's prev_owner).
  int owner_after = last_owner;
  if (prefill) {
    if (pos + 1 == official_prefill.end) owner_after = dsv41_prefill_publisher(cf, official_prefill.end);
  } else if (const int pub = dsv41_decode_publisher(cf, pos); pub >= 0) {
    owner_after = pub;
  }
  if (experts->active()) {
    // In the cache's waits the next position is recorded a layer at a time (as below; not when tracing).
    record_task ahead;
    if (opt.pipeline && !trace && pos + 1 < opt.max_ctx) {
      const bool next_prefill = official_prefill.covers(pos + 1);
      ahead = record_steps(pos + 1, next_mode < 0 ? logits_mode : next_mode, next_prefill,
                           next_prefill ? -1 : owner_after);
    }
    host_s.prepare = since(t0);
    const auto tc = clock::now();
    next = run_cached_token(*experts, pre, *rec, std::move(ahead));
    host_s.wait = since(tc);  // the cache's whole token (its copies, waits and the recording ahead)
  } else {
    dev.submit_async(pre);
    dev.submit_async(rec->c);
    host_s.prepare = since(t0);
    // While the device runs this token, record the next position (not when tracing: per-token downloads). A
    // failure there only drops the speculative recording: this token is already submitted.
    const auto tr = clock::now();
    if (opt.pipeline && !trace && pos + 1 < opt.max_ctx) {
      const bool next_prefill = official_prefill.covers(pos + 1);
      try {
        next = record(pos + 1, next_mode < 0 ? logits_mode : next_mode, next_prefill, next_prefill ? -1 : owner_after);
      } catch (...) {
        next.reset();
      }
    }
    host_s.record_ahead = since(tr);
    const auto tw = clock::now();
    dev.wait(pre);
    dev.wait(rec->c);
    host_s.wait = since(tw);
  }
  guard.v = nullptr;  // the step ran: the id stays in the history
  if (reused_next) ++pipelined;
  device_s = rec->device_seconds();
  if (opt.profile) gpu_fold_profile(*rec, prof);
  if (trace) {
    trace->topk.resize(cf.layers);
    trace->experts.resize(cf.layers);
    trace->keys_from.resize(cf.layers);
    for (uint32_t l = 0; l < cf.layers; ++l) {
      const dsv41_gpu_layer& G = layers[l];
      trace->experts[l].push_back(gpu_sorted_ids(dev, G.route_idx, cf.top_k));
      if (rec->keys_from[l] >= 0) {
        trace->topk[l].push_back(gpu_sorted_ids(dev, view(G.idx, W * 4, uint64_t(cf.index_topk) * 4), cf.index_topk));
        trace->keys_from[l].push_back(rec->keys_from[l]);
      }
    }
  }
  last_owner = owner_after;
  ++pos;
}

// ------------------------------------------------------------------ public

dsv41_gpu_model::dsv41_gpu_model(const dsv41_weights& w, gpu::device& dev, gpu::kernels& k, const dsv41_gpu_options& o)
    : p_(std::make_unique<impl>(w, dev, k, o)) {}
dsv41_gpu_model::~dsv41_gpu_model() = default;
const dsv41_config& dsv41_gpu_model::config() const noexcept { return p_->cfg; }
uint64_t dsv41_gpu_model::pos() const noexcept { return p_->pos; }

void dsv41_gpu_model::reset() noexcept {
  p_->pos = 0;
  p_->next.reset();
  p_->cids.clear();
  p_->official_prefill = {};
  p_->last_owner = -1;
}

void dsv41_gpu_model::set_profile(bool on, std::vector<uint32_t> layers) {
  if (on && p_->experts->active()) throw usage_error("gpu model: profiling is not available with the expert cache");
  if (on && !p_->opt.profile) p_->prof = {};  // a new profile: not the steps of an earlier one (V4.1's prompt)
  p_->opt.profile = on;
  p_->opt.profile_layers = std::move(layers);
}

std::vector<uint32_t> dsv41_gpu_model::kind_layers() const {
  std::vector<uint32_t> out;
  uint32_t seen = 0;
  for (uint32_t l = 0; l < p_->cfg.layers; ++l) {
    const uint32_t bit = 1u << uint32_t(p_->cfg.plan[l].mode);
    if (!(seen & bit)) out.push_back(l), seen |= bit;
  }
  return out;
}

std::vector<const gpu::buffer*> dsv41_gpu_model::impl::state_buffers() {
  std::vector<const gpu::buffer*> out;
  for (dsv41_gpu_layer& G : layers)
    for (const gpu::buffer* b : {&G.ring, &G.pend_kv, &G.pend_sc, &G.entries, &G.keys})
      if (*b) out.push_back(b);
  return out;
}

void dsv41_gpu_model::save_snapshot() {
  impl& m = *p_;
  gpu_state_save(m.dev, m.state_buffers(), m.snap);
  m.snap_pos = m.pos, m.snap_cids = m.cids, m.snap_prefill = m.official_prefill, m.snap_owner = m.last_owner;
  m.has_snap = true;
}

void dsv41_gpu_model::restore_snapshot() {
  impl& m = *p_;
  m.next.reset();
  if (!m.has_snap) {
    reset();
    return;
  }
  gpu_state_restore(m.dev, m.state_buffers(), m.snap);
  m.pos = m.snap_pos, m.cids = m.snap_cids, m.official_prefill = m.snap_prefill, m.last_owner = m.snap_owner;
}

void dsv41_gpu_model::bench_seek(uint64_t pos) {
  impl& m = *p_;
  if (pos >= m.opt.max_ctx) throw usage_error("bench_seek: position beyond max_ctx");
  gpu_state_fill_random(m.dev, m.state_buffers(), pos);
  m.pos = pos;
  m.next.reset();
  m.official_prefill = {};
  m.last_owner = -1;
  if (!m.cfg.engram_layers.empty()) m.cids.assign(pos, uint32_t(m.engram.map.pad()));
}

void dsv41_gpu_model::impl::check_chunk(std::span<const uint32_t> ids) const {
  // The whole chunk is checked before any token runs (a refused chunk leaves the state as it was, as on the CPU).
  gpu_graph::check_ids(ids, cfg.vocab, pos, opt.max_ctx);
}

std::vector<float> dsv41_gpu_model::run(std::span<const uint32_t> ids, bool last, dsv41_trace* trace) {
  impl& m = *p_;
  if (ids.empty()) return {};
  m.check_chunk(ids);
  m.mark_call(ids.size());
  // The prefill rows in chunks (dsv41_gpu_chunk.cpp), the rest (decode steps under the stale-key rule) one by one.
  uint64_t pre = m.prefill_rows(ids.size());
  if (!m.chunks_ids(pre)) pre = 0;
  m.chunk_stats = {};  // this call's chunks (none where it runs token by token)
  if (pre > 0) m.run_chunks(ids.first(pre), last && pre == ids.size(), trace);
  if (pre < ids.size()) run_steps(m, ids.subspan(pre), last, trace);
  if (!last) return {};
  std::vector<float> out(m.cfg.vocab);
  m.dev.download(m.logits, out.data(), out.size() * 4);
  return out;
}

bool dsv41_gpu_model::mark_prefill(uint64_t end) noexcept {
  impl& m = *p_;
  return m.official_prefill.mark(m.pos, end);
}

uint64_t dsv41_gpu_model::prefill_end() const noexcept { return p_->official_prefill.end; }

uint64_t dsv41_gpu_model::reuse_limit(bool snapshot) const noexcept {
  const impl& m = *p_;
  if (!m.opt.stale_index_k) return no_reuse_limit;
  return snapshot ? (m.has_snap ? m.snap_prefill.end : 0) : m.official_prefill.end;
}

void dsv41_gpu_model::run_steps(impl& m, std::span<const uint32_t> ids, bool last, dsv41_trace* trace) {
  // The mode the next step will have (its recording is made ahead): the chunk's last token's, then the same.
  auto mode_at = [&](size_t i) { return last && i + 1 == ids.size() ? 1 : 0; };
  for (size_t i = 0; i < ids.size(); ++i)
    m.run(ids[i], mode_at(i), m.official_prefill.covers(m.pos), trace, i + 1 < ids.size() ? mode_at(i + 1) : -1);
}

std::vector<float> dsv41_gpu_model::forward_all(std::span<const uint32_t> ids) {
  impl& m = *p_;
  if (ids.empty()) return {};
  m.check_chunk(ids);
  m.mark_call(ids.size());
  std::vector<float> out(ids.size() * m.cfg.vocab);
  uint64_t pre = m.prefill_rows(ids.size());
  if (!m.chunks_ids(pre)) pre = 0;
  m.chunk_stats = {};  // this call's chunks (none where it runs token by token)
  if (pre > 0) {  // every row's logits of each chunk
    const uint32_t C = m.opt.prefill_chunk;
    for (size_t b = 0, e; b < pre; b = e) {
      e = chunk_end(pre, b, C, m.experts->active());
      const std::vector<float> l = m.chunk_rows(ids.subspan(b, e - b), nullptr);
      std::copy(l.begin(), l.end(), out.begin() + std::ptrdiff_t(b * m.cfg.vocab));
    }
  }
  for (size_t i = pre; i < ids.size(); ++i) {
    m.run(ids[i], 1, m.official_prefill.covers(m.pos), nullptr, i + 1 < ids.size() ? 1 : -1);
    m.dev.download(m.logits, out.data() + i * m.cfg.vocab, uint64_t(m.cfg.vocab) * 4);
  }
  return out;
}

std::vector<float> dsv41_gpu_model::impl::chunk_rows(std::span<const uint32_t> ids, dsv41_trace* trace) {
  gpu::buffer all = dev.alloc(std::max<uint64_t>(ids.size() * cfg.vocab * 4, 16));
  run_chunk(ids, false, &all, trace);
  std::vector<float> out(ids.size() * cfg.vocab);
  if (!out.empty()) dev.download(all, out.data(), out.size() * 4);
  return out;
}

std::vector<float> dsv41_gpu_model::forward_chunk_rows(std::span<const uint32_t> ids, dsv41_trace* trace) {
  impl& m = *p_;
  m.check_chunk(ids);
  m.mark_call(ids.size());
  if (!m.chunks_ids(ids.size()) || m.prefill_rows(ids.size()) < ids.size() || ids.size() > m.opt.prefill_chunk)
    throw usage_error("forward_chunk_rows: needs prefill chunks (2 to prefill_chunk ids, a prefill or stale_index_k "
                      "off)");
  m.chunk_stats = {};
  return m.chunk_rows(ids, trace);
}

uint32_t dsv41_gpu_model::step_greedy(uint32_t token) {
  impl& m = *p_;
  m.check_chunk(std::span<const uint32_t>(&token, 1));
  m.mark_call(1);
  m.run(token, 2, m.official_prefill.covers(m.pos), nullptr);
  return m.chosen_id();
}

void dsv41_gpu_model::impl::engram_rows(uint64_t t, float* out) const {
  const engram_config& ec = engram.cfg;
  std::vector<int64_t> rows(ec.cols());
  for (size_t e = 0; e < cfg.engram_layers.size(); ++e)
    dsv41_engram_token_rows(engram, e, *host_layers[cfg.engram_layers[e]], cids, t, rows, out + e * ec.embed_dim());
}

uint32_t dsv41_gpu_model::impl::chosen_id() {
  uint32_t id = 0;
  std::memcpy(&id, dev.mapped(best_host), 4);
  return id;
}

bool dsv41_gpu_model::samples_on_device() const noexcept { return p_->k.has_sample(); }
uint64_t dsv41_gpu_model::decode_sampled_each(uint32_t first, uint64_t max, const device_sampling& ds,
                                              const std::function<bool(uint32_t)>& on_token) {
  impl& m = *p_;
  if (!samples_on_device()) throw usage_error("gpu model: this device does not sample on the device (no f64 / int64)");
  const gpu_chooser::session session(m.chooser, m.next, m.dev, ds, m.cfg.vocab);
  if (chains_decode()) return m.decode_chained(first, max, on_token, m.chooser.mode(), ds.logprobs);
  // step by step (the prefill's last token, the expert cache, a profile): each choice read back from best_host
  return step_chosen_each(first, max, on_token, [&](uint32_t tok) {
    m.check_chunk(std::span<const uint32_t>(&tok, 1));
    m.mark_call(1);
    m.run(tok, m.chooser.mode(), m.official_prefill.covers(m.pos), nullptr);
    const uint32_t id = m.chosen_id();
    if (ds.logprobs) m.chooser.read(m.dev, 0, m.cfg.vocab, *ds.logprobs);
    return id;
  });
}

std::vector<float> dsv41_gpu_model::state_rows(uint32_t l, int what, uint64_t first, uint64_t count) const {
  const impl& m = *p_;
  const dsv41_gpu_layer& G = m.layers.at(l);
  const gpu::buffer& b = what == 0 ? G.ring : what == 1 ? G.entries : G.keys;
  const uint64_t width = what == 2 ? m.cfg.index_head_dim : m.cfg.head_dim;
  if (!b || (first + count) * width * 4 > b.size()) throw usage_error("state_rows: no such rows");
  std::vector<float> out(count * width);
  m.dev.download(view(b, first * width * 4, count * width * 4), out.data(), out.size() * 4);
  return out;
}

uint64_t dsv41_gpu_model::pipelined_steps() const noexcept { return p_->pipelined; }
uint64_t dsv41_gpu_model::weight_bytes() const noexcept { return p_->weight_bytes; }
uint64_t dsv41_gpu_model::state_bytes() const noexcept { return p_->state_bytes; }
uint64_t dsv41_gpu_model::bytes_per_token() const noexcept { return p_->token_bytes; }
uint32_t dsv41_gpu_model::last_dispatches() const noexcept { return p_->dispatches; }
double dsv41_gpu_model::last_record_seconds() const noexcept { return p_->record_s; }
double dsv41_gpu_model::last_device_seconds() const noexcept { return p_->device_s; }
gpu_graph::step_host_seconds dsv41_gpu_model::last_step_host() const noexcept { return p_->host_s; }
uint64_t dsv41_gpu_model::max_ctx() const noexcept { return p_->opt.max_ctx; }
const gpu_graph_profile& dsv41_gpu_model::profile() const noexcept { return p_->prof; }
const gpu_expert_cache_stats& dsv41_gpu_model::cache_stats() const noexcept { return p_->experts->stats(); }

}  // namespace cmfx::driver

// One token of the V4 graph recorded into one command buffer (dsv4-architecture.md §3; the CPU twin is
// dsv4_forward.cpp / dsv4_attention.cpp / dsv4_compressor.cpp). Everything that depends on the position only
// (window slots, closing compressor windows, the HCA entry list, the embedding row) is known when recording and
// travels inside the command buffer (commands::update); everything that depends on values stays on the device.
//
// Per layer: [projections of u, concurrent] → q norm [, iw scale] → wq_b, indexer q, KV norm + rope, compressor
// pooling (the scores' ape as read, the entry's rope as written) → [indexer q rope] → indexer score → top-k →
// sparse attention (q's head norm + rope as it stages q, the output's inverse rope as it writes) → wo_a groups
// (concurrent) → wo_b → hc_post
// (+ the FFN's mixes, hc_pre_finish and ffn_norm: one dispatch) → router → routing → experts (→ shared) → hc_post
// (+ the next layer's mixes, hc_pre_finish and attn_norm; after the last layer hc_head_finish and the final norm).
// Before layer 0: hc_mix + hc_pre_finish + attn_norm (one dispatch). Head: head matmul (→ device argmax).
// With dense_act = i8 (gpu_dense_i8.hpp) the dense products of an int8 format read int8 inputs: u quantised in a
// step before the projections (and before the head), qr by the q norm, o before the wo_a groups, z before wo_b.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/vk/device.hpp"
#include "chunk_experts.hpp"
#include "dsv4_gpu_internal.hpp"
#include "gpu_moe_step.hpp"
#include "gpu_recording.hpp"
#include "gpu_upload.hpp"

namespace cmfx::driver {

namespace {

using gpu::view;

view row(const gpu::buffer& b, uint64_t r, uint64_t floats) { return view(b, r * floats * 4, floats * 4); }

}  // namespace

std::shared_ptr<gpu_recording> dsv4_gpu_model::impl::record(uint64_t t, int logits_mode, bool fed, int ring_slot) {
  return record_steps(t, logits_mode, fed, ring_slot).finish();
}

record_task dsv4_gpu_model::impl::record_steps(uint64_t t, int logits_mode, bool fed, int ring_slot) {
  const dsv4_config& cf = cfg;
  const auto t_rec = std::chrono::steady_clock::now();
  const uint64_t d = cf.dim, hc = cf.hc, hd = cf.head_dim, rd = cf.rope_dim, W = cf.window, R = ring_rows;
  const uint32_t H = cf.heads, IH = cf.index_heads, IHD = cf.index_head_dim, E = cf.experts, K = cf.top_k;
  const float eps = float(cf.norm_eps);
  gpu::kernels::hc_shape sh;
  sh.hc = uint32_t(hc), sh.d = uint32_t(d), sh.norm_eps = eps, sh.hc_eps = float(cf.hc_eps), sh.iters = cf.hc_iters;
  const uint32_t mix_rows = uint32_t((2 + hc) * hc);
  // the dense products (int8 inputs where dense_act = i8 and the format has an int8 kernel: gpu_dense_i8.hpp)
  const gpu_dense_act da{k, opt.dense_act};

  // The recording starts with a full barrier: it may follow the previous token's recording and the token's own
  // parameter writes (run) in submission order without waiting on the host.
  auto rec = std::make_shared<gpu_recording>(dev.begin(), opt.profile, dev.info().timestamps);
  // With the expert cache the token is one command buffer per layer, cut after each layer's routing (run() makes
  // the selected experts resident in between); `cur` is the one being recorded.
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
  rec->variant = fed ? 1 : 0;
  cur->barrier();
  if (fed) {  // the token is the previous step's argmax: its embedding in every hc copy of X, and its id
    k.embed_rows(*cur, embed_dev, view(best, 0, 4), 1, uint32_t(hc), X);
    cur->copy(view(best, 0, 4), token, 4);
  }
  // ---- position parameters (inside the command buffer)
  {
    std::vector<int32_t> win(W, -1);
    for (uint64_t s = t + 1 > W ? t + 1 - W : 0; s <= t; ++s) win[s - (t + 1 > W ? t + 1 - W : 0)] = int32_t(s % R);
    cur->update(swa_idx, win.data(), W * 4);
    // A closing window of a compressor kind: its first row in the pending-window ring and, with overlap, the
    // previous window's (ring shape from the first layer that has that kind; upload_weights admits V4's two).
    bool written[2] = {false, false};
    for (const dsv4_gpu_layer& G : layers) {
      const dsv4_gpu_comp& g = G.comp;
      const int kind_i = g.ratio == 4 ? 0 : 1;
      if (!G.kind.ratio || written[kind_i] || (t + 1) % g.ratio != 0) continue;
      const uint64_t ws = t + 1 - g.ratio;
      const uint32_t w2[2] = {uint32_t(ws % g.cap),
                              g.overlap && ws >= g.ratio ? uint32_t((ws - g.ratio) % g.cap) : 0xFFFFFFFFu};
      cur->update(kind_i == 0 ? win4 : win128, w2, 8);
      written[kind_i] = true;
    }
    for (dsv4_gpu_layer& G : layers) {
      if (!G.kind.ratio) continue;
      std::vector<int32_t> ids(win.size());
      const int32_t off = int32_t(G.comp.max_entries);
      for (uint64_t i = 0; i < W; ++i) ids[i] = win[i] < 0 ? -1 : win[i] + off;
      // HCA: every finished entry. CSA with no more finished entries than index_topk: the indexer would pick them
      // all whatever their scores, so they are the picks (in entry order, the rest of the slots masked) and the
      // step records no index scores or top-k (`ix_scores` below).
      const uint64_t ne = (t + 1) / G.kind.ratio;
      if (!G.kind.indexer || ne <= cf.index_topk) {
        for (uint64_t j = 0; j < ne; ++j) ids.push_back(int32_t(j));
        if (G.kind.indexer) ids.resize(W + cf.index_topk, -1);
      }
      for (uint64_t o0 = 0; o0 < ids.size(); o0 += gpu::commands::update_max / 4) {
        const uint64_t n = std::min<uint64_t>(ids.size() - o0, gpu::commands::update_max / 4);
        cur->update(view(G.idx, o0 * 4, n * 4), ids.data() + o0, n * 4);
      }
    }
  }
  if (ts.on) ts.op_last = ts.last = cur->timestamp();

  // A sublayer boundary is one dispatch (kernels::hc_post_finish): hc_post (or the first hc_mix) with the next
  // site's mix, then — in its last workgroup — that site's hc_pre_finish and input norm (the Sinkhorn C apart).
  // q_w: where that site's first product of u reads int8 activations, the finish also writes u's copy for its
  // format (hc_finish_args::y_q8: no "u int8" step before the attention projections).
  // The attention sites' coefficients in coeff, the FFN sites' in coeff_f (coeff itself with fold_u_q8).
  const view c_att = coeff, c_ffn = opt.fold_u_q8 ? view(coeff) : view(coeff_f);
  auto pre_of = [&](const gpu::buffer& base, const gpu::buffer& scale, const gpu::buffer& norm_w,
                    const gpu::gpu_matrix* q_w = nullptr, view out = view()) {
    gpu::kernels::hc_finish_args f;
    f.base = base, f.scale = scale, f.sinkhorn = false, f.y = u, f.norm = norm_w;
    if (opt.fold_u_q8) da.finish_q8(f, q_w, q_u);
    else f.coeff_out = out;  // the other site's buffer (not the one this boundary's post reads)
    return f;
  };
  // The products of the attention site's u (its int8 copy once per format among them; the first format's written
  // by the boundary before the site): the indexer's query side only where it has to choose among the finished
  // entries (ix_scores below).
  auto u_users = [&](const dsv4_gpu_layer& N) {
    const bool ixs = N.kind.indexer && (t + 1) / N.kind.ratio > cf.index_topk;
    return std::array<const gpu::gpu_matrix*, 7>{
        &N.wq_a, &N.wkv, N.kind.ratio ? &N.comp.wkv : nullptr, N.kind.ratio ? &N.comp.wgate : nullptr,
        N.kind.indexer ? &N.ix.wkv : nullptr, N.kind.indexer ? &N.ix.wgate : nullptr, ixs ? &N.ix_wp : nullptr};
  };
  k.hc_post_finish(*cur, sh, view(), X, c_att, 1, view(), layers.at(0).hc_attn_fn, mix_rows, partials,
                   pre_of(layers[0].hc_attn_base, layers[0].hc_attn_scale, layers[0].attn_norm,
                          da.first(u_users(layers[0]))));
  ts.op("hc_mix + hc_pre_finish + attn_norm");
  ts.mark(&dsv4_gpu_profile::hc);
  for (uint32_t l = 0; l < cf.layers; ++l) {
    dsv4_gpu_layer& G = layers[l];
    const dsv4_layer_kind& kind = G.kind;
    ts.detail = std::find(opt.profile_layers.begin(), opt.profile_layers.end(), l) != opt.profile_layers.end();
    if (ts.detail) {
      char name[32];
      std::snprintf(name, sizeof name, "L%u %s ", l, kind.ratio == 0 ? "swa" : kind.indexer ? "csa" : "hca");
      ts.prefix = name;
    }
    const gpu::buffer& cs_tab = kind.ratio ? cs_comp : cs_swa;
    const view cs_t = row(cs_tab, t, rd);
    const uint64_t slot = t % R;
    const view kv_row = row(G.ring, slot, hd);
    // ---- attention sublayer (its hc_pre_finish + attn_norm ran with the previous boundary); the Sinkhorn C (first
    // read by hc_post) runs apart, next to the projections
    const bool closes = kind.ratio && (t + 1) % kind.ratio == 0;
    const uint64_t cslot = kind.ratio ? t % G.comp.cap : 0;
    // the indexer's query side (iw, iq, scores, top-k) only where it has to choose among the finished entries
    const bool ix_scores = kind.indexer && (t + 1) / kind.ratio > cf.index_topk;
    // With int8 inputs, u's copy is a step of its own before the projections (the Sinkhorn stays beside them) — or,
    // with fold_u_q8, for the first int8 format among its products written by the boundary before (hc_finish_args::
    // y_q8, read back from y; the 32-lane quantiser there cost the boundary 8.6 µs, s162, a per-block one staged in
    // shared memory 3 µs, s188; the readback is not timed yet), another format's copy in the step.
    const auto uu = u_users(G);
    cur->begin_concurrent();
    if (da.quantize(*cur, uu, u, q_u, opt.fold_u_q8 ? da.first(uu) : nullptr)) {
      cur->end_concurrent();
      ts.op("u int8");
      cur->begin_concurrent();
    }
    k.hc_sinkhorn(*cur, sh, partials, G.hc_attn_base, G.hc_attn_scale, 1, c_att);
    da.matvec(*cur, G.wq_a, u, q_u, qr);
    da.matvec(*cur, G.wkv, u, q_u, kv_row);
    if (kind.ratio) {
      da.matvec(*cur, G.comp.wkv, u, q_u, row(G.comp.kv, cslot, G.comp.cw));
      da.matvec(*cur, G.comp.wgate, u, q_u, row(G.comp.score, cslot, G.comp.cw));
    }
    if (kind.indexer) {
      da.matvec(*cur, G.ix.wkv, u, q_u, row(G.ix.kv, cslot, G.ix.cw));
      da.matvec(*cur, G.ix.wgate, u, q_u, row(G.ix.score, cslot, G.ix.cw));
      if (ix_scores) da.matvec(*cur, G.ix_wp, u, q_u, iw);
    }
    cur->end_concurrent();
    ts.op("projections of u (concurrent)");
    // q's RMSNorm (the KV latent's runs with its rope beside wq_b; the compressors' scores stay without their ape:
    // the pooling adds it as it reads them). Folding q's norm into wq_b's workgroups (each summing x² itself, the
    // rows reading x · g) measured slower than this step on the H200: docs/PERF.md "Twenty-seventh session".
    // With int8 inputs for wq_b the norm writes qr's int8 copy too (kernels::rmsnorm_q8: no step of its own).
    const std::initializer_list<const gpu::gpu_matrix*> qr_users = {&G.wq_b, ix_scores ? &G.ix_wq_b : nullptr};
    const gpu::gpu_matrix* qr_q8 = da.first(qr_users);
    cur->begin_concurrent();
    if (qr_q8)
      k.rmsnorm_q8(*cur, qr, G.q_norm, qr, 1, cf.q_lora, eps, qr_q8->fmt, q_qr.at(qr_q8->fmt));
    else
      k.rmsnorm(*cur, qr, G.q_norm, qr, 1, cf.q_lora, eps);
    if (ix_scores) k.scale(*cur, iw, IH, float(1.0 / std::sqrt(double(IHD)) / std::sqrt(double(IH))));
    cur->end_concurrent();
    ts.op("q norm, iw scale (concurrent)");
    cur->begin_concurrent();
    const bool qr_second = da.quantize(*cur, qr_users, qr, q_qr, qr_q8);  // a second int8 format among them
    cur->end_concurrent();
    if (qr_second) ts.op("qr int8, a second format");
    ts.mark(&dsv4_gpu_profile::attn_proj);
    // Compressor pooling of a closing window (entry j = (t+1)/r − 1): the scores' ape added as it reads them, the
    // entry's rope (at the window's first position) in its write.
    const uint64_t ne = kind.ratio ? (t + 1) / kind.ratio : 0;
    auto pool = [&](dsv4_gpu_comp& g) {
      gpu::kernels::pool_shape ps;
      ps.entries = 1, ps.ratio = g.ratio, ps.width = g.width, ps.row_floats = g.cw, ps.overlap = g.overlap, ps.eps = eps;
      ps.rope_dim = uint32_t(rd);
      if (ne > g.max_entries) throw std::logic_error("gpu model: compressed entries beyond max_ctx");
      k.compress_pool(*cur, ps, g.kv, g.score, g.ratio == 4 ? win4 : win128, g.norm, row(g.entries, ne - 1, g.width),
                      row(cs_comp, t + 1 - kind.ratio, rd), g.ape);
    };
    cur->begin_concurrent();
    da.matvec(*cur, G.wq_b, qr, q_qr, q);
    if (ix_scores) da.matvec(*cur, G.ix_wq_b, qr, q_qr, iq);
    k.rmsnorm_rope(*cur, kv_row, G.kv_norm, kv_row, 1, uint32_t(hd), eps, cs_t, 1, uint32_t(rd));
    if (closes) {
      pool(G.comp);
      if (kind.indexer) pool(G.ix);
    }
    cur->end_concurrent();
    ts.op("wq_b, ix_wq_b, kv norm + rope, pool (concurrent)");
    // q's per-head norm and rope run in the attention's workgroups (attn_shape::q_norm_rope); without a per-head
    // norm q's rope, and the indexer's q rope, are a step of their own.
    if (!cf.per_head_q_norm || ix_scores) {
      cur->begin_concurrent();
      if (!cf.per_head_q_norm) k.rope(*cur, q, cs_t, 1, H, uint32_t(hd), uint32_t(rd), false);
      if (ix_scores) k.rope(*cur, iq, cs_t, 1, IH, IHD, uint32_t(rd), false);
      cur->end_concurrent();
      ts.op("q rope, indexer q rope (concurrent)");
    }
    ts.mark(&dsv4_gpu_profile::compress);
    // Indexer: scores of the finished entries, top-k into the compressed part of the key list (else every
    // finished entry is a pick: written with the position parameters above).
    if (ix_scores) {
      gpu::kernels::index_shape is;
      is.rows = 1, is.heads = IH, is.head_dim = IHD, is.n = uint32_t(ne);
      k.index_score(*cur, is, iq, G.ix.entries, iw, view(), score);
      ts.op("index_score");
      k.topk(*cur, score, 1, uint32_t(ne), cf.index_topk, view(G.idx, W * 4, uint64_t(cf.index_topk) * 4), true);
      ts.op("topk");
      ts.mark(&dsv4_gpu_profile::index);
    }
    // Sparse attention with sink over [window | compressed], the inverse rope of the output's tail in its write;
    // with fold_o_q8 (int8 inputs for wo_a) the combine also writes o's int8 copy by group (no "o int8" step where
    // it splits).
    const auto o_q8 = opt.fold_o_q8 ? da.attn_q8(G.wo_a, q_o) : std::nullopt;
    bool o_q8_done = false;
    gpu::kernels::attn_shape as;
    as.rows = 1, as.heads = H, as.head_dim = uint32_t(hd), as.scale = float(1.0 / std::sqrt(double(hd)));
    as.inv_rope_dim = uint32_t(rd);
    as.q_norm_rope = cf.per_head_q_norm, as.q_norm_eps = eps;
    if (kind.ratio) {
      as.keys = uint32_t(W + (kind.indexer ? cf.index_topk : ne));
      as.kv_a_rows = uint32_t(G.comp.max_entries), as.kv_b_rows = uint32_t(R);
      o_q8_done = k.sparse_attention(*cur, as, q, G.comp.entries, G.ring, G.idx, G.sink, o, attn_x, cs_t,
                                     o_q8 ? &*o_q8 : nullptr);
    } else {
      as.keys = uint32_t(W), as.kv_a_rows = uint32_t(R), as.kv_b_rows = 0;
      o_q8_done = k.sparse_attention(*cur, as, q, G.ring, view(), swa_idx, G.sink, o, attn_x, cs_t, o_q8 ? &*o_q8 : nullptr);
    }
    ts.op("sparse_attention + o inverse rope");
    ts.mark(&dsv4_gpu_profile::attn_core);
    // Grouped output projection: z_g = wo_a[g] · o_g, then wo_b · z.
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
    k.hc_post_finish(*cur, sh, attn_out, X, c_att, 1, Xn, G.hc_ffn_fn, mix_rows, partials,
                     pre_of(G.hc_ffn_base, G.hc_ffn_scale, G.ffn_norm, nullptr, c_ffn));
    ts.op("hc_post + mix + hc_pre_finish + ffn_norm");
    std::swap(X, Xn);
    ts.mark(&dsv4_gpu_profile::attn_out);
    // ---- MoE sublayer
    gpu_moe_sublayer_io io;
    io.sh = sh, io.partials = partials, io.coeff = c_ffn, io.u = u, io.q_u = &q_u;
    io.rlogits = rlogits, io.moe_h = moe_h, io.moe_out = moe_out, io.sh_g = sh_g, io.sh_u = sh_u, io.sh_out = sh_out;
    io.rc.top_k = K, io.rc.route_scale = float(cf.route_scale);
    io.experts = E, io.limit = float(cf.swiglu_limit), io.inter = cf.moe_inter, io.act = opt.expert_act;
    io.fuse_route = opt.fuse_route;
    if (kind.hash) io.tid2eid = view(G.tid2eid), io.token = view(token), io.vocab = cf.vocab;
    const view moe_add = record_moe_sublayer(k, da, cur, ts, G, l, io, *experts, segmented, cut);
    const bool last = l + 1 == cf.layers;
    if (!last) {
      const dsv4_gpu_layer& N = layers[l + 1];
      k.hc_post_finish(*cur, sh, moe_out, X, c_ffn, 1, Xn, N.hc_attn_fn, mix_rows, partials,
                       pre_of(N.hc_attn_base, N.hc_attn_scale, N.attn_norm, da.first(u_users(N)), c_att), moe_add);
      ts.op("hc_post + mix + hc_pre_finish + attn_norm");
    } else if (logits_mode) {  // + hc_head_finish and the final norm
      gpu::kernels::hc_finish_args f;
      f.base = hc_head_base, f.head = true, f.head_scale = hc_head_scale, f.y = u, f.norm = norm;
      if (opt.fold_u_q8) da.finish_q8(f, &head, q_u);  // the head's u int8 (no step of its own)
      k.hc_post_finish(*cur, sh, moe_out, X, c_ffn, 1, Xn, hc_head_fn, uint32_t(hc), partials, f, moe_add);
      ts.op("hc_post + hc_head_finish + norm");
    } else {
      k.hc_post(*cur, sh, moe_out, X, c_ffn, 1, Xn, view(), 0, view(), moe_add);
      ts.op("hc_post");
    }
    std::swap(X, Xn);
    ts.mark(&dsv4_gpu_profile::hc);
    co_yield 0;  // a layer recorded (record_task)
  }
  if (logits_mode) {
    if (!opt.fold_u_q8 && da.quantize(*cur, {&head}, u, q_u)) ts.op("u int8 (head)");  // (else the boundary's)
    da.matvec(*cur, head, u, q_u, logits);
    if (logits_mode == 2) k.topk(*cur, logits, 1, cf.vocab, 1, best);
    if (logits_mode == 3) chooser.record_draw(k, *cur, logits, cf.vocab, best);
    if (logits_mode >= 2)
      cur->copy(view(best, 0, 4), ring_slot >= 0 ? view(ids_ring, uint64_t(ring_slot) * 4, 4) : view(best_host, 0, 4), 4);
    if (logits_mode >= 2) chooser.record_logprobs(k, *cur, logits, cf.vocab, best, uint32_t(std::max(ring_slot, 0)));
    ts.mark(&dsv4_gpu_profile::head);
  }
  rec->close();
  rec->dispatches = rec->c.dispatch_count();
  for (const gpu::commands& sc : rec->segs) rec->dispatches += sc.dispatch_count();
  rec->record_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_rec).count();
  co_return rec;
}

void dsv4_gpu_model::impl::record_token(gpu::commands& pre, uint32_t tok) {
  const uint64_t d = cfg.dim, hc = cfg.hc;
  pre.barrier();
  std::vector<float> x(d);
  visit_format(embed.fmt, [&]<class F>() { F::decode_row(embed.v, tok, x.data()); });
  for (uint64_t j = 0; j < hc; ++j) pre.update(view(X, j * d * 4, d * 4), x.data(), d * 4);
  pre.update(token, &tok, 4);
}

uint64_t dsv4_gpu_model::impl::decode_chained(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token,
                                             int logits_mode, step_logprobs* lp) {
  if (max == 0) return 0;
  if (first >= cfg.vocab) throw usage_error("gpu model: token id " + std::to_string(first) + " >= vocab " + std::to_string(cfg.vocab));
  if (pos + max > opt.max_ctx)
    throw usage_error("gpu model: positions " + std::to_string(pos) + ".." + std::to_string(pos + max - 1) +
                      " reach beyond the device context of " + std::to_string(opt.max_ctx) + " positions (--ctx)");
  next.reset();
  const uint8_t* ring = dev.mapped(ids_ring);
  // Step i + 1 is recorded and submitted while the device runs step i, so the queue never waits for the host;
  // the host reads step i's id from the ring after it ran (two steps in flight at most: the ring has 4 slots).
  gpu::commands pre = dev.begin();
  record_token(pre, first);
  std::vector<std::pair<std::shared_ptr<gpu_recording>, uint64_t>> flight;  // (recording, step)
  uint64_t disp = 0, recorded = 0, delivered = 0;
  double rec_s = 0, dev_s = 0;
  bool stop = false, pre_done = false;
  const uint64_t p0 = pos;
  auto finish = [&](gpu_recording& r, uint64_t i) {
    if (!pre_done) dev.wait(pre), pre_done = true;
    dev.wait(r.c);
    if (stop) return;  // run ahead of a stop: dropped
    dev_s += r.device_seconds();
    uint32_t id = 0;
    std::memcpy(&id, ring + (i % ring_slots) * 4, 4);
    if (lp) chooser.read(dev, uint32_t(i % ring_slots), cfg.vocab, *lp);
    ++delivered;
    pos = p0 + delivered;
    if (!on_token(id)) stop = true;
  };
  try {
    for (uint64_t i = 0; i < max && !stop; ++i) {
      auto r = record(p0 + i, logits_mode, i > 0, int(i % ring_slots));
      disp += r->dispatches, rec_s += r->record_s, ++recorded;
      if (i == 0) dev.submit_async(pre);
      dev.submit_async(r->c);
      flight.emplace_back(std::move(r), i);
      if (flight.size() == 2) {
        finish(*flight[0].first, flight[0].second);
        flight.erase(flight.begin());
      }
    }
    for (auto& [r, i] : flight) finish(*r, i);
  } catch (...) {
    for (auto& f : flight) dev.wait(f.first->c);
    if (!pre_done) dev.wait(pre);
    pos = p0 + delivered;
    throw;
  }
  pos = p0 + delivered;
  dispatches = uint32_t(disp / recorded), record_s = rec_s / double(recorded);
  device_s = delivered ? dev_s / double(delivered) : 0.0;
  return delivered;
}

void dsv4_gpu_model::impl::run(uint32_t tok, int logits_mode, dsv4_trace* trace) {
  const dsv4_config& cf = cfg;
  if (tok >= cf.vocab) throw usage_error("gpu model: token id " + std::to_string(tok) + " >= vocab " + std::to_string(cf.vocab));
  if (pos >= opt.max_ctx)
    throw usage_error("gpu model: position " + std::to_string(pos) + " reaches the device context of " +
                      std::to_string(opt.max_ctx) + " positions (--ctx)");
  const uint64_t W = cf.window;
  const uint32_t K = cf.top_k;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto since = [](clock::time_point a) { return std::chrono::duration<double>(clock::now() - a).count(); };
  host_s = {};
  gpu::commands pre = dev.begin();
  record_token(pre, tok);
  std::shared_ptr<gpu_recording> rec;
  if (next && next->pos == pos && next->mode == logits_mode && next->variant == 0 && next->profiled == opt.profile &&
      next->profile_layers == opt.profile_layers) {
    rec = std::move(next);
    ++pipelined;
  } else {
    rec = record(pos, logits_mode);
  }
  next.reset();
  dispatches = rec->dispatches;
  device_s = 0;
  record_s = rec->record_s;
  if (experts->active()) {
    // Makes each layer's experts resident after its routing; in its waits, the next position is recorded a layer
    // at a time (decode; not when tracing). A failure there only drops the speculative recording.
    record_task ahead;
    if (opt.pipeline && !trace && pos + 1 < opt.max_ctx) ahead = record_steps(pos + 1, logits_mode);
    host_s.prepare = since(t0);
    const auto tc = clock::now();
    next = run_cached_token(*experts, pre, *rec, std::move(ahead));
    host_s.wait = since(tc);  // the cache's whole token (its copies, waits and the recording ahead)
  } else {
    dev.submit_async(pre);
    dev.submit_async(rec->c);
    host_s.prepare = since(t0);
    // While the device runs this token, record the next position (decode); not when tracing (per-token downloads).
    const auto tr = clock::now();
    if (opt.pipeline && !trace && pos + 1 < opt.max_ctx) next = record(pos + 1, logits_mode);
    host_s.record_ahead = since(tr);
    const auto tw = clock::now();
    dev.wait(pre);
    dev.wait(rec->c);
    host_s.wait = since(tw);
  }
  device_s = rec->device_seconds();
  if (opt.profile) gpu_fold_profile(*rec, prof);
  if (trace) {
    trace->topk.resize(cf.layers);
    trace->experts.resize(cf.layers);
    for (uint32_t l = 0; l < cf.layers; ++l) {
      const dsv4_gpu_layer& G = layers[l];
      trace->experts[l].push_back(gpu_sorted_ids(dev, G.route_idx, K));
      if (G.kind.indexer)
        trace->topk[l].push_back(gpu_sorted_ids(dev, view(G.idx, W * 4, uint64_t(cf.index_topk) * 4), cf.index_topk));
    }
  }
  ++pos;
}

// ------------------------------------------------------------------ public

dsv4_gpu_model::dsv4_gpu_model(const dsv4_weights& w, gpu::device& dev, gpu::kernels& k, const dsv4_gpu_options& o)
    : p_(std::make_unique<impl>(w, dev, k, o)) {}
dsv4_gpu_model::~dsv4_gpu_model() = default;
const dsv4_config& dsv4_gpu_model::config() const noexcept { return p_->cfg; }
uint64_t dsv4_gpu_model::pos() const noexcept { return p_->pos; }
void dsv4_gpu_model::reset() noexcept {
  p_->pos = 0;
  p_->next.reset();
}
void dsv4_gpu_model::set_profile(bool on, std::vector<uint32_t> layers) {
  if (on && p_->experts->active()) throw usage_error("gpu model: profiling is not available with the expert cache");
  if (on && !p_->opt.profile) p_->prof = {};  // a new profile: not the steps of an earlier one (V4.1's prompt)
  p_->opt.profile = on;
  p_->opt.profile_layers = std::move(layers);
}

std::vector<const gpu::buffer*> dsv4_gpu_model::impl::state_buffers() {
  std::vector<const gpu::buffer*> out;
  for (dsv4_gpu_layer& G : layers)
    for (const gpu::buffer* b : {&G.ring, &G.comp.kv, &G.comp.score, &G.comp.entries, &G.ix.kv, &G.ix.score,
                                 &G.ix.entries})
      if (*b) out.push_back(b);
  return out;
}

void dsv4_gpu_model::save_snapshot() {
  impl& m = *p_;
  gpu_state_save(m.dev, m.state_buffers(), m.snap);
  m.snap_pos = m.pos;
  m.has_snap = true;
}

void dsv4_gpu_model::restore_snapshot() {
  impl& m = *p_;
  m.next.reset();
  if (!m.has_snap) {
    m.pos = 0;
    return;
  }
  gpu_state_restore(m.dev, m.state_buffers(), m.snap);
  m.pos = m.snap_pos;
}

void dsv4_gpu_model::bench_seek(uint64_t pos) {
  impl& m = *p_;
  if (pos >= m.opt.max_ctx) throw usage_error("bench_seek: position beyond max_ctx");
  gpu_state_fill_random(m.dev, m.state_buffers(), pos);
  m.pos = pos;
  m.next.reset();
}
uint64_t dsv4_gpu_model::weight_bytes() const noexcept { return p_->weight_bytes; }
uint64_t dsv4_gpu_model::state_bytes() const noexcept { return p_->state_bytes; }
uint64_t dsv4_gpu_model::bytes_per_token() const noexcept { return p_->token_bytes; }
uint32_t dsv4_gpu_model::last_dispatches() const noexcept { return p_->dispatches; }
uint64_t dsv4_gpu_model::pipelined_steps() const noexcept { return p_->pipelined; }
double dsv4_gpu_model::last_record_seconds() const noexcept { return p_->record_s; }
double dsv4_gpu_model::last_device_seconds() const noexcept { return p_->device_s; }
gpu_graph::step_host_seconds dsv4_gpu_model::last_step_host() const noexcept { return p_->host_s; }
const dsv4_gpu_profile& dsv4_gpu_model::profile() const noexcept { return p_->prof; }
const dsv4_gpu_cache_stats& dsv4_gpu_model::cache_stats() const noexcept { return p_->experts->stats(); }

std::vector<float> dsv4_gpu_model::step(uint32_t token, bool want_logits, dsv4_trace* trace) {
  p_->run(token, want_logits ? 1 : 0, trace);
  if (!want_logits) return {};
  std::vector<float> out(p_->cfg.vocab);
  p_->dev.download(p_->logits, out.data(), out.size() * 4);
  return out;
}

std::vector<float> dsv4_gpu_model::forward(std::span<const uint32_t> ids, bool last) {
  impl& m = *p_;
  m.check_ids(ids);  // the whole input before any position runs
  if (ids.size() < 2 || !m.chunkable()) {
    m.chunk_stats = {};  // last_prefill(): no chunks in this call
    std::vector<float> logits;
    for (size_t i = 0; i < ids.size(); ++i) logits = step(ids[i], last && i + 1 == ids.size());
    return logits;
  }
  m.prefill(ids, last);
  if (!last) return {};
  std::vector<float> out(m.cfg.vocab);
  m.dev.download(m.logits, out.data(), out.size() * 4);
  return out;
}

std::vector<float> dsv4_gpu_model::forward_all(std::span<const uint32_t> ids) {
  impl& m = *p_;
  m.check_ids(ids);
  m.chunk_stats = {};  // last_prefill(): this call's chunks
  if (!m.chunkable() || (m.experts->active() && ids.size() < 2)) return gpu_graph::forward_all(ids);
  std::vector<float> out;
  out.reserve(ids.size() * m.cfg.vocab);
  m.chunk_stats = {};
  for (size_t b = 0, e; b < ids.size(); b = e) {
    e = chunk_end(ids.size(), b, m.opt.prefill_chunk, m.experts->active());
    const std::vector<float> l = forward_chunk_rows(ids.subspan(b, e - b));
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

std::vector<float> dsv4_gpu_model::forward_chunk_rows(std::span<const uint32_t> ids, dsv4_trace* trace) {
  impl& m = *p_;
  if (!m.chunkable() || ids.size() > m.opt.prefill_chunk || (m.experts->active() && ids.size() == 1))
    throw usage_error("forward_chunk_rows: needs prefill chunks (at most prefill_chunk ids, two or more under the expert "
                      "cache, V4 layer kinds)");
  const uint64_t n = ids.size(), V = m.cfg.vocab;
  gpu::buffer all = m.dev.alloc(std::max<uint64_t>(n * V * 4, 16));
  m.run_chunk(ids, false, &all, trace);
  std::vector<float> out(n * V);
  if (n) m.dev.download(all, out.data(), out.size() * 4);
  return out;
}

std::vector<uint32_t> dsv4_gpu_model::kind_layers() const {
  std::vector<uint32_t> out;
  const dsv4_config& cf = p_->cfg;
  for (uint32_t l = 0, seen = 0; l < cf.layers; ++l) {
    const uint32_t bit = cf.kinds[l].ratio == 0 ? 1 : cf.kinds[l].indexer ? 2 : 4;
    if (!(seen & bit)) out.push_back(l), seen |= bit;
  }
  return out;
}

bool dsv4_gpu_model::chains_decode() const noexcept { return chaining() && p_->embed_dev.data && !p_->opt.profile; }
uint64_t dsv4_gpu_model::max_ctx() const noexcept { return p_->opt.max_ctx; }
uint64_t dsv4_gpu_model::decode_greedy_each(uint32_t first, uint64_t max, const std::function<bool(uint32_t)>& on_token) {
  if (!chains_decode()) return gpu_graph::decode_greedy_each(first, max, on_token);
  return p_->decode_chained(first, max, on_token);
}

bool dsv4_gpu_model::samples_on_device() const noexcept { return p_->k.has_sample(); }
uint64_t dsv4_gpu_model::decode_sampled_each(uint32_t first, uint64_t max, const device_sampling& ds,
                                             const std::function<bool(uint32_t)>& on_token) {
  impl& m = *p_;
  if (!samples_on_device()) throw usage_error("gpu model: this device does not sample on the device (no f64 / int64)");
  const gpu_chooser::session session(m.chooser, m.next, m.dev, ds, m.cfg.vocab);
  if (chains_decode()) return m.decode_chained(first, max, on_token, m.chooser.mode(), ds.logprobs);
  // step by step (the expert cache's steps): each choice read back as a step_greedy's argmax
  return step_chosen_each(first, max, on_token, [&](uint32_t tok) {
    m.run(tok, m.chooser.mode(), nullptr);
    const uint32_t id = m.chosen_id();
    if (ds.logprobs) m.chooser.read(m.dev, 0, m.cfg.vocab, *ds.logprobs);
    return id;
  });
}

uint32_t dsv4_gpu_model::step_greedy(uint32_t token) {
  p_->run(token, 2, nullptr);
  return p_->chosen_id();
}

uint32_t dsv4_gpu_model::impl::chosen_id() {
  uint32_t id = 0;
  std::memcpy(&id, dev.mapped(best_host), 4);
  return id;
}

}  // namespace cmfx::driver

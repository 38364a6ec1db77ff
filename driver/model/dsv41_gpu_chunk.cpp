// A prefill chunk of the V4.1 graph: T consecutive positions recorded as one command buffer, every op batched over
// the T rows (dsv4-architecture.md §4; the CPU twin is dsv41_forward.cpp / dsv41_attention.cpp over a chunk of
// tokens, the V4 twin dsv4_gpu_chunk.cpp). Weights are read once per chunk (tiled GEMMs for the dense products, the
// expert-grouped kernels::moe for the experts) instead of once per token.
//
// What makes a chunk equal to T single steps (dsv41_gpu.cpp's record_steps):
// - the window KV of the W positions before the chunk is staged from the ring into kvs, the chunk's own rows after
//   it, and every row's window slots point into kvs; the ring gets the last W rows back after the attention (a
//   ratio-2 KV source's open group likewise: pend_kv / pend_sc → cps / css and back), so decode keeps its rings;
// - the groups closing inside the chunk are pooled together, their index keys projected from the pre-rope latents,
//   then entries and keys roped at their groups' positions j·r (cs_ent);
// - an index source scores the keys finished at the chunk's end, each row its own count (−inf past it), the
//   candidate pool's block maxima per row with the row's newest block pinned (block_max / mask_scores lens), and
//   pick_keys drops from each row's top-k the entries not finished at its position; each index source keeps its
//   rows' key lists (idx[l]) for the reuse layers after it;
// - every row scores its layer's static key source (keys_from): chunks_ids allows only prefills or stale_index_k
//   off, where dsv41_keys_layer is that for every token.
// Per-chunk parameters (token ids, window slots, counts, Engram rows) are uploaded before the recording runs.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/vk/device.hpp"
#include "chunk_experts.hpp"
#include "dsv41_gpu_internal.hpp"
#include "gpu_upload.hpp"

namespace cmfx::driver {

namespace {

using gpu::view;
using fq = gpu::kernels::fq_format;

view rows(const gpu::buffer& b, uint64_t r0, uint64_t n, uint64_t floats) {
  return view(b, r0 * floats * 4, n * floats * 4);
}

}  // namespace

bool dsv41_gpu_model::impl::chunks_ids(uint64_t n) const {
  if (opt.prefill_chunk < 2 || n < 2 || chunks_off || (experts->active() && opt.prefill_chunk < 3)) return false;
  // a layer confined to the candidate pool reads the pool's block maxima per row: the same entry count per row
  for (const dsv41_layer_plan& P : cfg.plan)
    if (P.uses_candidates && cfg.plan.at(size_t(cfg.candidate_source)).ratio != P.ratio) return false;
  return !opt.stale_index_k || official_prefill.covers(pos);
}

uint64_t dsv41_gpu_model::impl::prefill_rows(uint64_t n) const {
  if (!opt.stale_index_k) return n;
  return official_prefill.call_rows(pos, n);
}

void dsv41_gpu_model::impl::alloc_chunk() {
  const dsv41_config& c = cfg;
  const uint64_t C = opt.prefill_chunk, d = c.dim, hd = c.head_dim, W = c.window, f = 4, TK = c.index_topk;
  auto cb = std::make_unique<dsv41_gpu_chunk_bufs>();
  cb->C = uint32_t(C);
  chunk_in = std::make_unique<chunk_inputs>(dev);
  auto buf = [&](uint64_t bytes) {
    gpu::buffer b = dev.alloc(std::max<uint64_t>(bytes, 16));
    state_bytes += b.size();  // part of the model's device bytes
    cb->bytes += b.size();
    return b;
  };
  gpu::kernels::hc_shape sh;
  sh.hc = c.hc, sh.d = c.dim;
  const uint64_t hcd = uint64_t(c.hc) * d, mix_rows = uint64_t(2 + c.hc) * c.hc;
  const uint64_t cst = gpu::kernels::hc_coeff_floats(c.hc);
  cb->X = buf(C * hcd * f), cb->Xn = buf(C * hcd * f);
  cb->partials = buf(k.hc_partials_bytes(sh, uint32_t(C), uint32_t(mix_rows)));
  cb->coeff_a = buf(C * cst * f), cb->coeff_f = buf(C * cst * f);
  {  // the one-hot pre-mix before layer 0, one row per position
    std::vector<float> one(C * c.hc, 0.0f);
    for (uint64_t t = 0; t < C; ++t) one[t * c.hc] = 1.0f;
    cb->fold0 = buf(one.size() * f);
    dev.upload(cb->fold0, one);
  }
  cb->u = buf(C * d * f), cb->attn_out = buf(C * d * f), cb->moe_out = buf(C * d * f), cb->sh_out = buf(C * d * f);
  cb->qr = buf(C * c.q_lora * f);
  cb->q = buf(C * c.heads * hd * f), cb->o = buf(C * c.heads * hd * f);
  cb->z = buf(C * c.o_groups * c.o_lora * f);
  cb->kvs = buf((W + C) * hd * f);
  uint32_t rmax = 1;
  for (const dsv41_layer_plan& P : c.plan)
    if (P.mode == dsv41_mode::full) rmax = std::max(rmax, P.ratio);
  cb->cps = buf((rmax + C) * hd * f), cb->css = buf((rmax + C) * hd * f);
  cb->iq = buf(C * c.index_heads * c.index_head_dim * f), cb->iw = buf(C * c.index_heads * f);
  cb->score = buf(C * ent_cap * f);
  cb->picks = buf(C * TK * 4);
  const uint64_t bs = std::max<uint32_t>(c.candidate_block_size, 1);
  cb->cand_blk = buf(C * ((ent_cap + bs - 1) / bs) * f);
  cb->cand_idx = buf(C * c.candidate_topk_blocks * 4);
  cb->rlogits = buf(C * c.experts * f);
  cb->ridx = buf(C * c.top_k * 4), cb->rw = buf(C * c.top_k * 4);
  uint64_t moe_floats = 0;
  for (const dsv41_gpu_layer& G : layers)
    moe_floats = std::max(moe_floats, gpu::kernels::moe_scratch_floats(G.moe, uint32_t(C), c.top_k));
  cb->moe_h = buf(moe_floats * f);
  cb->sh_g = buf(C * c.moe_inter * f), cb->sh_u = buf(C * c.moe_inter * f);
  cb->eg_kv = buf(c.engram_layers.empty() ? 0 : C * (c.hc + 1) * d * f);
  {  // split scratch of every row count a chunk can have
    gpu::kernels::attn_shape as;
    as.heads = c.heads, as.head_dim = uint32_t(hd);
    uint64_t mx = 0;
    for (uint32_t r = 1; r <= C; ++r) as.rows = r, mx = std::max(mx, gpu::kernels::attn_scratch_floats(as));
    cb->attn_x = buf(mx * f);
  }
  cb->tokens = buf(C * 4);
  cb->idx_swa = buf(C * W * 4), cb->idx_win = buf(C * (W + TK) * 4);
  cb->idx.resize(c.layers), cb->counts.resize(rmax + 1), cb->win.resize(rmax + 1);
  for (uint32_t l = 0; l < c.layers; ++l) {
    const dsv41_layer_plan& P = c.plan[l];
    if (P.mode != dsv41_mode::full && P.mode != dsv41_mode::reindex) continue;
    cb->idx[l] = buf(C * (W + TK) * 4);
    if (P.ratio >= cb->counts.size()) cb->counts.resize(P.ratio + 1);
    if (!cb->counts[P.ratio]) cb->counts[P.ratio] = buf(C * 4);
    if (P.mode == dsv41_mode::full && P.ratio > 1 && !cb->win[P.ratio]) cb->win[P.ratio] = buf((C / P.ratio + 2) * 8);
  }
  for (size_t e = 0; e < c.engram_layers.size(); ++e) cb->eg_E.push_back(buf(C * engram.cfg.embed_dim() * f));
  ch = std::move(cb);
}

void dsv41_gpu_model::impl::run_chunk(std::span<const uint32_t> toks, bool want_logits, gpu::buffer* all_logits,
                                      dsv41_trace* trace) {
  const dsv41_config& cf = cfg;
  const uint32_t T = uint32_t(toks.size());
  if (T == 0) return;
  if (!ch) alloc_chunk();
  dsv41_gpu_chunk_bufs& B = *ch;
  chunk_inputs& in = *chunk_in;
  // the expert cache cuts the recording at each layer's routing (chunk_experts.hpp): waited for, untimed
  const bool cached = experts->active();
  const bool overlap = opt.pipeline && !all_logits && !trace && !opt.profile && !cached;
  if (cached && T < 2) throw std::logic_error("gpu model: a chunk of one row under the expert cache (chunk_end)");
  if (T > B.C) throw std::logic_error("gpu model: chunk longer than prefill_chunk");
  gpu_graph::check_ids(toks, cf.vocab, pos, opt.max_ctx);
  next.reset();
  const gpu::gemm_precision_scope gemm_mode(k, opt.gemm);  // pipelines are picked as the chunk is recorded
  const uint64_t P = pos, d = cf.dim, hc = cf.hc, hd = cf.head_dim, rd = cf.rope_dim, W = cf.window;
  const uint32_t H = cf.heads, IH = cf.index_heads, IHD = cf.index_head_dim, E = cf.experts, K = cf.top_k,
                 TK = cf.index_topk;
  const float eps = float(cf.norm_eps);
  gpu::kernels::hc_shape sh;
  sh.hc = uint32_t(hc), sh.d = uint32_t(d), sh.norm_eps = eps, sh.hc_eps = float(cf.hc_eps), sh.iters = cf.hc_iters;
  const uint32_t mix_rows = uint32_t((2 + hc) * hc), cst = gpu::kernels::hc_coeff_floats(uint32_t(hc));
  const uint64_t ed = engram.cfg.embed_dim(), LW = W + TK;

  // ---- per-chunk parameters: staged in upload memory, copied by the recording (chunk_pipeline.hpp)
  using clk = std::chrono::steady_clock;
  const auto t_prep = clk::now();
  // The chunk's ids join the Engram history (they leave again if anything below fails).
  struct cid_guard {
    std::vector<uint32_t>* v = nullptr;
    size_t n = 0;
    ~cid_guard() {
      if (v) v->resize(n);
    }
  } guard;
  if (!cf.engram_layers.empty()) {
    guard.v = &cids, guard.n = cids.size();
    for (uint32_t tok : toks) cids.push_back(uint32_t(engram.map(tok)));
  }
  const bool embed_on_device = static_cast<bool>(embed_dev.data);  // else the rows are decoded here and uploaded
  {
    in.begin();
    std::memcpy(in.stage(view(B.tokens, 0, T * 4), T * 4), toks.data(), T * 4);
    if (!embed_on_device) in.put(rows(B.X, 0, T, hc * d), embed_rows_host(embed, toks, hc, d));
    if (!cf.engram_layers.empty()) {  // every row's table rows, per Engram layer, gathered by the host's threads
      const size_t ne = cf.engram_layers.size();
      std::vector<float*> all(ne);
      for (size_t e = 0; e < ne; ++e) all[e] = in.stage_as<float>(rows(B.eg_E[e], 0, T, ed), T * ed);
      std::exception_ptr err;
      std::mutex err_mu;
      experts->host_pool(opt.copy_threads).run(T, [&](uint64_t b, uint64_t en, unsigned) {
        try {
          std::vector<float> one(eg_floats);
          for (uint64_t t = b; t < en; ++t) {
            engram_rows(P + t, one.data());
            for (size_t e = 0; e < ne; ++e) std::memcpy(all[e] + t * ed, one.data() + e * ed, ed * 4);
          }
        } catch (...) {
          const std::lock_guard<std::mutex> lk(err_mu);
          if (!err) err = std::current_exception();
        }
      });
      if (err) std::rethrow_exception(err);
    }
    // window slots: position s at staged row s − P + W of kvs (after ent_cap in the lists of the ratio layers)
    std::vector<int32_t> iswa(uint64_t(T) * W, -1), iwin(uint64_t(T) * LW, -1);
    for (uint32_t t = 0; t < T; ++t) {
      const uint64_t p = P + t, s0 = p + 1 > W ? p + 1 - W : 0;
      for (uint64_t s = s0; s <= p; ++s) {
        iswa[t * W + (s - s0)] = int32_t(s - P + W);
        iwin[t * LW + (s - s0)] = int32_t(s - P + W + ent_cap);
      }
    }
    in.put(view(B.idx_swa, 0, iswa.size() * 4), iswa);
    in.put(view(B.idx_win, 0, iwin.size() * 4), iwin);
    for (uint32_t r = 1; r < B.counts.size(); ++r) {
      if (!B.counts[r]) continue;
      std::vector<uint32_t> cnt(T);
      for (uint32_t t = 0; t < T; ++t) cnt[t] = uint32_t((P + t + 1) / r);
      in.put(view(B.counts[r], 0, T * 4), cnt);
    }
    // closing groups per ratio: their first row in cps / css (position s at row s − (P − P % r))
    for (uint32_t r = 2; r < B.win.size(); ++r) {
      if (!B.win[r]) continue;
      std::vector<uint32_t> w2;
      for (uint64_t j = P / r; j < (P + T) / r; ++j)
        w2.push_back(uint32_t(j * r - (P - P % r))), w2.push_back(0xFFFFFFFFu);
      in.put(view(B.win[r], 0, w2.size() * 4), w2);
    }
  }

  // ---- the recording
  const auto t_rec = clk::now();
  chunk_stats.prep_s += std::chrono::duration<double>(t_rec - t_prep).count();
  chunk_pass_guard passes(cached ? experts.get() : nullptr);
  uint32_t cut_dispatches = 0;  // of the parts submitted at the expert cache's cuts
  gpu::commands c = dev.begin();
  const bool timed = dev.info().timestamps && !cached;
  const uint32_t t_first = timed ? c.timestamp() : 0;
  // profiling: a timestamp after each op group, summed per name after the run
  gpu_chunk_profile::marks marks(c, opt.profile, opt.profile ? (timed ? t_first : c.timestamp()) : 0);
  c.barrier();
  in.record(c);
  if (embed_on_device) {  // the chunk's rows, hc copies each, gathered from the device's embedding
    k.embed_rows(c, embed_dev, view(B.tokens, 0, T * 4), T, uint32_t(hc), rows(B.X, 0, T, hc * d));
    c.barrier();
  }
  marks.stamp("embedding");
  // tracing: each layer's routed experts [T, K] and (index sources) key lists [T, W + TK], read after the run
  gpu::buffer tr_experts, tr_keys;
  if (trace) {
    tr_experts = dev.alloc(uint64_t(cf.layers) * T * K * 4);
    tr_keys = dev.alloc(std::max<uint64_t>(uint64_t(cf.layers) * T * LW * 4, 16));
  }
  // T rows of a ring of `cap` rows for positions a .. a + n − 1 (slot s % cap) to / from staged rows (≤ 2 copies)
  auto ring_copy = [&](const gpu::buffer& ring, uint64_t cap, uint64_t a, uint64_t n, const gpu::buffer& st,
                       uint64_t st_row, bool to_ring) {
    for (uint64_t i = 0; i < n;) {
      const uint64_t slot = (a + i) % cap, m = std::min(n - i, cap - slot);
      const view rv = rows(ring, slot, m, hd), sv = rows(st, st_row + i, m, hd);
      to_ring ? c.copy(sv, rv, m * hd * 4) : c.copy(rv, sv, m * hd * 4);
      i += m;
    }
  };
  for (uint32_t l = 0; l < cf.layers; ++l)  // each index source's lists: the window slots, no picks yet
    if (B.idx[l]) c.copy(view(B.idx_win, 0, T * LW * 4), view(B.idx[l], 0, T * LW * 4), T * LW * 4);
  const view cs_swa_t = rows(cs_swa, P, T, rd), cs_comp_t = rows(cs_comp, P, T, rd);
  gpu::buffer* Xc = &B.X;
  gpu::buffer* Xcn = &B.Xn;
  const view kv_own = rows(B.kvs, W, T, hd);  // the chunk's window KV rows
  for (uint32_t l = 0; l < cf.layers; ++l) {
    dsv41_gpu_layer& G = layers[l];
    const dsv41_layer_plan& Pl = cf.plan[l];
    const uint32_t r = Pl.ratio;
    const bool full = Pl.mode == dsv41_mode::full, ixs = full || Pl.mode == dsv41_mode::reindex;
    const view cs_t = r ? cs_comp_t : cs_swa_t;
    // ---- Engram (before the attention's mix)
    if (Pl.engram >= 0) {
      const engram_config& ec = engram.cfg;
      const view kv = rows(B.eg_kv, 0, T, (hc + 1) * d);
      k.matmul(c, G.eg_wkv, rows(B.eg_E.at(size_t(Pl.engram)), 0, T, ed), T, kv);
      k.engram_gate_add(c, rows(*Xc, 0, T, hc * d), kv, G.eg_qk, T, uint32_t(hc), uint32_t(d), ec.eps, ec.gate_clamp);
      marks.stamp("engram");
    }
    // ---- attention site: the mix of X unless the previous boundary wrote it, the collapse with the previous FFN's
    // pre (one-hot before layer 0), the new coefficients into coeff_a
    if (Pl.engram >= 0 || l == 0) k.hc_mix(c, sh, *Xc, G.hc_attn_fn, mix_rows, T, B.partials);
    k.hc_pre_finish_fold(c, sh, B.partials, *Xc, G.hc_attn_base, G.hc_attn_scale, T, B.coeff_a,
                         l ? B.coeff_f : B.fold0, l ? cst : uint32_t(hc), B.u, G.attn_norm);
    marks.stamp("mhc");
    // the staged rows before the chunk's own: the window KV, and a ratio-2 source's open group
    const uint64_t w0 = P > W ? P - W : 0;
    ring_copy(G.ring, W, w0, P - w0, B.kvs, w0 + W - P, false);
    const uint64_t pr = full && r > 1 ? P % r : 0;
    if (pr) {
      c.copy(rows(G.pend_kv, 0, pr, hd), rows(B.cps, 0, pr, hd), pr * hd * 4);
      c.copy(rows(G.pend_sc, 0, pr, hd), rows(B.css, 0, pr, hd), pr * hd * 4);
    }
    const uint64_t ne0 = full ? P / r : 0, ne1 = full ? (P + T) / r : 0, m = ne1 - ne0;  // groups closing here
    c.begin_concurrent();
    k.matmul(c, G.wq_a, B.u, T, B.qr);
    k.matmul(c, G.wkv, B.u, T, kv_own);
    if (full && r > 1) {
      k.matmul(c, G.comp_wkv, B.u, T, rows(B.cps, pr, T, hd));
      k.matmul(c, G.comp_wgate, B.u, T, rows(B.css, pr, T, hd));
    } else if (full) {
      k.matmul(c, G.comp_wkv, B.u, T, rows(G.entries, P, T, hd));  // ratio 1: every position closes its group
    }
    if (ixs) k.matmul(c, G.ix_wp, B.u, T, B.iw);
    c.end_concurrent();
    marks.stamp("ring staging, projections of u");
    const view ent = m ? rows(G.entries, ne0, m, hd) : view(), key = m ? rows(G.keys, ne0, m, IHD) : view();
    c.begin_concurrent();
    k.rmsnorm(c, B.qr, G.q_norm, B.qr, T, cf.q_lora, eps);
    k.rmsnorm_rope(c, kv_own, G.kv_norm, kv_own, T, uint32_t(hd), eps, cs_t, 1, uint32_t(rd));
    if (ixs) k.scale(c, B.iw, uint64_t(T) * IH, float(1.0 / std::sqrt(double(IHD)) / std::sqrt(double(IH))));
    if (full && r == 1) k.rmsnorm(c, ent, G.comp_norm, ent, T, uint32_t(hd), eps);
    c.end_concurrent();
    c.begin_concurrent();
    k.matmul(c, G.wq_b, B.qr, T, B.q);
    if (ixs) k.matmul(c, G.ix_wq_b, B.qr, T, B.iq);
    if (opt.qat_kv) k.fake_quant(c, kv_own, T, uint32_t(hd), dsv41_act_block, fq::e4m3);
    if (full && r > 1 && m) {
      gpu::kernels::pool_shape ps;
      ps.entries = uint32_t(m), ps.ratio = r, ps.width = uint32_t(hd), ps.row_floats = uint32_t(hd), ps.overlap = false;
      ps.eps = eps;
      k.compress_pool(c, ps, B.cps, B.css, B.win.at(r), G.comp_norm, ent);
    }
    c.end_concurrent();
    marks.stamp("norms, wq_b, ix_wq_b, kv FP8, pool");
    // q's and iq's ropes; the closing groups' index keys from their pre-rope latents, then both roped at the groups'
    // positions j·r and quantised as the decode does
    const view cs_e = r == 1 ? rows(cs_comp, ne0, m, rd) : r ? rows(cs_ent.at(r), ne0, m, rd) : view();
    c.begin_concurrent();
    k.rope(c, B.q, cs_t, T, H, uint32_t(hd), uint32_t(rd), false);
    if (ixs) k.rope(c, B.iq, cs_t, T, IH, IHD, uint32_t(rd), false);
    if (m) k.matmul(c, G.ix_wk, ent, uint32_t(m), key);
    c.end_concurrent();
    c.begin_concurrent();
    if (ixs && opt.qat_kv) k.fake_quant(c, B.iq, T, IH * IHD, dsv41_index_fp4_block, fq::e2m1);
    if (m) {
      k.rmsnorm(c, key, G.ix_k_norm, key, uint32_t(m), IHD, eps);
      k.rope(c, ent, cs_e, uint32_t(m), 1, uint32_t(hd), uint32_t(rd), false);
    }
    c.end_concurrent();
    if (m) {
      c.begin_concurrent();
      k.rope(c, key, cs_e, uint32_t(m), 1, IHD, uint32_t(rd), false);
      if (opt.qat_kv) k.fake_quant(c, ent, uint32_t(m), uint32_t(hd), dsv41_kv_fp4_block, fq::e2m1_e4m3);
      c.end_concurrent();
      if (opt.qat_kv) k.fake_quant(c, key, uint32_t(m), IHD, dsv41_index_fp4_block, fq::e2m1);
    }
    marks.stamp("ropes, index keys, quantisation");
    // ---- indexer: the static key source's keys finished at the chunk's end, each row its own count
    if (ixs) {
      const uint64_t n1 = (P + T) / r;
      const view cnt(B.counts.at(r), 0, T * 4), lst(B.idx[l], 0, T * LW * 4);
      if (n1 > 0) {
        gpu::kernels::index_shape is;
        is.rows = T, is.heads = IH, is.head_dim = IHD, is.n = uint32_t(n1);
        k.index_score(c, is, B.iq, layers.at(size_t(Pl.keys_from)).keys, B.iw, cnt, B.score);
        const uint32_t bs = cf.candidate_block_size;
        if (Pl.candidate_source) {  // the pool for the later index layers; its own top-k is not confined
          k.block_max(c, B.score, T, uint32_t(n1), bs, B.cand_blk, cnt);
          k.topk(c, B.cand_blk, T, uint32_t((n1 + bs - 1) / bs), cf.candidate_topk_blocks, B.cand_idx, true);
        }
        if (Pl.uses_candidates)
          k.mask_scores(c, B.score, T, uint32_t(n1), bs, B.cand_blk, B.cand_idx, cf.candidate_topk_blocks, cnt);
        k.topk(c, B.score, T, uint32_t(n1), TK, B.picks, true);  // the set matters, not its order
        k.pick_keys(c, B.picks, cnt, T, TK, lst, uint32_t(LW), uint32_t(W));
      }
      marks.stamp("index_score, candidates, topk");
      if (trace) c.copy(lst, view(tr_keys, uint64_t(l) * T * LW * 4, T * LW * 4), T * LW * 4);
    }
    // ---- sparse attention with sink over each row's [KV source's picked entries | window], the inverse rope of
    // the output's tail in its write
    gpu::kernels::attn_shape as;
    as.rows = T, as.heads = H, as.head_dim = uint32_t(hd), as.scale = float(1.0 / std::sqrt(double(hd)));
    as.inv_rope_dim = uint32_t(rd);
    if (r) {
      as.keys = uint32_t(LW), as.kv_a_rows = uint32_t(ent_cap), as.kv_b_rows = uint32_t(W + B.C);
      k.sparse_attention(c, as, B.q, layers.at(size_t(Pl.kv_from)).entries, B.kvs,
                         view(B.idx.at(size_t(Pl.topk_from)), 0, T * LW * 4), G.sink, B.o, B.attn_x, cs_t);
    } else {
      as.keys = uint32_t(W), as.kv_a_rows = uint32_t(W + B.C), as.kv_b_rows = 0;
      k.sparse_attention(c, as, B.q, B.kvs, view(), view(B.idx_swa, 0, T * W * 4), G.sink, B.o, B.attn_x, cs_t);
    }
    marks.stamp("sparse_attention");
    // the ring's last W positions and the open group's rows back for the decode
    const uint64_t b0 = std::max(P, P + T > W ? P + T - W : 0);
    ring_copy(G.ring, W, b0, P + T - b0, B.kvs, b0 + W - P, true);
    if (full && r > 1 && (P + T) % r) {
      const uint64_t open = (P + T) % r, s0 = P + T - open - (P - pr);
      c.copy(rows(B.cps, s0, open, hd), rows(G.pend_kv, 0, open, hd), open * hd * 4);
      c.copy(rows(B.css, s0, open, hd), rows(G.pend_sc, 0, open, hd), open * hd * 4);
    }
    // grouped output projection over the chunk: z[t, g] = wo_a[g] · o[t, g], then wo_b · z
    const uint64_t Gs = cf.o_groups, ol = cf.o_lora, gcols = uint64_t(H) * hd / Gs;
    c.begin_concurrent();
    for (uint64_t g = 0; g < Gs; ++g)
      k.matmul_rows(c, G.wo_a, g * ol, (g + 1) * ol, view(B.o, g * gcols * 4, (uint64_t(T - 1) * H * hd + gcols) * 4),
                    T, uint64_t(H) * hd, view(B.z, g * ol * 4, (uint64_t(T - 1) * Gs * ol + ol) * 4), Gs * ol);
    c.end_concurrent();
    marks.stamp("ring write-back, wo_a groups");
    k.matmul(c, G.wo_b, B.z, T, B.attn_out);
    marks.stamp("wo_b");
    // ---- FFN site: hc_post with the FFN's mix, the collapse with the attention's pre, coefficients into coeff_f
    k.hc_post(c, sh, B.attn_out, *Xc, B.coeff_a, T, *Xcn, G.hc_ffn_fn, mix_rows, B.partials);
    std::swap(Xc, Xcn);
    k.hc_pre_finish_fold(c, sh, B.partials, *Xc, G.hc_ffn_base, G.hc_ffn_scale, T, B.coeff_f, B.coeff_a, cst, B.u,
                         G.ffn_norm);
    marks.stamp("mhc");
    route_config rc;
    rc.top_k = K, rc.route_scale = float(cf.route_scale);
    rc.norm_eps = float(dsv41_route_norm_eps), rc.temp = float(cf.gate_temp);
    c.begin_concurrent();
    k.matmul(c, G.gate, B.u, T, B.rlogits, act_precision::f32, prefill_router_min_groups);
    const bool sh_apart = G.shared_apart || G.shared_apart_chunks;
    if (sh_apart) {
      k.matmul(c, G.sh_gate, B.u, T, B.sh_g);
      k.matmul(c, G.sh_up, B.u, T, B.sh_u);
    }
    c.end_concurrent();
    marks.stamp("router (+ shared gate/up)");
    k.route_score(c, B.rlogits, G.gate_bias, T, E, rc, view(), B.ridx, B.rw);
    marks.stamp("routing");
    if (trace)
      c.copy(view(B.ridx, 0, uint64_t(T) * K * 4), view(tr_experts, uint64_t(l) * T * K * 4, uint64_t(T) * K * 4),
             uint64_t(T) * K * 4);
    {
      const gpu::routed_only_scope routed(G.moe, G.shared_apart_chunks);
      record_chunk_experts(k, dev, c, *experts, l, G.moe, B.u, T, B.ridx, B.rw, K, float(cf.swiglu_limit), B.moe_h,
                           B.moe_out, prefill_expert_act(opt.prefill_experts, opt.expert_act, G.moe.gate_up.w.fmt),
                           cut_dispatches);
    }
    if (sh_apart) {
      k.swiglu_clamp(c, B.sh_g, B.sh_u, B.sh_g, uint64_t(T) * cf.moe_inter, float(cf.swiglu_limit));
      k.matmul(c, G.sh_down, B.sh_g, T, B.sh_out);
      k.add(c, B.sh_out, B.moe_out, uint64_t(T) * d);
    }
    marks.stamp("moe (grouped) + shared");
    // the next attention's mix comes with this hc_post unless an Engram add changes X first
    const bool mix = l + 1 < cf.layers && cf.plan[l + 1].engram < 0;
    k.hc_post(c, sh, B.moe_out, *Xc, B.coeff_f, T, *Xcn, mix ? view(layers[l + 1].hc_attn_fn) : view(),
              mix ? mix_rows : 0, mix ? view(B.partials) : view());
    std::swap(Xc, Xcn);
    marks.stamp("mhc");
  }
  if (all_logits) {  // the last FFN's pre + the final norm, then the head
    k.hc_fold(c, sh, *Xc, B.coeff_f, cst, T, B.u, norm);
    k.matmul(c, head, B.u, T, *all_logits);
  } else if (want_logits) {
    const view u_last = rows(B.u, T - 1, 1, d);
    k.hc_fold(c, sh, rows(*Xc, T - 1, 1, hc * d), rows(B.coeff_f, T - 1, 1, cst), cst, 1, u_last, norm);
    k.matmul(c, head, u_last, 1, logits);
  }
  marks.stamp("head");
  dispatches = cut_dispatches + c.dispatch_count();
  const uint32_t t_last = timed ? c.timestamp() : 0;
  chunk_stats.record_s += std::chrono::duration<double>(clk::now() - t_rec).count();
  chunk_flight.run(dev, c, overlap, timed, t_first, t_last, chunk_stats);
  if (cached) experts->finish_passes();
  passes.release();
  if (!overlap) chunk_prof.fold(marks, T);
  guard.v = nullptr;  // the chunk is submitted: its ids stay in the history
  // the index-key owner after these positions (the next decode step's prev_owner), as run() keeps it per step
  for (uint64_t p = P; p < P + T; ++p) {
    if (official_prefill.covers(p)) {
      if (p + 1 == official_prefill.end) last_owner = dsv41_prefill_publisher(cf, official_prefill.end);
    } else if (const int pub = dsv41_decode_publisher(cf, p); pub >= 0) {
      last_owner = pub;
    }
  }
  pos += T;
  ++chunk_stats.chunks;
  chunk_stats.dispatches += dispatches;
  if (trace) {  // as run() traces a step: sorted ids, −1 dropped; picks and key layers only for index sources
    std::vector<uint32_t> ex(uint64_t(cf.layers) * T * K), keys(uint64_t(cf.layers) * T * LW);
    dev.download(tr_experts, ex.data(), ex.size() * 4);
    dev.download(view(tr_keys, 0, keys.size() * 4), keys.data(), keys.size() * 4);
    trace->topk.resize(cf.layers);
    trace->experts.resize(cf.layers);
    trace->keys_from.resize(cf.layers);
    for (uint32_t t = 0; t < T; ++t)
      for (uint32_t l = 0; l < cf.layers; ++l) {
        trace->experts[l].push_back(sorted_ids(ex.data() + (uint64_t(l) * T + t) * K, K));
        if (B.idx[l]) {
          trace->topk[l].push_back(sorted_ids(keys.data() + (uint64_t(l) * T + t) * LW + W, TK));
          trace->keys_from[l].push_back(cf.plan[l].keys_from);
        }
      }
  }
}

void dsv41_gpu_model::impl::run_chunks(std::span<const uint32_t> ids, bool want_logits, dsv41_trace* trace) {
  const uint32_t C = opt.prefill_chunk;
  try {
    for (size_t b = 0, e; b < ids.size(); b = e) {
      e = chunk_end(ids.size(), b, C, experts->active());
      run_chunk(ids.subspan(b, e - b), want_logits && e == ids.size(), nullptr, trace);
    }
    chunk_flight.finish(dev, chunk_stats);
  } catch (...) {
    chunk_flight.drain(dev);  // the chunks before the failing one ran (as when each was waited for)
    throw;
  }
}

bool dsv41_gpu_model::prefill_chunked() const {
  return p_->opt.prefill_chunk > 1 && !p_->chunks_off && (!p_->experts->active() || p_->opt.prefill_chunk >= 3);
}

gpu_prefill_stats dsv41_gpu_model::last_prefill() const { return p_->chunk_stats; }

std::string dsv41_gpu_model::prefill_profile() const { return p_->chunk_prof.text(); }

}  // namespace cmfx::driver

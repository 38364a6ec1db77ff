// A prefill chunk of the V4 graph: T consecutive positions recorded as one command buffer, every op batched over
// the T rows (dsv4-architecture.md §3; the CPU twin is dsv4_forward.cpp's token loop). Weights are read once per
// chunk (GEMM tiles of 8 rows for the dense projections, kernels::moe's expert-grouped path for the experts)
// instead of once per token, and the ~1900 dependent dispatches of a step are paid once per chunk.
//
// What makes a chunk equal to T single steps:
// - the window ring holds W + C rows (C = dsv4_gpu_options::prefill_chunk) and the compressor rings a multiple of
//   the ratio ≥ C + 2·ratio, so a chunk's rows never overwrite a row one of its positions still reads;
// - each row's key list is its own (window slots of its position, the HCA entries finished at its position), and
//   the indexer's top-k over the entries finished at the chunk's end drops, per row, the entries not yet finished
//   at that row's position (index_score counts, kernels::pick_keys);
// - the entries closing inside the chunk are pooled together, each roped at its window's first position (the
//   per-ratio entry rope tables).
// Per-chunk parameters (token ids, key lists, window rows) are uploaded before the recording runs; the rows'
// embeddings are gathered on the device (kernels::embed_rows) where it holds the embedding, else decoded here.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/vk/device.hpp"
#include "chunk_experts.hpp"
#include "dsv4_gpu_internal.hpp"
#include "gpu_upload.hpp"

namespace cmfx::driver {

namespace {

using gpu::view;


view rows(const gpu::buffer& b, uint64_t r0, uint64_t n, uint64_t floats) {
  return view(b, r0 * floats * 4, n * floats * 4);
}

}  // namespace

void dsv4_gpu_model::impl::alloc_chunk() {
  const dsv4_config& c = cfg;
  const uint64_t C = opt.prefill_chunk, d = c.dim, hd = c.head_dim, W = c.window, f = 4;
  auto cb = std::make_unique<dsv4_gpu_chunk_bufs>();
  cb->C = uint32_t(C);
  chunk_in = std::make_unique<chunk_inputs>(dev);
  auto buf = [&](uint64_t bytes) {
    gpu::buffer b = dev.alloc(std::max<uint64_t>(bytes, 16));
    state_bytes += b.size();  // part of the model's device bytes (and of a --vram-budget)
    cb->bytes += b.size();
    return b;
  };
  gpu::kernels::hc_shape sh;
  sh.hc = c.hc, sh.d = c.dim;
  const uint64_t hcd = uint64_t(c.hc) * d, mix_rows = uint64_t(2 + c.hc) * c.hc;
  cb->X = buf(C * hcd * f), cb->Xn = buf(C * hcd * f);
  cb->partials = buf(k.hc_partials_bytes(sh, uint32_t(C), uint32_t(mix_rows)));
  cb->coeff = buf(C * gpu::kernels::hc_coeff_floats(c.hc) * f);
  cb->u = buf(C * d * f), cb->attn_out = buf(C * d * f), cb->moe_out = buf(C * d * f), cb->sh_out = buf(C * d * f);
  cb->qr = buf(C * c.q_lora * f);
  cb->q = buf(C * c.heads * hd * f), cb->o = buf(C * c.heads * hd * f);
  cb->z = buf(C * c.o_groups * c.o_lora * f);
  cb->kvc = buf(C * hd * f);
  uint64_t cw = 1, icw = 1, ne4 = 1, ne128 = 1;
  for (const dsv4_gpu_layer& G : layers) {
    if (G.kind.ratio) {
      cw = std::max<uint64_t>(cw, G.comp.cw);
      (G.comp.ratio == 4 ? ne4 : ne128) = std::max<uint64_t>(G.comp.ratio == 4 ? ne4 : ne128, G.comp.max_entries);
    }
    if (G.kind.indexer) icw = std::max<uint64_t>(icw, G.ix.cw), ne4 = std::max<uint64_t>(ne4, G.ix.max_entries);
  }
  cb->ckv = buf(C * cw * f), cb->csc = buf(C * cw * f), cb->ikv = buf(C * icw * f), cb->isc = buf(C * icw * f);
  cb->iq = buf(C * c.index_heads * c.index_head_dim * f), cb->iw = buf(C * c.index_heads * f);
  cb->score = buf(C * ne4 * f);
  cb->picks = buf(C * c.index_topk * f);
  cb->rlogits = buf(C * c.experts * f);
  cb->ridx = buf(C * c.top_k * f), cb->rw = buf(C * c.top_k * f);
  uint64_t moe_floats = 0;
  for (const dsv4_gpu_layer& G : layers)
    moe_floats = std::max(moe_floats, gpu::kernels::moe_scratch_floats(G.moe, uint32_t(C), c.top_k));
  cb->moe_h = buf(moe_floats * f);
  cb->sh_g = buf(C * c.moe_inter * f), cb->sh_u = buf(C * c.moe_inter * f);
  {  // split scratch of every row count a chunk can have
    gpu::kernels::attn_shape as;
    as.heads = c.heads, as.head_dim = uint32_t(hd);
    uint64_t mx = 0;
    for (uint32_t r = 1; r <= C; ++r) as.rows = r, mx = std::max(mx, gpu::kernels::attn_scratch_floats(as));
    cb->attn_x = buf(mx * f);
  }
  cb->tokens = buf(C * 4), cb->counts = buf(C * 4);
  cb->idx_swa = buf(C * W * 4);
  cb->idx_csa = buf(C * (W + c.index_topk) * 4);
  cb->hca_keys_cap = W + std::max<uint64_t>(opt.max_ctx / 128, 1);  // the HCA lists are built whatever the kinds
  cb->idx_hca = buf(C * cb->hca_keys_cap * 4);
  cb->win4 = buf((C / 4 + 2) * 8), cb->win128 = buf((C / 128 + 2) * 8);
  ch = std::move(cb);
}

void dsv4_gpu_model::impl::run_chunk(std::span<const uint32_t> toks, bool want_logits, gpu::buffer* all_logits,
                                     dsv4_trace* trace) {
  const dsv4_config& cf = cfg;
  const uint32_t T = uint32_t(toks.size());
  if (T == 0) return;
  if (!ch) alloc_chunk();
  dsv4_gpu_chunk_bufs& B = *ch;
  chunk_inputs& in = *chunk_in;
  // the expert cache cuts the recording at each layer's routing (chunk_experts.hpp): waited for, untimed
  const bool cached = experts->active();
  const bool overlap = opt.pipeline && !all_logits && !trace && !opt.profile && !cached;
  if (cached && T < 2) throw std::logic_error("gpu model: a chunk of one row under the expert cache (chunk_end)");
  if (T > B.C) throw std::logic_error("gpu model: chunk longer than prefill_chunk");
  gpu_graph::check_ids(toks, cf.vocab, pos, opt.max_ctx);
  next.reset();
  const gpu::gemm_precision_scope gemm_mode(k, opt.gemm);  // pipelines are picked as the chunk is recorded
  const uint64_t P = pos, d = cf.dim, hc = cf.hc, hd = cf.head_dim, rd = cf.rope_dim, W = cf.window, R = ring_rows;
  const uint32_t H = cf.heads, IH = cf.index_heads, IHD = cf.index_head_dim, E = cf.experts, K = cf.top_k,
                 TK = cf.index_topk;
  const float eps = float(cf.norm_eps);
  gpu::kernels::hc_shape sh;
  sh.hc = uint32_t(hc), sh.d = uint32_t(d), sh.norm_eps = eps, sh.hc_eps = float(cf.hc_eps), sh.iters = cf.hc_iters;
  const uint32_t mix_rows = uint32_t((2 + hc) * hc);

  // ---- per-chunk parameters: staged in upload memory, copied by the recording (chunk_pipeline.hpp)
  uint32_t off4 = 0, off128 = 0, cap4 = 0, cap128 = 0;  // entry offsets in the key lists, ring rows per ratio
  for (const dsv4_gpu_layer& G : layers)
    if (G.kind.ratio) (G.comp.ratio == 4 ? off4 : off128) = uint32_t(G.comp.max_entries),
                      (G.comp.ratio == 4 ? cap4 : cap128) = G.comp.cap;
  const uint64_t ne128_end = (P + T) / 128, hca_keys = W + std::max<uint64_t>(ne128_end, 1);
  using clk = std::chrono::steady_clock;
  const auto t_prep = clk::now();
  const bool embed_on_device = static_cast<bool>(embed_dev.data);  // else the rows are decoded here and uploaded
  {
    in.begin();
    std::memcpy(in.stage(view(B.tokens, 0, T * 4), T * 4), toks.data(), T * 4);
    if (!embed_on_device) in.put(rows(B.X, 0, T, hc * d), embed_rows_host(embed, toks, hc, d));
    std::vector<uint32_t> counts(T);
    std::vector<int32_t> iswa(uint64_t(T) * W, -1), icsa(uint64_t(T) * (W + TK), -1), ihca(uint64_t(T) * hca_keys, -1);
    for (uint32_t t = 0; t < T; ++t) {
      const uint64_t p = P + t, s0 = p + 1 > W ? p + 1 - W : 0;
      counts[t] = uint32_t((p + 1) / 4);
      for (uint64_t s = s0; s <= p; ++s) {
        const int32_t slot = int32_t(s % R);
        iswa[t * W + (s - s0)] = slot;
        icsa[t * (W + TK) + (s - s0)] = slot + int32_t(off4);
        ihca[t * hca_keys + (s - s0)] = slot + int32_t(off128);
      }
      for (uint64_t j = 0; j < (p + 1) / 128; ++j) ihca[t * hca_keys + W + j] = int32_t(j);
    }
    in.put(view(B.counts, 0, T * 4), counts);
    in.put(view(B.idx_swa, 0, iswa.size() * 4), iswa);
    in.put(view(B.idx_csa, 0, icsa.size() * 4), icsa);
    in.put(view(B.idx_hca, 0, ihca.size() * 4), ihca);
    // closing windows per ratio: their first ring row and (overlap) the previous window's
    for (const uint32_t r : {4u, 128u}) {
      const uint32_t cap = r == 4 ? cap4 : cap128;
      if (!cap) continue;
      std::vector<uint32_t> w2;
      for (uint64_t j = P / r; j < (P + T) / r; ++j) {
        const uint64_t ws = j * r;
        w2.push_back(uint32_t(ws % cap));
        w2.push_back(r == 4 && ws >= r ? uint32_t((ws - r) % cap) : 0xFFFFFFFFu);  // V4: ratio 4 overlaps
      }
      in.put(view(r == 4 ? B.win4 : B.win128, 0, w2.size() * 4), w2);
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
  c.barrier();
  in.record(c);
  if (embed_on_device) {  // the chunk's rows, hc copies each, gathered from the device's embedding
    k.embed_rows(c, embed_dev, view(B.tokens, 0, T * 4), T, uint32_t(hc), rows(B.X, 0, T, hc * d));
    c.barrier();
  }
  // tracing: each layer's routed experts [T, K] and (indexer layers) key lists [T, W + TK], read after the run
  gpu::buffer tr_experts, tr_keys;
  if (trace) {
    tr_experts = dev.alloc(uint64_t(cf.layers) * T * K * 4);
    tr_keys = dev.alloc(std::max<uint64_t>(uint64_t(cf.layers) * T * (W + TK) * 4, 16));
  }
  // profiling: a timestamp after each op group, summed per name after the run
  gpu_chunk_profile::marks marks(c, opt.profile, opt.profile ? (timed ? t_first : c.timestamp()) : 0);
  auto stamp = [&](const char* name) { marks.stamp(name); };
  // T rows of a ring of `cap` rows starting at position P: at most two copies (the wrap).
  auto to_ring = [&](const gpu::buffer& src, const gpu::buffer& ring, uint64_t cap, uint64_t floats) {
    const uint64_t s0 = P % cap, n0 = std::min<uint64_t>(T, cap - s0);
    c.copy(rows(src, 0, n0, floats), rows(ring, s0, n0, floats), n0 * floats * 4);
    if (n0 < T) c.copy(rows(src, n0, T - n0, floats), rows(ring, 0, T - n0, floats), (T - n0) * floats * 4);
  };
  const view cs_swa_t = rows(cs_swa, P, T, rd), cs_comp_t = rows(cs_comp, P, T, rd);
  gpu::buffer* Xc = &B.X;
  gpu::buffer* Xcn = &B.Xn;
  k.hc_mix(c, sh, *Xc, layers.at(0).hc_attn_fn, mix_rows, T, B.partials);
  stamp("mhc");
  for (uint32_t l = 0; l < cf.layers; ++l) {
    dsv4_gpu_layer& G = layers[l];
    const dsv4_layer_kind& kind = G.kind;
    const view cs_t = kind.ratio ? cs_comp_t : cs_swa_t;
    // ---- attention sublayer
    k.hc_pre_finish(c, sh, B.partials, *Xc, G.hc_attn_base, G.hc_attn_scale, T, B.coeff, B.u, G.attn_norm);
    stamp("mhc");
    c.begin_concurrent();
    k.matmul(c, G.wq_a, B.u, T, B.qr);
    k.matmul(c, G.wkv, B.u, T, B.kvc);
    if (kind.ratio) {
      k.matmul(c, G.comp.wkv, B.u, T, B.ckv);
      k.matmul(c, G.comp.wgate, B.u, T, B.csc);
    }
    if (kind.indexer) {
      k.matmul(c, G.ix.wkv, B.u, T, B.ikv);
      k.matmul(c, G.ix.wgate, B.u, T, B.isc);
      k.matmul(c, G.ix_wp, B.u, T, B.iw);
    }
    c.end_concurrent();
    stamp("projections of u (wq_a, wkv, compressors, indexer)");
    c.begin_concurrent();
    k.rmsnorm(c, B.qr, G.q_norm, B.qr, T, cf.q_lora, eps);
    k.rmsnorm(c, B.kvc, G.kv_norm, B.kvc, T, uint32_t(hd), eps);
    // (the compressors' scores stay without their ape: the pooling adds it as it reads them)
    if (kind.indexer) k.scale(c, B.iw, uint64_t(T) * IH, float(1.0 / std::sqrt(double(IHD)) / std::sqrt(double(IH))));
    c.end_concurrent();
    c.begin_concurrent();
    k.matmul(c, G.wq_b, B.qr, T, B.q);
    if (kind.indexer) k.matmul(c, G.ix_wq_b, B.qr, T, B.iq);
    k.rope(c, B.kvc, cs_t, T, 1, uint32_t(hd), uint32_t(rd), false);
    c.end_concurrent();
    stamp("norms, ape, wq_b, ix_wq_b, kv rope");
    // this chunk's rows into the rings (window KV, the compressors' pending windows)
    to_ring(B.kvc, G.ring, R, hd);
    if (kind.ratio) {
      to_ring(B.ckv, G.comp.kv, G.comp.cap, G.comp.cw);
      to_ring(B.csc, G.comp.score, G.comp.cap, G.comp.cw);
    }
    if (kind.indexer) {
      to_ring(B.ikv, G.ix.kv, G.ix.cap, G.ix.cw);
      to_ring(B.isc, G.ix.score, G.ix.cap, G.ix.cw);
    }
    stamp("ring copies");
    // the entries closing inside the chunk: pooled (the scores' ape added as read) and roped at their windows'
    // first positions, one dispatch
    const uint64_t ne0 = kind.ratio ? P / kind.ratio : 0, ne1 = kind.ratio ? (P + T) / kind.ratio : 0;
    auto pool = [&](dsv4_gpu_comp& g) {
      gpu::kernels::pool_shape ps;
      ps.entries = uint32_t(ne1 - ne0), ps.ratio = g.ratio, ps.width = g.width, ps.row_floats = g.cw,
      ps.overlap = g.overlap, ps.eps = eps, ps.rope_dim = uint32_t(rd), ps.cs_stride = uint32_t(rd);
      if (ne1 > g.max_entries) throw std::logic_error("gpu model: compressed entries beyond max_ctx");
      const gpu::buffer& cs_e = kind.ratio == 4 ? cs_ent4 : cs_ent128;
      k.compress_pool(c, ps, g.kv, g.score, g.ratio == 4 ? B.win4 : B.win128, g.norm, rows(g.entries, ne0, ne1 - ne0, g.width),
                      rows(cs_e, ne0, ne1 - ne0, rd), g.ape);
    };
    c.begin_concurrent();
    if (cf.per_head_q_norm)  // the per-head norm and the rope of q in one dispatch
      k.rmsnorm_rope(c, B.q, view(), B.q, T * H, uint32_t(hd), eps, cs_t, H, uint32_t(rd));
    else
      k.rope(c, B.q, cs_t, T, H, uint32_t(hd), uint32_t(rd), false);
    if (kind.indexer) k.rope(c, B.iq, cs_t, T, IH, IHD, uint32_t(rd), false);
    if (ne1 > ne0) {
      pool(G.comp);
      if (kind.indexer) pool(G.ix);
    }
    c.end_concurrent();
    stamp("q norm, ropes, pooling");
    // indexer: scores of the entries finished at each row's position, top-k, into the rows' key lists
    if (kind.indexer && ne1 > 0) {
      gpu::kernels::index_shape is;
      is.rows = T, is.heads = IH, is.head_dim = IHD, is.n = uint32_t(ne1);
      k.index_score(c, is, B.iq, G.ix.entries, B.iw, B.counts, B.score);
      stamp("index_score");
      k.topk(c, B.score, T, uint32_t(ne1), TK, B.picks, true);
      k.pick_keys(c, B.picks, B.counts, T, TK, B.idx_csa, uint32_t(W + TK), uint32_t(W));
      stamp("topk + pick_keys");
    }
    if (trace && kind.indexer) {
      const uint64_t kb = uint64_t(T) * (W + TK) * 4;
      c.copy(view(B.idx_csa, 0, kb), view(tr_keys, uint64_t(l) * kb, kb), kb);
    }
    // sparse attention with sink over each row's [window | compressed] keys, the inverse rope of the output's tail
    // in its write
    gpu::kernels::attn_shape as;
    as.rows = T, as.heads = H, as.head_dim = uint32_t(hd), as.scale = float(1.0 / std::sqrt(double(hd)));
    as.inv_rope_dim = uint32_t(rd);
    if (kind.ratio) {
      as.keys = uint32_t(kind.indexer ? W + TK : hca_keys);
      as.kv_a_rows = uint32_t(G.comp.max_entries), as.kv_b_rows = uint32_t(R);
      k.sparse_attention(c, as, B.q, G.comp.entries, G.ring, kind.indexer ? B.idx_csa : view(B.idx_hca, 0, uint64_t(T) * hca_keys * 4),
                         G.sink, B.o, B.attn_x, cs_t);
    } else {
      as.keys = uint32_t(W), as.kv_a_rows = uint32_t(R), as.kv_b_rows = 0;
      k.sparse_attention(c, as, B.q, G.ring, view(), B.idx_swa, G.sink, B.o, B.attn_x, cs_t);
    }
    stamp("sparse_attention");
    // grouped output projection over the chunk: z[t, g] = wo_a[g] · o[t, g], then wo_b · z
    const uint64_t Gs = cf.o_groups, ol = cf.o_lora, gcols = uint64_t(H) * hd / Gs;
    c.begin_concurrent();
    for (uint64_t g = 0; g < Gs; ++g)
      k.matmul_rows(c, G.wo_a, g * ol, (g + 1) * ol, view(B.o, g * gcols * 4, (uint64_t(T - 1) * H * hd + gcols) * 4), T,
                    uint64_t(H) * hd, view(B.z, g * ol * 4, (uint64_t(T - 1) * Gs * ol + ol) * 4), Gs * ol);
    c.end_concurrent();
    stamp("o inverse rope + wo_a groups");
    k.matmul(c, G.wo_b, B.z, T, B.attn_out);
    stamp("wo_b");
    k.hc_post(c, sh, B.attn_out, *Xc, B.coeff, T, *Xcn, G.hc_ffn_fn, mix_rows, B.partials);
    std::swap(Xc, Xcn);
    stamp("mhc");
    // ---- MoE sublayer
    k.hc_pre_finish(c, sh, B.partials, *Xc, G.hc_ffn_base, G.hc_ffn_scale, T, B.coeff, B.u, G.ffn_norm);
    stamp("mhc");
    route_config rc;
    rc.top_k = K;
    rc.route_scale = float(cf.route_scale);
    c.begin_concurrent();
    k.matmul(c, G.gate, B.u, T, B.rlogits, act_precision::f32, prefill_router_min_groups);
    const bool sh_apart = G.shared_apart || G.shared_apart_chunks;
    if (sh_apart) {
      k.matmul(c, G.sh_gate, B.u, T, B.sh_g);
      k.matmul(c, G.sh_up, B.u, T, B.sh_u);
    }
    c.end_concurrent();
    stamp("router (+ shared gate/up)");
    if (kind.hash)
      k.route_hash(c, B.rlogits, G.tid2eid, cf.vocab, B.tokens, T, E, rc, view(), B.ridx, B.rw);
    else
      k.route_score(c, B.rlogits, G.gate_bias, T, E, rc, view(), B.ridx, B.rw);
    stamp("routing");
    if (trace) c.copy(view(B.ridx, 0, uint64_t(T) * K * 4), view(tr_experts, uint64_t(l) * T * K * 4, uint64_t(T) * K * 4), uint64_t(T) * K * 4);
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
    stamp("moe (grouped) + shared");
    const bool last = l + 1 == cf.layers;
    k.hc_post(c, sh, B.moe_out, *Xc, B.coeff, T, *Xcn, last ? view(hc_head_fn) : view(layers[l + 1].hc_attn_fn),
              last ? uint32_t(hc) : mix_rows, B.partials);
    std::swap(Xc, Xcn);
    stamp("mhc");
  }
  if (want_logits || all_logits) {
    k.hc_head_finish(c, sh, B.partials, *Xc, hc_head_base, hc_head_scale, T, B.coeff, B.u, norm);
    if (all_logits) k.matmul(c, head, B.u, T, *all_logits);
    else k.matmul(c, head, rows(B.u, T - 1, 1, d), 1, logits);
    stamp("head");
  }
  dispatches = cut_dispatches + c.dispatch_count();
  const uint32_t t_last = timed ? c.timestamp() : 0;
  chunk_stats.record_s += std::chrono::duration<double>(clk::now() - t_rec).count();
  chunk_flight.run(dev, c, overlap, timed, t_first, t_last, chunk_stats);
  if (cached) experts->finish_passes();
  passes.release();
  if (!overlap) chunk_prof.fold(marks, T);
  pos += T;
  ++chunk_stats.chunks;
  chunk_stats.dispatches += dispatches;
  if (trace) {  // as run() traces a step: sorted ids, −1 dropped; picks only for indexer layers
    std::vector<uint32_t> ex(uint64_t(cf.layers) * T * K), keys(uint64_t(cf.layers) * T * (W + TK));
    dev.download(tr_experts, ex.data(), ex.size() * 4);
    dev.download(view(tr_keys, 0, keys.size() * 4), keys.data(), keys.size() * 4);
    trace->topk.resize(cf.layers);
    trace->experts.resize(cf.layers);
    for (uint32_t l = 0; l < cf.layers; ++l)
      for (uint32_t t = 0; t < T; ++t) {
        trace->experts[l].push_back(sorted_ids(ex.data() + (uint64_t(l) * T + t) * K, K));
        if (layers[l].kind.indexer)
          trace->topk[l].push_back(sorted_ids(keys.data() + (uint64_t(l) * T + t) * (W + TK) + W, TK));
      }
  }
}

bool dsv4_gpu_model::prefill_chunked() const { return p_->chunkable(); }

std::string dsv4_gpu_model::prefill_profile() const { return p_->chunk_prof.text(); }

void dsv4_gpu_model::impl::check_ids(std::span<const uint32_t> ids) const {
  gpu_graph::check_ids(ids, cfg.vocab, pos, opt.max_ctx);
}

bool dsv4_gpu_model::impl::chunkable() const {
  if (opt.prefill_chunk < 2 || chunks_off || (experts->active() && opt.prefill_chunk < 3)) return false;
  for (const dsv4_gpu_layer& G : layers)
    if (!(G.kind.ratio == 0 || (G.kind.ratio == 4 && G.kind.indexer) || (G.kind.ratio == 128 && !G.kind.indexer)))
      return false;
  return true;
}

gpu_prefill_stats dsv4_gpu_model::last_prefill() const { return p_->chunk_stats; }

void dsv4_gpu_model::impl::prefill(std::span<const uint32_t> ids, bool want_logits) {
  const uint32_t C = opt.prefill_chunk;
  chunk_stats = {};
  try {
    for (size_t b = 0, e; b < ids.size(); b = e) {
      e = chunk_end(ids.size(), b, C, experts->active());
      run_chunk(ids.subspan(b, e - b), want_logits && e == ids.size(), nullptr);
    }
    chunk_flight.finish(dev, chunk_stats);
  } catch (...) {
    chunk_flight.drain(dev);  // the chunks before the failing one ran (as when each was waited for)
    throw;
  }
}

}  // namespace cmfx::driver

// V4 attention sublayer for a chunk of tokens (dsv4-architecture.md §3.3): low-rank q with per-head RMS, shared
// K = V latent with kv_norm, RoPE on the last rope_dim channels (adjacent pairs, per-layer table), window of W
// positions, compressed entries (HCA: all finished ones; CSA: the indexer's top-k), softmax with sink, inverse rope
// of the output, grouped wo_a then wo_b.
#include <algorithm>
#include <cmath>
#include <span>

#include "cmfx/ops/attend_keys.hpp"
#include "cmfx/ops/fake_quant.hpp"
#include "cmfx/ops/hadamard.hpp"
#include "cmfx/ops/reduce.hpp"
#include "cmfx/ops/rmsnorm.hpp"
#include "cmfx/ops/softmax.hpp"
#include "cmfx/ops/topk.hpp"
#include "dsv4_internal.hpp"
#include "model_common.hpp"

namespace cmfx::driver {

namespace {

/// Rotate the last rd channels of each of `heads` vectors of length hd in row x, at position pos.
void rope_heads(float* x, uint32_t heads, uint32_t hd, std::span<const double> cs, bool inverse) {
  const size_t rd = cs.size();
  for (uint32_t h = 0; h < heads; ++h)
    apply_rope_cs(std::span<float>(x + size_t(h) * hd + hd - rd, rd), cs, inverse);
}

}  // namespace

void dsv4_model::impl::attention(uint32_t layer, const float* u, uint64_t n, const dsv4_token_ctx& tc, float* out,
                                 dsv4_trace* trace) {
  const dsv4_config& cf = c();
  const dsv4_layer_w& L = w.layers[layer];
  auto S = [&](uint64_t i) -> dsv4_layer_state& { return tc.st[i]->layers()[layer]; };
  const uint32_t H = cf.heads, hd = cf.head_dim, rd = cf.rope_dim, W = cf.window;
  const uint64_t d = cf.dim;
  const float eps = float(cf.norm_eps);
  const rope_table& rope = rope_for(layer);

  // The buffers of this call are the model's scratch (scr, only growing): every value read below is written first in
  // this call unless it is filled here.
  // cos/sin per position of the chunk, [token][rd].
  const std::span<double> cs_all = grown(scr.cs, n * rd);
  auto cs = [&](uint64_t i) { return cs_all.subspan(i * rd, rd); };
  for (uint64_t i = 0; i < n; ++i) rope.rotation(int64_t(tc.pos[i]), cs(i));

  // Query path: qr = RMS(wq_a·u; q_norm), q = wq_b·qr, per-head RMS, rope tail.
  const std::span<float> qr = grown(scr.qr, n * cf.q_lora), q = grown(scr.q, n * H * hd);
  linear(L.wq_a, u, n, qr.data());
  for (uint64_t i = 0; i < n; ++i) {
    std::span<float> row(qr.data() + i * cf.q_lora, cf.q_lora);
    rmsnorm(row, L.q_norm.data(), eps, row);
  }
  linear(L.wq_b, qr.data(), n, q.data());
  for (uint64_t i = 0; i < n; ++i) {
    std::span<float> row(q.data() + i * H * hd, size_t(H) * hd);
    if (cf.per_head_q_norm) rmsnorm_heads(row, H, hd, eps, row);
    rope_heads(row.data(), H, hd, cs(i), false);
  }
  // KV path: kv = RMS(wkv·u; kv_norm), rope tail, optional FP8 fake-quant of the nope dims.
  const std::span<float> kv = grown(scr.kv, n * hd);
  linear(L.wkv, u, n, kv.data());
  for (uint64_t i = 0; i < n; ++i) {
    std::span<float> row(kv.data() + i * hd, hd);
    rmsnorm(row, L.kv_norm.data(), eps, row);
    apply_rope_cs(row.subspan(hd - rd), cs(i), false);
    if (opt.qat_kv_fp8) act_quant_e4m3(row.first(hd - rd), dsv4_kv_fp8_block);
  }

  // Compressors, token by token (an entry finished at token t is visible to t).
  const dsv4_layer_kind& kind = cf.kinds[layer];
  const std::span<uint64_t> n_entries = grown_filled(scr.n_entries, n, 0);  // zeros where no compressor (as before)
  std::span<float> iq, iw;
  const uint32_t IH = cf.index_heads, IHD = cf.index_head_dim;
  if (kind.ratio) {
    const uint32_t cw = L.comp.coff() * hd;
    const std::span<float> ca = grown(scr.ca, n * cw), cs_ = grown(scr.csc, n * cw);
    linear(L.comp.wkv, u, n, ca.data());
    linear(L.comp.wgate, u, n, cs_.data());
    if (kind.indexer) {
      const uint32_t icw = L.ix_comp.coff() * IHD;
      const std::span<float> ica = grown(scr.ica, n * icw), ics = grown(scr.ics, n * icw);
      linear(L.ix_comp.wkv, u, n, ica.data());
      linear(L.ix_comp.wgate, u, n, ics.data());
      // Indexer query: wq_b·qr per head, rope tail, (QAT) Hadamard + FP4; head weights.
      iq = grown(scr.iq, n * IH * IHD);
      linear(L.ix_wq_b, qr.data(), n, iq.data());
      for (uint64_t i = 0; i < n; ++i) {
        float* row = iq.data() + i * IH * IHD;
        rope_heads(row, IH, IHD, cs(i), false);
        if (opt.qat_indexer_fp4) {
          std::span<float> all(row, size_t(IH) * IHD);
          hadamard_rows(all, IHD, float(1.0 / std::sqrt(double(IHD))));
          act_quant_e2m1(all, dsv4_fp4_block);
        }
      }
      iw = grown(scr.iw, n * IH);
      linear(L.ix_weights_proj, u, n, iw.data());
      const float wscale = float(1.0 / std::sqrt(double(IHD)) / std::sqrt(double(IH)));
      for (float& x : iw) x *= wscale;
      for (uint64_t i = 0; i < n; ++i)
        dsv4_compressor_step(L.ix_comp, S(i).ix, tc.pos[i], ica.data() + i * icw, ics.data() + i * icw, rope, eps,
                             opt.qat_indexer_fp4 ? 2 : 0);
    }
    for (uint64_t i = 0; i < n; ++i) {
      dsv4_compressor_step(L.comp, S(i).comp, tc.pos[i], ca.data() + i * cw, cs_.data() + i * cw, rope, eps,
                           opt.qat_kv_fp8 ? 1 : 0);
      n_entries[i] = (tc.pos[i] + 1) / kind.ratio;
    }
    for (uint64_t i = 0; i < n; ++i)
      if (S(i).comp.count() < n_entries[i] || (kind.indexer && S(i).ix.count() < n_entries[i]))
        throw std::logic_error("dsv4 attention: compressor entry count out of step");
  }

  // Compressed entries each token attends to: scr.picks only grows (its rows keep their capacity); this call's rows
  // start empty, as a layer without compressed entries leaves them.
  if (scr.picks.size() < n) scr.picks.resize(n);
  std::vector<std::vector<uint32_t>>& picks = scr.picks;
  for (uint64_t i = 0; i < n; ++i) picks[i].clear();
  std::vector<float> margin;  // trace: how close each row's pick came to a tie
  if (kind.ratio && !kind.indexer) {
    for (uint64_t i = 0; i < n; ++i) {
      resize_grow(picks[i], n_entries[i]);
      for (uint32_t j = 0; j < n_entries[i]; ++j) picks[i][j] = j;
    }
  } else if (kind.indexer) {
    if (trace) margin.resize(n);
    // Token i's scores of entries [j0, j1).
    auto score_entries = [&](uint64_t i, uint64_t j0, uint64_t j1, float* score) {
      const float* qi = iq.data() + i * IH * IHD;
      for (uint64_t j = j0; j < j1; ++j) {
        const float* kj = S(i).ix.entry(j);
        double s = 0.0;
        for (uint32_t h = 0; h < IH; ++h) {
          const double dotv = ops_detail::dot(qi + size_t(h) * IHD, kj, IHD);
          s += std::max(dotv, 0.0) * double(iw[i * IH + h]);  // ReLU before the head weight
        }
        score[j] = float(s);
      }
    };
    auto pick = [&](uint64_t i, std::span<float> score, std::span<topk_entry> scratch) {
      const uint64_t ne = n_entries[i];
      const size_t kk = std::min<uint64_t>(cf.index_topk, ne);
      resize_grow(picks[i], kk);
      topk(score, kk, scratch, picks[i]);
      if (trace) margin[i] = selection_margin(score, kk, scratch);
    };
    // A token's scores (zeroed as before) and top-k entries are its worker's own (scr.wk); grown, not assigned, so
    // that a step with one more entry does not reallocate them.
    if (n >= pool.size()) {  // a worker per token
      pool.run(n, [&](uint64_t b, uint64_t e, unsigned wk) {
        for (uint64_t i = b; i < e; ++i) {
          const std::span<float> score = grown_filled(scr.wk[wk].score, n_entries[i], 0.0f);
          score_entries(i, 0, n_entries[i], score.data());
          pick(i, score, grown(scr.wk[wk].topk, n_entries[i]));
        }
      });
    } else {  // fewer tokens than workers (decode): each token's entries split over the pool, the same scores
      for (uint64_t i = 0; i < n; ++i) {
        // the calling thread's (worker 0) buffers; the split's workers only write score
        const std::span<float> score = grown_filled(scr.wk[0].score, n_entries[i], 0.0f);
        pool.run(n_entries[i], [&](uint64_t b, uint64_t e, unsigned) { score_entries(i, b, e, score.data()); }, 16);
        pick(i, score, grown(scr.wk[0].topk, n_entries[i]));
      }
    }
  }
  if (trace && kind.indexer)
    for (uint64_t i = 0; i < n; ++i) {
      auto sorted = picks[i];
      std::sort(sorted.begin(), sorted.end());
      trace->topk[layer].push_back(std::move(sorted));
      trace->topk_margin[layer].push_back(margin[i]);
    }

  // Sparse attention with sink, per (token, head).
  const std::span<float> o = grown(scr.heads, n * H * hd);
  const double scale = 1.0 / std::sqrt(double(hd));
  pool.run(n * H, [&](uint64_t b, uint64_t e, unsigned wk) {
    // the worker's own keys, logits and accumulators (attend_keys writes every logit and clears acc)
    std::vector<const float*>& keys = scr.wk[wk].keys;
    std::vector<float>& logit = scr.wk[wk].logit;
    const std::span<double> acc = grown(scr.wk[wk].acc, hd);
    for (uint64_t it = b; it < e; ++it) {
      const uint64_t i = it / H, h = it % H, t = tc.pos[i], p0 = tc.p0[i];
      keys.clear();
      for (uint64_t s = t + 1 > W ? t + 1 - W : 0; s <= t; ++s)
        keys.push_back(s >= p0 ? kv.data() + (tc.first[i] + (s - p0)) * hd : tc.st[i]->ring_row(layer, s));
      for (uint32_t j : picks[i]) keys.push_back(S(i).comp.entry(j));
      const float* qh = q.data() + (i * H + h) * hd;
      resize_grow(logit, keys.size());
      float* oh = o.data() + (i * H + h) * hd;
      attend_keys(qh, keys.data(), keys.size(), hd, scale, L.attn_sink[h], logit.data(), acc.data(), oh);
      apply_rope_cs(std::span<float>(oh + hd - rd, rd), cs(i), true);  // the value carries the key's rope
    }
  });

  // The chunk's KV rows join the window ring.
  for (uint64_t i = 0; i < n; ++i) std::copy_n(kv.data() + i * hd, hd, tc.st[i]->ring_row(layer, tc.pos[i]));

  // Grouped output: z_g = wo_a[g]·o_g (rows g·o_lora … of wo_a, columns = one group of heads), out = wo_b·z.
  const uint64_t G = cf.o_groups, ol = cf.o_lora, gcols = uint64_t(H) * hd / G, zr = G * ol;
  const std::span<float> z = grown(scr.z, n * zr);
  {
    cpu_phase_scope ph(prof, cpu_phase::dense);
    grouped_gemm(pool, kern, L.wo_a.fmt, L.wo_a.v, o.data(), n, G, ol, gcols, z.data(), opt.matmul_act, act);
  }
  linear(L.wo_b, z.data(), n, out);
  (void)d;
}

}  // namespace cmfx::driver

// V4.1 CSA2 attention sublayer for a chunk of tokens (dsv4-architecture.md §4.2; V41-MODEL Attention, Compressor,
// Indexer, select_candidate_blocks): low-rank q without per-head norm, shared K = V latent with kv_norm, RoPE on the
// last rope_dim channels with the layer's table, window of W positions plus the compressed entries the layer's
// index source picked from its KV source's cache, softmax with sink, inverse rope, grouped wo_a then wo_b.
#include <algorithm>
#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>

#include "cmfx/formats/exmy.hpp"
#include "cmfx/ops/attend_keys.hpp"
#include "cmfx/ops/fake_quant.hpp"
#include "cmfx/ops/reduce.hpp"
#include "cmfx/ops/rmsnorm.hpp"
#include "cmfx/ops/softmax.hpp"
#include "cmfx/ops/topk.hpp"
#include "dsv41_internal.hpp"
#include "model_common.hpp"

namespace cmfx::driver {

namespace {

void rope_heads(float* x, uint32_t heads, uint32_t hd, std::span<const double> cs, bool inverse) {
  const size_t rd = cs.size();
  for (uint32_t h = 0; h < heads; ++h) apply_rope_cs(std::span<float>(x + size_t(h) * hd + hd - rd, rd), cs, inverse);
}

constexpr float neg_inf = -std::numeric_limits<float>::infinity();

}  // namespace

void dsv41_fp4_e4m3_quant(std::span<float> x, uint32_t block) {
  for (size_t b = 0; b < x.size(); b += block) {
    float* p = x.data() + b;
    const size_t len = std::min<size_t>(block, x.size() - b);
    float amax = 0.0f;
    for (size_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(p[i]));
    amax = std::max(amax, 6.0f * 0x1p-9f);  // the smallest E4M3 scale is 2^-9
    const float s = e4m3::decode(e4m3::encode(std::min(amax / 6.0f, 448.0f)));
    for (size_t i = 0; i < len; ++i) p[i] = e2m1::decode(e2m1::encode(std::clamp(p[i] / s, -6.0f, 6.0f))) * s;
  }
}

void dsv41_candidate_blocks(std::span<const float> score, uint32_t topk_blocks, uint32_t bs, std::vector<uint8_t>& mask,
                            float* margin, dsv41_block_scratch* scratch_in) {
  const size_t ne = score.size(), nb = (ne + bs - 1) / bs;
  // resize + fill, not assign: a mask that grows by an entry per step grows geometrically, not at every step
  resize_grow(mask, ne);
  std::fill(mask.begin(), mask.end(), uint8_t(0));
  if (margin) *margin = std::numeric_limits<float>::infinity();
  if (ne == 0) return;
  // The caller's buffers or local ones, resized to exactly these sizes (their capacity kept).
  dsv41_block_scratch local;
  dsv41_block_scratch& bsc = scratch_in ? *scratch_in : local;
  std::vector<float>& blk = bsc.blk;
  resize_grow(blk, nb);
  std::fill(blk.begin(), blk.end(), neg_inf);
  for (size_t j = 0; j < ne; ++j) blk[j / bs] = std::max(blk[j / bs], score[j]);
  blk[(ne - 1) / bs] = std::numeric_limits<float>::infinity();  // the newest entry's (partial) block is pinned
  std::vector<topk_entry>& scratch = bsc.topk;
  resize_grow(scratch, nb);  // topk / selection_margin write every entry they read
  if (margin && topk_blocks > 0) *margin = selection_margin(blk, topk_blocks - 1, scratch);  // the pin is not finite
  std::vector<uint32_t>& pick = bsc.pick;
  resize_grow(pick, std::min<size_t>(topk_blocks, nb));
  const size_t k = topk(blk, pick.size(), scratch, pick);
  for (size_t q = 0; q < k; ++q) {
    if (blk[pick[q]] == neg_inf) continue;  // fewer reachable blocks than topk_blocks: −inf picks are dropped
    for (size_t j = size_t(pick[q]) * bs; j < std::min(ne, size_t(pick[q] + 1) * bs); ++j) mask[j] = 1;
  }
}

void dsv41_model::impl::attention(uint32_t l, const float* u, uint64_t n, const dsv41_token_ctx& tc, dsv41_shared& sh,
                                  float* out, dsv41_trace* trace) {
  const dsv41_config& cf = c();
  const dsv41_layer_w& L = w.layers[l];
  const dsv41_layer_plan& pl = cf.plan[l];
  const uint32_t H = cf.heads, hd = cf.head_dim, rd = cf.rope_dim, W = cf.window, r = pl.ratio;
  const float eps = float(cf.norm_eps);
  const rope_table& rope = rope_for(l);
  // The buffers of this call are the model's scratch (scr, ix_scratch, only growing): every value read below is
  // written first in this call unless it is filled here.
  // cos/sin per position of the chunk, [token][rd].
  const std::span<double> cs_all = grown(scr.cs, n * rd);
  auto cs = [&](uint64_t i) { return cs_all.subspan(i * rd, rd); };
  for (uint64_t i = 0; i < n; ++i) rope.rotation(int64_t(tc.pos[i]), cs(i));

  // Query: qr = RMS(wq_a·u; q_norm), q = wq_b·qr (no per-head norm in V4.1), rope tail.
  const std::span<float> qr = grown(scr.qr, n * cf.q_lora), q = grown(scr.q, n * H * hd);
  linear(L.wq_a, u, n, qr.data());
  for (uint64_t i = 0; i < n; ++i) {
    std::span<float> row(qr.data() + i * cf.q_lora, cf.q_lora);
    rmsnorm(row, L.q_norm.data(), eps, row);
  }
  linear(L.wq_b, qr.data(), n, q.data());
  for (uint64_t i = 0; i < n; ++i) rope_heads(q.data() + i * H * hd, H, hd, cs(i), false);
  // Window KV: RMS(wkv·u; kv_norm), rope tail, FP8 over the whole vector (block 32).
  const std::span<float> kv = grown(scr.kv, n * hd);
  linear(L.wkv, u, n, kv.data());
  for (uint64_t i = 0; i < n; ++i) {
    std::span<float> row(kv.data() + i * hd, hd);
    rmsnorm(row, L.kv_norm.data(), eps, row);
    apply_rope_cs(row.subspan(hd - rd), cs(i), false);
    if (opt.qat_kv) act_quant_e4m3(row, dsv41_act_block);
  }

  const uint32_t IH = cf.index_heads, IHD = cf.index_head_dim;
  if (pl.mode == dsv41_mode::full) {
    // Compressor → pre-rope latents of the groups that close in this chunk (group j stands for position j·r).
    // lat and owner_token are cleared scratch (insert / push_back reuse their capacity)
    const std::span<float> a = grown(scr.ca, n * hd);
    std::span<float> sc;
    linear(L.comp_wkv, u, n, a.data());
    if (r > 1) {
      sc = grown(scr.csc, n * hd);
      linear(L.comp_wgate, u, n, sc.data());
    }
    std::vector<float>& lat = scr.lat;
    lat.clear();
    std::vector<uint64_t>& owner_token = scr.owner_token;  // chunk row of the token that closes each group
    owner_token.clear();
    const std::span<float> pooled = grown(scr.pooled, hd);  // one closing group, written whole
    for (uint64_t i = 0; i < n; ++i) {
      dsv41_state& st = *tc.st[i];
      const uint64_t t = tc.pos[i];
      if (r == 1) {
        lat.insert(lat.end(), a.data() + i * hd, a.data() + (i + 1) * hd);
      } else {
        std::copy_n(a.data() + i * hd, hd, st.pend_kv(l, t));
        std::copy_n(sc.data() + i * hd, hd, st.pend_sc(l, t));
        if ((t + 1) % r != 0) continue;
        // Per channel: softmax over the group's r scores, weighted sum of its r rows (fp32 in the reference).
        for (uint32_t ch = 0; ch < hd; ++ch) {
          double m = -std::numeric_limits<double>::infinity();
          for (uint64_t p = t + 1 - r; p <= t; ++p) m = std::max(m, double(st.pend_sc(l, p)[ch]));
          double den = 0, num = 0;
          for (uint64_t p = t + 1 - r; p <= t; ++p) {
            const double e = std::exp(double(st.pend_sc(l, p)[ch]) - m);
            den += e;
            num += e * double(st.pend_kv(l, p)[ch]);
          }
          pooled[ch] = float(num / den);
        }
        lat.insert(lat.end(), pooled.begin(), pooled.end());
      }
      owner_token.push_back(i);
      std::span<float> last(lat.data() + lat.size() - hd, hd);
      rmsnorm(last, L.comp_norm.data(), eps, last);
    }
    // Index keys from the pre-rope latents; then the latents become compressed KV entries (rope, FP4 / E4M3 16).
    const uint64_t m = owner_token.size();
    if (m) {
      const std::span<float> keys = grown(scr.keys, m * IHD);
      linear(L.ix_wk, lat.data(), m, keys.data());
      const std::span<double> gcs = grown(scr.gcs, rd);
      for (uint64_t g = 0; g < m; ++g) {
        const uint64_t i = owner_token[g], gpos = tc.pos[i] + 1 - r;
        rope.rotation(int64_t(gpos), gcs);
        std::span<float> k(keys.data() + g * IHD, IHD);
        rmsnorm(k, L.ix_k_norm.data(), eps, k);
        apply_rope_cs(k.subspan(IHD - rd), gcs, false);
        std::span<float> ent(lat.data() + g * hd, hd);
        apply_rope_cs(ent.subspan(hd - rd), gcs, false);
        dsv41_state& S = *tc.st[i];
        if (S.entries(l) != gpos / r) throw std::logic_error("dsv4.1 compressor: entry count out of step");
        // Packed state: the bank quantises (the same FP4 rules, bit-identical); f32 state: fake-quant here.
        if (opt.qat_kv && !S.packed()) {
          act_quant_e2m1(k, dsv41_index_fp4_block);
          dsv41_fp4_e4m3_quant(ent, dsv41_kv_fp4_block);
        }
        S.append_entry(l, ent, k);
      }
    }
  }

  // Index sources: score the published index keys, build / apply the candidate pool, keep the top-k.
  if (pl.mode == dsv41_mode::full || pl.mode == dsv41_mode::reindex) {
    // iq, iw, kfrom and the key tiles live in ix_scratch (every value read below is written first in this call)
    const std::span<float> iq = grown(ix_scratch.iq, n * IH * IHD), iw = grown(ix_scratch.iw, n * IH);
    linear(L.ix_wq_b, qr.data(), n, iq.data());
    for (uint64_t i = 0; i < n; ++i) {
      float* row = iq.data() + i * IH * IHD;
      rope_heads(row, IH, IHD, cs(i), false);
      if (opt.qat_kv) act_quant_e2m1(std::span<float>(row, size_t(IH) * IHD), dsv41_index_fp4_block);
    }
    linear(L.ix_weights_proj, u, n, iw.data());
    const float wscale = float(1.0 / std::sqrt(double(IHD)) / std::sqrt(double(IH)));
    for (float& x : iw) x *= wscale;
    // picks and candidates only grow (their rows keep their capacity): every row of this chunk's tokens is rewritten
    // below (pk.resize + topk; dsv41_candidate_blocks assigns the mask) before any layer reads it.
    auto& picks = sh.picks[l];
    if (picks.size() < n) picks.resize(n);
    if (pl.candidate_source) {
      if (sh.candidates.size() < n) sh.candidates.resize(n);
      sh.candidate_margin.assign(trace ? n : 0, 0.0f);
    }
    const std::span<int> kfrom = grown(ix_scratch.kfrom, n);
    for (uint64_t i = 0; i < n; ++i) kfrom[i] = keys_layer(l, i, tc);
    std::vector<float> margin(trace ? n : 0);
    // The scores of tokens [g0, g1) (one state, one key layer kl; row stride nmax) for the key tiles [t0, t1): each
    // tile is decoded (packed state) once and scored by every token of the group; `ktile`: the calling worker's
    // scratch of dsv41_key_tile · IHD floats.
    auto score_tiles = [&](uint64_t g0, uint64_t g1, uint32_t kl, uint64_t nmax, uint64_t t0, uint64_t t1, float* scores,
                           float* ktile) {
      const dsv41_state& st = *tc.st[g0];
      for (uint64_t j0 = t0 * dsv41_key_tile; j0 < std::min(nmax, t1 * dsv41_key_tile); j0 += dsv41_key_tile) {
        const uint64_t nj = std::min<uint64_t>(dsv41_key_tile, nmax - j0);
        const float* kt = nullptr;
        if (st.packed()) {
          st.read_keys(kl, j0, std::span<float>(ktile, nj * IHD));
          kt = ktile;
        } else {
          kt = st.key(kl, j0);
        }
        for (uint64_t i = g0; i < g1; ++i) {
          const uint64_t ne = (tc.pos[i] + 1) / r;
          const float* qi = iq.data() + i * IH * IHD;
          float* si = scores + (i - g0) * nmax;
          for (uint64_t jj = 0; jj < nj && j0 + jj < ne; ++jj) {
            const float* kj = kt + jj * IHD;
            double s = 0.0;
            for (uint32_t h = 0; h < IH; ++h)
              s += std::max(ops_detail::dot(qi + size_t(h) * IHD, kj, IHD), 0.0) * double(iw[i * IH + h]);  // ReLU first
            si[j0 + jj] = float(s);
          }
        }
      }
    };
    // With fewer tokens than workers (decode) each group's key tiles are split over the pool (the same scores);
    // else a worker takes whole groups. Either way worker wk decodes into its own ix_scratch.ktile[wk] and keeps its
    // scores, top-k entries and block pick in scr.wk[wk] (grown, so that a step with one more entry reallocates
    // nothing but geometrically).
    const bool split_tiles = n < pool.size();
    auto run_groups = [&](uint64_t b, uint64_t e, unsigned wk) {
      std::vector<topk_entry>& scratch = scr.wk[wk].topk;
      // Groups of consecutive tokens of one state that score the same key layer: each key tile is decoded (packed
      // state) once per group and scored by every token of it; the keys are never all unpacked at once.
      for (uint64_t g0 = b; g0 < e;) {
        uint64_t g1 = g0 + 1;
        while (g1 < e && g1 - g0 < dsv41_index_token_group && tc.st[g1] == tc.st[g0] && kfrom[g1] == kfrom[g0]) ++g1;
        const dsv41_state& st = *tc.st[g0];
        const uint32_t kl = uint32_t(kfrom[g0]);
        uint64_t nmax = 0;
        for (uint64_t i = g0; i < g1; ++i) nmax = std::max<uint64_t>(nmax, (tc.pos[i] + 1) / r);
        if (st.keys(kl) < nmax) throw std::logic_error("dsv4.1 indexer: index keys of layer " + std::to_string(kl) + " not ready");
        const std::span<float> scores = grown_filled(scr.wk[wk].scores, (g1 - g0) * nmax, 0.0f);  // zeroed as before
        const uint64_t tiles = (nmax + dsv41_key_tile - 1) / dsv41_key_tile;
        if (split_tiles)
          pool.run(tiles, [&](uint64_t t0, uint64_t t1, unsigned tw) {
            score_tiles(g0, g1, kl, nmax, t0, t1, scores.data(), ix_scratch.ktile[tw].data());
          });
        else
          score_tiles(g0, g1, kl, nmax, 0, tiles, scores.data(), ix_scratch.ktile[wk].data());
        for (uint64_t i = g0; i < g1; ++i) {
          const uint64_t ne = (tc.pos[i] + 1) / r;
          const std::span<float> score(scores.data() + (i - g0) * nmax, ne);
          // traced: the block pick's margin belongs to the layers the pool confines (not the source's own top-k)
          if (pl.candidate_source)
            dsv41_candidate_blocks(score, cf.candidate_topk_blocks, cf.candidate_block_size, sh.candidates[i],
                                   trace ? &sh.candidate_margin[i] : nullptr, &scr.wk[wk].blocks);
          const float block_margin = pl.uses_candidates && trace && i < sh.candidate_margin.size()
                                         ? sh.candidate_margin[i]
                                         : std::numeric_limits<float>::infinity();
          if (pl.uses_candidates) {
            const std::vector<uint8_t>& cand = sh.candidates.at(i);
            for (uint64_t j = 0; j < ne; ++j)
              if (j >= cand.size() || !cand[j]) score[j] = neg_inf;
          }
          const size_t kk = std::min<uint64_t>(cf.index_topk, ne);
          resize_grow(scratch, ne);
          std::vector<uint32_t>& pk = picks[i];
          resize_grow(pk, kk);
          topk(score, kk, scratch, pk);
          if (trace) margin[i] = std::min(block_margin, selection_margin(score, kk, scratch));
          // A −inf pick (outside the candidate pool) cannot occur when the pool holds ≥ index_topk entries
          // (checked by dsv41_make_plan); drop it defensively rather than attend to a masked entry.
          pk.erase(std::remove_if(pk.begin(), pk.end(), [&](uint32_t j) { return score[j] == neg_inf; }), pk.end());
          std::sort(pk.begin(), pk.end());
        }
        g0 = g1;
      }
    };
    if (split_tiles)
      run_groups(0, n, 0);  // on the calling thread, worker 0
    else
      pool.run(n, [&](uint64_t b, uint64_t e, unsigned wk) { run_groups(b, e, wk); });
    if (trace)
      for (uint64_t i = 0; i < n; ++i) {
        trace->topk[l].push_back(picks[i]);
        trace->keys_from[l].push_back(kfrom[i]);
        trace->topk_margin[l].push_back(margin[i]);
      }
  }

  // Sparse attention with sink over the window and the picked compressed entries of the KV source. Packed state:
  // the picked rows of each token are decoded once into a bounded scratch (index_topk rows) that all heads read;
  // tokens go in tiles of dsv41_attn_token_tile so the scratch does not grow with the chunk.
  const std::vector<std::vector<uint32_t>>* picks = r ? &sh.picks[size_t(pl.topk_from)] : nullptr;
  const uint32_t src = r ? uint32_t(pl.kv_from) : 0;
  const std::span<float> o = grown(scr.heads, n * H * hd);
  const double scale = 1.0 / std::sqrt(double(hd));
  const bool packed = picks && tc.st[0]->packed();
  if (packed && (kv_scratch.size() != dsv41_attn_token_tile || kv_scratch[0].values() != hd))
    kv_scratch.assign(dsv41_attn_token_tile, packed_fp4_scratch<kv_main_codec>(hd, cf.index_topk));
  for (uint64_t t0 = 0; t0 < n; t0 += dsv41_attn_token_tile) {
    const uint64_t tn = std::min<uint64_t>(dsv41_attn_token_tile, n - t0);
    const std::span<std::span<const float>> sel = grown(scr.sel, tn);  // read only where `packed` wrote it
    if (packed)
      pool.run(tn, [&](uint64_t b, uint64_t e, unsigned) {
        for (uint64_t k = b; k < e; ++k)
          sel[k] = kv_scratch[k].decode(tc.st[t0 + k]->layers()[src].kv_rows,
                                        std::span<const uint32_t>((*picks)[t0 + k]));
      });
    pool.run(tn * H, [&](uint64_t b, uint64_t e, unsigned wk) {
      // the worker's own keys, logits and accumulators (attend_keys writes every logit and clears acc)
      std::vector<const float*>& keys = scr.wk[wk].keys;
      std::vector<float>& logit = scr.wk[wk].logit;
      const std::span<double> acc = grown(scr.wk[wk].acc, hd);
      for (uint64_t it = b; it < e; ++it) {
        const uint64_t i = t0 + it / H, h = it % H, t = tc.pos[i], p0 = tc.p0[i];
        keys.clear();
        for (uint64_t s = t + 1 > W ? t + 1 - W : 0; s <= t; ++s)
          keys.push_back(s >= p0 ? kv.data() + (tc.first[i] + (s - p0)) * hd : tc.st[i]->ring_row(l, s));
        if (picks) {
          const std::vector<uint32_t>& pk = (*picks)[i];
          for (size_t k = 0; k < pk.size(); ++k)
            keys.push_back(packed ? sel[i - t0].data() + k * hd : tc.st[i]->entry(src, pk[k]));
        }
        const float* qh = q.data() + (i * H + h) * hd;
        resize_grow(logit, keys.size());
        float* oh = o.data() + (i * H + h) * hd;
        attend_keys(qh, keys.data(), keys.size(), hd, scale, L.attn_sink[h], logit.data(), acc.data(), oh);
        apply_rope_cs(std::span<float>(oh + hd - rd, rd), cs(i), true);
      }
    });
  }
  for (uint64_t i = 0; i < n; ++i) std::copy_n(kv.data() + i * hd, hd, tc.st[i]->ring_row(l, tc.pos[i]));

  // Grouped output: z_g = wo_a[g]·o_g, out = wo_b·z.
  const uint64_t G = cf.o_groups, ol = cf.o_lora, gcols = uint64_t(H) * hd / G, zr = G * ol;
  const std::span<float> z = grown(scr.z, n * zr);
  {
    cpu_phase_scope ph(prof, cpu_phase::dense);
    grouped_gemm(pool, kern, L.wo_a.fmt, L.wo_a.v, o.data(), n, G, ol, gcols, z.data(), opt.matmul_act, act);
  }
  linear(L.wo_b, z.data(), n, out);
}

}  // namespace cmfx::driver

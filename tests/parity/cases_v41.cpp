// V4.1-specific cases (issue #9), oracles the CPU functions the V4.1 graph runs (driver/model/dsv41_attention.cpp):
//   fp4_e4m3_quant: fake_quant(e2m1_e4m3, block 16) bit-exact against dsv41_fp4_e4m3_quant (it is rounding only);
//     inputs: per-block magnitudes 1e-5 … 3e4 (amax/6 past the E4M3 maximum 448 saturates), blocks below the
//     amax floor 6·2^-9, zeros inside blocks and all-zero blocks, amax exactly 6·(an E4M3 value) with exact
//     midpoints of the E2M1 grid times the scale (ties to even), ragged last blocks.
//   candidate_blocks: block_max → topk → mask_scores against dsv41_candidate_blocks: block maxima and masked
//     scores bit-exact, the block picks and the index picks (kernels::topk over the masked scores vs cmfx::topk
//     over the CPU-masked row, −inf picks dropped) equal in order; then mask_scores with the same blk / idx over a
//     second score array (a layer that reuses the candidates) bit-exact against the CPU's masking. Inputs:
//     exact ties of block maxima (quantised scores), −inf blocks (fewer reachable blocks than topk_blocks), NaN
//     and zero entries, ragged n, per-row lengths.
//   engram_gather: bit-exact against cmfx::engram_gather (model/engram.hpp) on fresh random tables: E4M3 bytes
//     uniform over all codes but the NaN codes 0x7F / 0xFF, UE8M0 scales 2^-40 … 2^+10 with a quarter of them
//     2^-127 … 2^-115 (products below 2^-126: the f32-subnormal + bf16 double rounding, counted in the info);
//     a token with an out-of-range id must be NaN over its whole E row (the CPU throws for it), the others exact.
//   engram_gate_add: X and the gates against cmfx::engram_gate_add per token (f64 sums, exp in double): gates
//     |Δ| ≤ 2^-22 (1–2 f32 ulp; a double result within ~1e-15 of an f32 rounding edge may round the other way)
//     or 1e-5 without f64; X NMSE ≤ 1e-12 (1e-9 without f64) and max-abs ≤ 1e-5·max(1, max|X|). Image tokens:
//     X bit-identical to the input and gate 0; a copy with qk = 0 takes the clamp (gate σ(sqrt(clamp))).
#include <bit>
#include <cmath>
#include <limits>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/exmy.hpp"
#include "cmfx/model/engram.hpp"
#include "cmfx/ops/fake_quant.hpp"
#include "cmfx/ops/topk.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "harness.hpp"
#include "model/dsv41_config.hpp"
#include "model/dsv41_internal.hpp"

namespace cmfx::parity {

namespace {

constexpr float ninf = -std::numeric_limits<float>::infinity();

std::string bits_differ(const float* got, const float* want, size_t n, const char* what) {
  for (size_t i = 0; i < n; ++i)
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]))
      return std::string(what) + " differs at " + std::to_string(i) + ": gpu " + std::to_string(got[i]) + ", cpu " +
             std::to_string(want[i]);
  return {};
}

std::string fp4_case(suite& s, uint64_t seed, uint32_t rows, uint32_t n, std::string& info) {
  const uint32_t block = driver::dsv41_kv_fp4_block;
  rng r(seed);
  std::vector<float> x = r.normal(uint64_t(rows) * n);
  const std::vector<double> e4 = ref::value_grid<e4m3>(), e2 = ref::value_grid<e2m1>();
  uint32_t n_floor = 0, n_sat = 0, n_tie = 0, n_zero = 0;
  for (uint32_t i = 0; i < rows; ++i)
    for (uint32_t b0 = 0; b0 < n; b0 += block) {
      const uint32_t len = std::min(block, n - b0);
      float* p = x.data() + uint64_t(i) * n + b0;
      const float mag = std::pow(10.0f, r.uniform(-5.0f, 4.5f));
      for (uint32_t j = 0; j < len; ++j) p[j] *= mag;
      const float u = r.uniform(0, 1);
      if (u < 0.15f) {  // amax = 6·sv exactly (sv an E4M3 value ≥ the floor's), E2M1 midpoints × sv
        const float sv = float(e4[40 + r.below(e4.size() - 41)]);
        float am = 0;
        for (uint32_t j = 0; j < len; ++j) am = std::max(am, std::fabs(p[j]));
        for (uint32_t j = 0; j < len; ++j) p[j] = 6.0f * sv * (p[j] / am) * 0.5f;
        const uint32_t at_max = uint32_t(r.below(len));
        p[at_max] = 6.0f * sv * (u < 0.07f ? -1.0f : 1.0f);
        for (uint32_t t = 0; t < std::min<uint32_t>(len, 8); ++t) {
          const size_t g = 1 + r.below(e2.size() - 1);
          const uint32_t j = uint32_t(r.below(len));
          if (j == at_max) continue;
          p[j] = float((e2[g - 1] + e2[g]) / 2.0 * double(sv)) * (r.below(2) ? -1.0f : 1.0f);
        }
        ++n_tie;
      } else if (u < 0.25f) {  // the whole block below the amax floor 6·2^-9
        for (uint32_t j = 0; j < len; ++j) p[j] = p[j] / mag * e2m1_e4m3_amax_floor * 1e-2f;
        ++n_floor;
      } else if (u < 0.30f) {  // all zero (amax → the floor)
        for (uint32_t j = 0; j < len; ++j) p[j] = (j & 1) ? -0.0f : 0.0f;
        ++n_zero;
      } else if (u < 0.40f) {  // amax / 6 past the E4M3 maximum: the scale saturates at 448
        for (uint32_t j = 0; j < len; ++j) p[j] = p[j] / mag * 3000.0f;
        ++n_sat;
      }
      for (uint32_t j = 0; j < len; ++j)  // zeros inside blocks
        if (r.below(8) == 0) p[j] = 0.0f;
    }
  guarded xg(s.dev, x.size() * 4);
  s.dev.upload(xg.payload(), x);
  gpu::commands c = s.dev.begin();
  s.kern.fake_quant(c, xg.payload(), rows, n, block, gpu::kernels::fq_format::e2m1_e4m3);
  s.submit(c);
  std::vector<float> got(x.size());
  std::string why;
  if (!xg.read(got.data(), why)) return why;
  std::vector<float> cpu = x, lib = x;
  for (uint32_t i = 0; i < rows; ++i) {
    driver::dsv41_fp4_e4m3_quant(std::span<float>(cpu.data() + uint64_t(i) * n, n), block);
    act_quant_e2m1_e4m3(std::span<float>(lib.data() + uint64_t(i) * n, n), block);
  }
  if (auto w = bits_differ(got.data(), cpu.data(), got.size(), "value"); !w.empty()) return w;
  if (auto w = bits_differ(lib.data(), cpu.data(), got.size(), "act_quant_e2m1_e4m3 vs dsv41_fp4_e4m3_quant");
      !w.empty())
    return w;
  info = "bit-exact vs dsv41_fp4_e4m3_quant; blocks: " + std::to_string(n_tie) + " tie, " + std::to_string(n_floor) +
         " floor, " + std::to_string(n_zero) + " zero, " + std::to_string(n_sat) + " saturated";
  return {};
}

struct cand_shape {
  uint32_t rows, n, bs, topk_blocks, index_topk;
  bool ties, neg_blocks, lens;
};

std::string cand_case(suite& s, uint64_t seed, const cand_shape& sh, std::string& info) {
  const uint32_t rows = sh.rows, n = sh.n, bs = sh.bs, nb = (n + bs - 1) / bs;
  rng r(seed);
  auto make_scores = [&] {
    std::vector<float> x = r.normal(uint64_t(rows) * n);
    for (float& v : x) {
      if (sh.ties) v = std::round(v * 4.0f) / 4.0f;  // a few dozen distinct values: exact ties of block maxima
      const uint64_t u = r.below(1000);
      if (u < 3) v = std::numeric_limits<float>::quiet_NaN();
      else if (u < 6) v = 0.0f;
      else if (u < 8) v = ninf;
    }
    if (sh.neg_blocks)  // whole blocks of −inf (NaN too): unreachable blocks whose picks are dropped
      for (uint32_t i = 0; i < rows; ++i)
        for (uint32_t b = 0; b < nb; ++b)
          if (r.below(3) == 0)
            for (uint32_t j = b * bs; j < std::min(n, (b + 1) * bs); ++j)
              x[uint64_t(i) * n + j] = r.below(4) ? ninf : std::numeric_limits<float>::quiet_NaN();
    return x;
  };
  const std::vector<float> x = make_scores(), x2 = make_scores();
  std::vector<uint32_t> lens(rows, n);
  if (sh.lens)
    for (uint32_t i = 0; i < rows; ++i) lens[i] = i == 0 ? n : uint32_t(r.below(n + 1));
  const gpu::buffer lb = upload(s.dev, lens);
  const gpu::view lv = sh.lens ? gpu::view(lb, 0, uint64_t(rows) * 4) : gpu::view();
  const uint32_t K = sh.topk_blocks, KI = sh.index_topk;
  guarded sg(s.dev, x.size() * 4), s2g(s.dev, x2.size() * 4), bg(s.dev, uint64_t(rows) * nb * 4),
      ig(s.dev, uint64_t(rows) * K * 4), pg(s.dev, uint64_t(rows) * KI * 4);
  s.dev.upload(sg.payload(), x);
  s.dev.upload(s2g.payload(), x2);
  gpu::commands c = s.dev.begin();
  s.kern.candidate_blocks(c, sg.payload(), rows, n, bs, K, bg.payload(), ig.payload(), lv);
  s.kern.topk(c, sg.payload(), rows, n, KI, pg.payload());
  s.kern.mask_scores(c, s2g.payload(), rows, n, bs, bg.payload(), ig.payload(), K, lv);
  const double ms = s.submit(c);
  std::vector<float> got(x.size()), got2(x2.size()), gblk(uint64_t(rows) * nb);
  std::vector<uint32_t> gidx(uint64_t(rows) * K), gpick(uint64_t(rows) * KI);
  std::string why;
  if (!sg.read(got.data(), why) || !s2g.read(got2.data(), why) || !bg.read(gblk.data(), why) ||
      !ig.read(gidx.data(), why) || !pg.read(gpick.data(), why))
    return why;
  uint64_t n_cand = 0, n_dropped = 0, n_tied = 0;
  for (uint32_t i = 0; i < rows; ++i) {
    const std::string at = "row " + std::to_string(i) + " (len " + std::to_string(lens[i]) + "): ";
    const uint32_t len = lens[i], nbr = (len + bs - 1) / bs;
    const float* xi = x.data() + uint64_t(i) * n;
    std::vector<uint8_t> mask;
    driver::dsv41_candidate_blocks(std::span<const float>(xi, len), K, bs, mask);
    // block maxima (the CPU function's rule, restated): max in order, newest block +inf, absent blocks −inf
    std::vector<float> blk(nb, ninf);
    for (uint32_t j = 0; j < len; ++j) blk[j / bs] = std::max(blk[j / bs], xi[j]);
    if (len) blk[nbr - 1] = std::numeric_limits<float>::infinity();
    if (auto w = bits_differ(gblk.data() + uint64_t(i) * nb, blk.data(), nb, "block max"); !w.empty()) return at + w;
    std::vector<float> sorted(blk.begin(), blk.begin() + nbr);
    std::sort(sorted.begin(), sorted.end());
    for (size_t b = 1; b < sorted.size(); ++b) n_tied += sorted[b] == sorted[b - 1] && std::isfinite(sorted[b]);
    // block picks: the finite / +inf ones equal cmfx::topk over the row's own blocks, in order
    std::vector<topk_entry> scratch(std::max<size_t>(nbr, len));
    std::vector<uint32_t> want(std::min(K, nbr));
    topk(std::span<const float>(blk.data(), nbr), want.size(), scratch, want);
    std::vector<uint32_t> wantv, gotv;
    for (uint32_t p : want) {
      if (blk[p] != ninf) wantv.push_back(p);
      else ++n_dropped;
    }
    for (uint32_t q = 0; q < K; ++q) {
      const uint32_t p = gidx[uint64_t(i) * K + q];
      if (p != 0xFFFFFFFFu && p < nb && blk[p] != ninf) gotv.push_back(p);
    }
    if (gotv != wantv)
      return at + "block picks differ (" + std::to_string(gotv.size()) + " vs " + std::to_string(wantv.size()) + ")";
    // masked scores, and the reusing layer's masked scores
    std::vector<float> want_s(xi, xi + n);
    std::vector<float> want_s2(x2.begin() + std::ptrdiff_t(i) * n, x2.begin() + std::ptrdiff_t(i + 1) * n);
    for (uint32_t j = 0; j < n; ++j)
      if (j >= len || !mask[j]) want_s[j] = want_s2[j] = ninf;
      else ++n_cand;
    if (auto w = bits_differ(got.data() + uint64_t(i) * n, want_s.data(), n, "masked score"); !w.empty())
      return at + w;
    if (auto w = bits_differ(got2.data() + uint64_t(i) * n, want_s2.data(), n, "reused mask"); !w.empty())
      return at + w;
    // index picks over the masked row (the V4.1 indexer: top-k, −inf picks dropped)
    std::vector<uint32_t> pk(std::min(KI, len));
    topk(std::span<const float>(want_s.data(), len), pk.size(), scratch, pk);
    std::erase_if(pk, [&](uint32_t j) { return want_s[j] == ninf; });
    std::vector<uint32_t> gp;
    for (uint32_t q = 0; q < KI; ++q) {
      const uint32_t j = gpick[uint64_t(i) * KI + q];
      if (j != 0xFFFFFFFFu && j < n && got[uint64_t(i) * n + j] != ninf) gp.push_back(j);
    }
    if (gp != pk)
      return at + "index picks differ (" + std::to_string(gp.size()) + " vs " + std::to_string(pk.size()) + ")";
  }
  char b[160];
  std::snprintf(b, sizeof b,
                "exact; %llu candidate entries, %llu dropped -inf picks, %llu tied block maxima; gpu %.1f ms",
                (unsigned long long)n_cand, (unsigned long long)n_dropped, (unsigned long long)n_tied, ms);
  info = b;
  return {};
}


struct gather_shape {
  uint32_t tokens, max_ngram, n_heads, head_dim, scale_block;  // cols = (max_ngram − 1)·n_heads
  uint64_t rows;
  int bad_token;  // −1: none; else this token gets one out-of-range id
};

std::string gather_case(suite& s, uint64_t seed, const gather_shape& sh, std::string& info) {
  engram_config cfg;
  cfg.max_ngram = sh.max_ngram;
  cfg.n_heads = sh.n_heads;
  cfg.head_dim = sh.head_dim;
  cfg.scale_block = sh.scale_block;
  const uint32_t cols = cfg.cols(), hd = sh.head_dim, T = sh.tokens;
  const uint64_t rows = sh.rows, spr = hd / sh.scale_block;
  rng r(seed);
  std::vector<uint8_t> data(rows * hd), scale(rows * spr);
  for (uint8_t& b : data) {
    b = uint8_t(r.below(256));
    if (e4m3::is_nan(b)) b = uint8_t(b - 1);  // 0x7F / 0xFF → 0x7E / 0xFE
  }
  for (uint8_t& k : scale)
    k = uint8_t(r.below(4) == 0 ? r.below(13) : 127 - 40 + r.below(51));  // 2^-127..2^-115 or 2^-40..2^10
  std::vector<int32_t> ids(uint64_t(T) * cols);
  for (int32_t& v : ids) v = int32_t(r.below(rows));
  if (sh.bad_token >= 0) {
    const uint64_t at = uint64_t(sh.bad_token) * cols + r.below(cols);
    ids[at] = (seed & 1) ? int32_t(rows) : -1 - int32_t(r.below(1000));
  }
  matrix_view tv;
  tv.data = data.data(), tv.data_bytes = data.size(), tv.scale = scale.data(), tv.scale_bytes = scale.size();
  tv.scale_enc = scale_encoding::e8m0, tv.rows = rows, tv.cols = hd;
  const uint64_t per = uint64_t(cols) * hd;
  std::vector<float> want(T * per);
  std::vector<bool> threw(T, false);
  for (uint32_t t = 0; t < T; ++t) {
    std::vector<int64_t> rid(ids.begin() + std::ptrdiff_t(t) * cols, ids.begin() + std::ptrdiff_t(t + 1) * cols);
    try {
      engram_gather(tv, cfg, rid, want.data() + t * per);
    } catch (const std::out_of_range&) {
      threw[t] = true;
    }
  }
  if (sh.bad_token >= 0 && !threw[uint32_t(sh.bad_token)]) return "the CPU accepted the out-of-range id";
  const gpu::buffer db = upload(s.dev, data), sb = upload(s.dev, scale), ib = upload(s.dev, ids);
  guarded eg(s.dev, T * per * 4);
  gpu::commands c = s.dev.begin();
  s.kern.engram_gather(c, db, sb, rows, hd, sh.scale_block, ib, T, cols, eg.payload());
  const double ms = s.submit(c);
  std::vector<float> got(T * per);
  std::string why;
  if (!eg.read(got.data(), why)) return why;
  uint64_t n_sub = 0, n_zero = 0;
  for (uint32_t t = 0; t < T; ++t) {
    const std::string at = "token " + std::to_string(t) + ": ";
    const float* g = got.data() + t * per;
    if (threw[t]) {
      for (uint64_t i = 0; i < per; ++i)
        if (!std::isnan(g[i]) || std::bit_cast<uint32_t>(g[i]) == guarded::nan_word)
          return at + "bad id: E[" + std::to_string(i) + "] not written as NaN";
      continue;
    }
    if (auto w = bits_differ(g, want.data() + t * per, per, "E"); !w.empty()) return at + w;
    for (uint64_t i = 0; i < per; ++i) {
      const float v = std::fabs(want[t * per + i]);
      n_sub += v != 0.0f && v < 0x1p-126f;
      n_zero += v == 0.0f;
    }
  }
  char b[160];
  std::snprintf(b, sizeof b, "bit-exact; %llu bf16-subnormal values, %llu zeros%s; gpu %.1f ms",
                (unsigned long long)n_sub, (unsigned long long)n_zero,
                sh.bad_token >= 0 ? ", bad-id token all NaN" : "", ms);
  info = b;
  return {};
}

struct gate_shape {
  uint32_t tokens, hc, d;
  int image_token;  // −1: none
  bool zero_qk;     // last copy's qk = 0: the clamp path
};

std::string gate_case(suite& s, uint64_t seed, const gate_shape& sh, std::string& info) {
  const uint32_t T = sh.tokens, hc = sh.hc, d = sh.d;
  const engram_config dflt;
  rng r(seed);
  std::vector<float> X = r.normal(uint64_t(T) * hc * d), kv = r.normal(uint64_t(T) * (hc + 1) * d, 0.7f);
  std::vector<float> qk = r.normal(uint64_t(hc) * d, 0.3f);
  for (float& v : qk) v += 1.0f;
  for (uint32_t t = 0; t < T; ++t)  // copy 1: key correlated with X (large |dot|: gates near 0 / 1)
    for (uint32_t i = 0; i < d && hc > 1; ++i) {
      float& k = kv[(uint64_t(t) * (hc + 1) + 1) * d + i];
      k = k * 0.2f + (t % 2 ? -3.0f : 3.0f) * X[(uint64_t(t) * hc + 1) * d + i];
    }
  for (uint32_t t = 0; t < T; ++t) {  // per-token magnitudes 1e-3 … 1e3
    const float m = std::pow(10.0f, r.uniform(-3.0f, 3.0f));
    for (uint32_t i = 0; i < hc * d; ++i) X[uint64_t(t) * hc * d + i] *= m;
  }
  if (sh.zero_qk)
    for (uint32_t i = 0; i < d; ++i) qk[uint64_t(hc - 1) * d + i] = 0.0f;
  std::vector<uint32_t> img(T, 0);
  if (sh.image_token >= 0) img[uint32_t(sh.image_token)] = 1;
  std::vector<float> want = X, wg(uint64_t(T) * hc);
  for (uint32_t t = 0; t < T; ++t) {
    const float* k = kv.data() + uint64_t(t) * (hc + 1) * d;
    const auto g = engram_gate_add(want.data() + uint64_t(t) * hc * d, k, k + uint64_t(hc) * d, qk.data(), hc, d,
                                   dflt.eps, dflt.gate_clamp, img[t] != 0);
    for (uint32_t c = 0; c < hc; ++c) wg[uint64_t(t) * hc + c] = g[c];
  }
  guarded xg(s.dev, X.size() * 4), gg(s.dev, wg.size() * 4);
  s.dev.upload(xg.payload(), X);
  const gpu::buffer kb = upload(s.dev, kv), qb = upload(s.dev, qk), ib = upload(s.dev, img);
  gpu::commands c = s.dev.begin();
  s.kern.engram_gate_add(c, xg.payload(), kb, qb, T, hc, d, dflt.eps, dflt.gate_clamp,
                         sh.image_token >= 0 ? gpu::view(ib) : gpu::view(), gg.payload());
  const double ms = s.submit(c);
  std::vector<float> got(X.size()), gotg(wg.size());
  std::string why;
  if (!xg.read(got.data(), why) || !gg.read(gotg.data(), why)) return why;
  const bool f64 = s.dev.info().float64;
  const double g_tol = f64 ? 0x1p-22 : 1e-5;
  double gmax = 0, gmin = 1, gerr = 0;
  for (uint32_t t = 0; t < T; ++t)
    for (uint32_t cc = 0; cc < hc; ++cc) {
      const float g = gotg[uint64_t(t) * hc + cc], w = wg[uint64_t(t) * hc + cc];
      const std::string at = "token " + std::to_string(t) + " copy " + std::to_string(cc) + ": ";
      if (img[t]) {
        if (std::bit_cast<uint32_t>(g) != 0u) return at + "image token gate not 0";
        continue;
      }
      if (!(std::fabs(double(g) - double(w)) <= g_tol))
        return at + "gate " + std::to_string(g) + " vs cpu " + std::to_string(w);
      gerr = std::max(gerr, std::fabs(double(g) - double(w)));
      gmax = std::max(gmax, double(w)), gmin = std::min(gmin, double(w));
    }
  if (sh.image_token >= 0) {
    const uint64_t o = uint64_t(sh.image_token) * hc * d;
    if (auto w = bits_differ(got.data() + o, X.data() + o, uint64_t(hc) * d, "image token X"); !w.empty()) return w;
  }
  const stats st = compare(got.data(), want.data(), got.size());
  std::string v = verdict(st, f64 ? 1e-12 : 1e-9, info);
  char b[160];
  std::snprintf(b, sizeof b, "; gate max|d| %.2e, gates %.4f..%.4f; gpu %.1f ms", gerr, gmin, gmax, ms);
  info += b;
  return v;
}

/// Records fn(commands) into a fresh recording (never submitted): true when it throws usage_error.
template <class Fn>
bool records_usage_error(suite& s, Fn&& fn) {
  gpu::commands c = s.dev.begin();
  try {
    fn(c);
  } catch (const usage_error&) {
    return true;
  }
  return false;
}

}  // namespace

void v41_cases(suite& s) {
  using R = std::string;
  auto fq = [&](uint32_t rows, uint32_t n, const R& note) {
    s.run("fp4_e4m3_quant", "-", std::to_string(rows) + "x" + std::to_string(n) + " block 16" + note,
          [=, &s](uint64_t seed, R& info) { return fp4_case(s, seed, rows, n, info); });
  };
  fq(1, 512, " (one KV entry)");
  fq(3, 512, "");
  fq(3, 1000, " ragged");
  fq(1, 7, " < one block");
  fq(64, 528, " many blocks");
  auto cb = [&](cand_shape sh, const R& note) {
    s.run("candidate_blocks", "-",
          std::to_string(sh.rows) + "x" + std::to_string(sh.n) + " bs " + std::to_string(sh.bs) + " top " +
              std::to_string(sh.topk_blocks) + note,
          [=, &s](uint64_t seed, R& info) { return cand_case(s, seed, sh, info); });
  };
  const uint32_t K = driver::dsv41_candidate_topk_blocks, BS = driver::dsv41_candidate_block_size;
  cb({1, 40000, BS, K, 512, false, false, false}, " (decode)");
  cb({3, 40003, BS, K, 512, true, false, false}, " ragged, tied maxima");
  cb({3, 1001, BS, K, 512, false, true, false}, " fewer blocks than top, -inf blocks");
  cb({3, 777, BS, 64, 100, true, true, false}, " ragged, ties, -inf blocks");
  cb({4, 5000, BS, 128, 256, true, false, true}, " per-row lengths");
  cb({2, 300, 5, 7, 20, true, true, true}, " bs 5, lengths");
  cb({1, 1u << 20, BS, K, 512, false, false, false}, " (1M entries)");
  auto eg = [&](gather_shape sh, const R& note) {
    s.run("engram_gather", "-",
          std::to_string(sh.tokens) + " tok x " + std::to_string((sh.max_ngram - 1) * sh.n_heads) + " cols x hd " +
              std::to_string(sh.head_dim) + note,
          [=, &s](uint64_t seed, R& info) { return gather_case(s, seed, sh, info); });
  };
  eg({1, 3, 4, 256, 32, 5000, -1}, " (one token, 2x4 cols)");
  eg({3, 3, 4, 256, 32, 5000, -1}, " 2x4 cols");
  eg({3, 4, 1, 256, 32, 777, -1}, " 3 cols");
  eg({3, 4, 1, 24, 8, 333, -1}, " ragged hd 24 / block 8");
  eg({1, 3, 4, 40, 20, 91, -1}, " ragged hd 40 / block 20");
  eg({3, 3, 4, 256, 32, 5000, 1}, " bad id in token 1");
  eg({3, 4, 1, 24, 8, 333, 2}, " ragged, bad id in token 2");
  auto ga = [&](gate_shape sh, const R& note) {
    s.run("engram_gate_add", "-",
          std::to_string(sh.tokens) + " tok hc " + std::to_string(sh.hc) + " d " + std::to_string(sh.d) + note,
          [=, &s](uint64_t seed, R& info) { return gate_case(s, seed, sh, info); });
  };
  ga({1, 4, 4096, -1, false}, " (decode)");
  ga({3, 4, 4096, 1, false}, " image token 1");
  ga({3, 4, 1000, -1, true}, " ragged, qk=0 copy (clamp)");
  ga({3, 4, 333, 0, true}, " ragged, image token 0, clamp");
  ga({2, 1, 77, -1, false}, " hc 1");
  s.run("candidate_blocks", "-", "refusals", [&s](uint64_t, R& info) -> R {
    guarded sg(s.dev, 64 * 4), bg(s.dev, 64 * 4), ig(s.dev, 64 * 4);
    const auto refused = [&](auto f) { return records_usage_error(s, f); };
    if (!refused([&](gpu::commands& c) { s.kern.block_max(c, sg.payload(), 1, 64, 0, bg.payload()); }))
      return "block size 0 accepted";
    if (!refused([&](gpu::commands& c) {
          s.kern.candidate_blocks(c, sg.payload(), 1, 64, 8, gpu::kernels::topk_max_k + 1, bg.payload(), ig.payload());
        }))
      return "topk_blocks > topk_max_k accepted";
    if (!refused([&](gpu::commands& c) { s.kern.block_max(c, sg.payload(), 1, 65 * 8, 8, bg.payload()); }))
      return "a short score view accepted";
    if (!refused([&](gpu::commands& c) {
          s.kern.mask_scores(c, sg.payload(), 1, 64, 1, bg.payload(), ig.payload(), 65);
        }))
      return "a short idx view accepted";
    info = "usage_error for bs 0, topk_blocks > 2048, short views";
    return {};
  });
  s.run("engram_gather", "-", "refusals", [&s](uint64_t, R& info) -> R {
    // A 4-row table of head_dim 32 (scale_block 16), 2 tokens × 2 ids; each call breaks one argument.
    guarded data(s.dev, 4 * 32), scale(s.dev, 4 * 2), ids(s.dev, 4 * 4), E(s.dev, 2 * 2 * 32 * 4);
    guarded X(s.dev, 2 * 4 * 64 * 4), kv(s.dev, 2 * 5 * 64 * 4), qk(s.dev, 4 * 64 * 4);
    const auto refused = [&](auto f) { return records_usage_error(s, f); };
    const auto gather = [&](uint32_t hd, uint32_t sb, uint32_t tokens) {
      return [&, hd, sb, tokens](gpu::commands& c) {
        s.kern.engram_gather(c, data.payload(), scale.payload(), 4, hd, sb, ids.payload(), tokens, 2, E.payload());
      };
    };
    if (refused(gather(32, 16, 2))) return "gather: the valid baseline call was refused";
    if (!refused(gather(32, 0, 2))) return "gather: scale_block 0 accepted";
    if (!refused(gather(32, 12, 2))) return "gather: a scale_block not dividing head_dim accepted";
    if (!refused(gather(32, 16, 3))) return "gather: more tokens than the ids and E views hold accepted";
    if (!refused(gather(64, 16, 2))) return "gather: a table view shorter than rows x head_dim accepted";
    const auto gate = [&](uint32_t hc, uint32_t d) {
      return [&, hc, d](gpu::commands& c) { s.kern.engram_gate_add(c, X.payload(), kv.payload(), qk.payload(), 2, hc, d, 1e-6f, 1e-6f); };
    };
    if (refused(gate(4, 64))) return "gate_add: the valid baseline call was refused";
    if (!refused(gate(17, 64))) return "gate_add: hc 17 accepted";
    if (!refused(gate(4, 0))) return "gate_add: d 0 accepted";
    if (!refused(gate(4, 65))) return "gate_add: views shorter than tokens x hc x d accepted";
    info = "usage_error for a bad scale block, short views, hc > 16, d 0";
    return {};
  });
}

}  // namespace cmfx::parity

// Routing cases: score routing (sqrt-softplus, biased top-k, normalised weights) and hash routing against the CPU
// ops (include/cmfx/ops/routing.hpp) and the float64 reference (ref::route_score / route_hash). Shapes: V4 (256
// experts, top-6), V4.1 (384 experts, gate_temp), k = n, ragged counts, heavy ties, top-64 of 4096.
//   scores s:  bit-exact with shaderFloat64 (double exp/log1p in GLSL); else within kRouteUlpF32 ulps;
//   selection: GPU ids == the CPU top-k of the GPU's own scores + bias, always (the selection logic is exact);
//              and == the CPU's ids, except where a score differs in its last bits and two biased scores tie
//              within that difference (reported as a near-tie; impossible when the scores are bit-exact);
//   weights:   per-output |w − ref| ≤ kRouteWRel · |ref| (k outputs per token: too few for NMSE).
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <tuple>

#include "cmfx/core/error.hpp"
#include "cmfx/formats/format_list.hpp"
#include "cmfx/ops/routing.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "harness.hpp"

namespace cmfx::parity {

namespace {

constexpr uint32_t kRouteUlpF32 = 8;  // f32 exp/log of the device (no f64): measured ≤ 2 on lavapipe
constexpr double kRouteWRel = 1e-6;   // f32 rounding of the weight is 6e-8

uint32_t ulp_diff(float a, float b) {
  if (a == b) return 0;
  const int64_t ia = std::bit_cast<int32_t>(a), ib = std::bit_cast<int32_t>(b);
  return uint32_t(std::min<int64_t>(std::llabs(ia - ib), 0x7FFFFFFF));
}

enum class logit_kind { normal, wide, ties };

std::vector<float> make_logits(rng& r, size_t n, logit_kind kind) {
  std::vector<float> z = r.normal(n, 2.0f);
  for (float& v : z) {
    if (kind == logit_kind::wide) {  // beyond softplus's threshold 20 and far below 0
      const float u = r.uniform(0, 1);
      if (u < 0.05f)
        v = r.uniform(18.0f, 40.0f);
      else if (u < 0.10f)
        v = r.uniform(-170.0f, -20.0f);  // down to scores near 2^-126 (e^z below the f32 range)
    }
    if (kind == logit_kind::ties) v = std::round(v * 2.0f) / 2.0f;  // few distinct values: ties everywhere
  }
  return z;
}

struct route_out {
  std::vector<float> s, w;
  std::vector<uint32_t> idx;
};

std::string read_route(guarded& sg, guarded& ig, guarded& wg, route_out& o) {
  std::string why;
  if (!sg.read(o.s.data(), why) || !ig.read(o.idx.data(), why) || !wg.read(o.w.data(), why)) return why;
  return {};
}

/// Checks one token's GPU result against the CPU op (ids, scores) and the float64 reference (weights).
std::string check_token(uint32_t t, const float* z, const float* gs, const uint32_t* gi, const float* gw,
                        const std::vector<float>& bias, uint32_t n, const route_config& cfg, bool f64,
                        const std::vector<uint32_t>* hash_ids, uint32_t& max_ulp, uint32_t& near_ties) {
  const std::string at = "token " + std::to_string(t) + ": ";
  std::vector<float> cs(n), cw(cfg.top_k);
  std::vector<uint32_t> ci(cfg.top_k);
  std::vector<topk_entry> scratch(n);
  const std::vector<float> logits(z, z + n);
  if (hash_ids) {
    ci = *hash_ids;
    ops_detail::route_scores(logits, cfg.temp, cs);
  } else {
    route_score(logits, bias.empty() ? nullptr : bias.data(), cfg, cs, scratch, ci, cw);
  }
  uint32_t mu = 0, we = 0;
  for (uint32_t e = 0; e < n; ++e)
    if (ulp_diff(gs[e], cs[e]) > mu) mu = ulp_diff(gs[e], cs[e]), we = e;
  max_ulp = std::max(max_ulp, mu);
  if (mu > (f64 ? 0u : kRouteUlpF32)) {
    char b[160];
    std::snprintf(b, sizeof b, "score of expert %u (z %.9g) differs by %u ulp (bound %u): gpu %.9g cpu %.9g", we,
                  double(z[we]), mu, f64 ? 0 : kRouteUlpF32, double(gs[we]), double(cs[we]));
    return at + b;
  }
  // the selection logic, exactly: the CPU's top-k of the GPU's own scores
  std::vector<uint32_t> own(cfg.top_k);
  if (hash_ids) {
    own = *hash_ids;
  } else {
    std::vector<float> sel(n);
    for (uint32_t e = 0; e < n; ++e) sel[e] = bias.empty() ? gs[e] : gs[e] + bias[e];
    own = ref::topk(sel, cfg.top_k);
  }
  for (uint32_t j = 0; j < cfg.top_k; ++j)
    if (gi[j] != own[j])
      return at + "slot " + std::to_string(j) + ": gpu id " + std::to_string(gi[j]) + ", top-k of the gpu scores " +
             std::to_string(own[j]);
  if (own != ci) {
    if (mu == 0) return at + "ids differ from the CPU's with bit-identical scores";
    ++near_ties;  // scores differ in their last bits and the biased scores tie within that difference
  }
  // weights vs float64 from the same ids and the CPU's f32 scores
  ref::routed rr;
  rr.s = cs;
  rr.ids = own;
  ref::routing_weights(rr, cfg.norm_eps, cfg.route_scale);
  for (uint32_t j = 0; j < cfg.top_k; ++j)
    if (!(std::fabs(double(gw[j]) - rr.w[j]) <= kRouteWRel * std::fabs(rr.w[j])))
      return at + "weight " + std::to_string(j) + ": gpu " + std::to_string(gw[j]) + ", ref " + std::to_string(rr.w[j]);
  return {};
}

std::string score_case(suite& s, uint64_t seed, uint32_t rows, uint32_t n, const route_config& cfg, bool with_bias,
                       logit_kind kind, std::string& info) {
  rng r(seed);
  const std::vector<float> z = make_logits(r, uint64_t(rows) * n, kind);
  std::vector<float> bias;
  if (with_bias) {
    bias = r.normal(n, 0.3f);
    if (kind == logit_kind::ties)
      for (float& b : bias) b = std::round(b * 4.0f) / 4.0f;
  }
  const gpu::buffer zb = upload(s.dev, z), bb = upload(s.dev, bias.empty() ? std::vector<float>{0} : bias);
  guarded sg(s.dev, uint64_t(rows) * n * 4), ig(s.dev, uint64_t(rows) * cfg.top_k * 4, 0xDEADBEEFu),
      wg(s.dev, uint64_t(rows) * cfg.top_k * 4);
  gpu::commands c = s.dev.begin();
  s.kern.route_score(c, zb, with_bias ? gpu::view(bb) : gpu::view(), rows, n, cfg, sg.payload(), ig.payload(),
                     wg.payload());
  s.submit(c);
  route_out o{std::vector<float>(uint64_t(rows) * n), std::vector<float>(uint64_t(rows) * cfg.top_k),
              std::vector<uint32_t>(uint64_t(rows) * cfg.top_k)};
  if (auto why = read_route(sg, ig, wg, o); !why.empty()) return why;
  uint32_t max_ulp = 0, near = 0;
  const bool f64 = s.dev.info().float64;
  for (uint32_t t = 0; t < rows; ++t) {
    const uint64_t k = cfg.top_k;
    if (auto why = check_token(t, z.data() + uint64_t(t) * n, o.s.data() + uint64_t(t) * n, o.idx.data() + t * k,
                               o.w.data() + t * k, bias, n, cfg, f64, nullptr, max_ulp, near);
        !why.empty())
      return why;
  }
  info = "ids exact, scores " + (max_ulp ? "<= " + std::to_string(max_ulp) + " ulp" : std::string("bit-exact")) +
         (near ? ", " + std::to_string(near) + " near-tie token(s)" : "") + (f64 ? " (f64)" : " (f32)");
  return {};
}

std::string hash_case(suite& s, uint64_t seed, uint32_t rows, uint32_t n, uint32_t vocab, const route_config& cfg,
                      std::string& info) {
  rng r(seed);
  const std::vector<float> z = make_logits(r, uint64_t(rows) * n, logit_kind::normal);
  std::vector<int32_t> table(uint64_t(vocab) * cfg.top_k);
  for (auto& v : table) v = int32_t(r.below(n));
  std::vector<uint32_t> tokens(rows);
  for (uint32_t t = 0; t < rows; ++t) tokens[t] = t == 0 ? vocab + 17 : uint32_t(r.below(vocab));  // one past V
  const gpu::buffer zb = upload(s.dev, z), tb = gpu::upload_tid2eid(s.dev, table, cfg.top_k, n),
                    kb = upload(s.dev, tokens);
  guarded sg(s.dev, uint64_t(rows) * n * 4), ig(s.dev, uint64_t(rows) * cfg.top_k * 4, 0xDEADBEEFu),
      wg(s.dev, uint64_t(rows) * cfg.top_k * 4);
  gpu::commands c = s.dev.begin();
  s.kern.route_hash(c, zb, tb, vocab, kb, rows, n, cfg, sg.payload(), ig.payload(), wg.payload());
  s.submit(c);
  route_out o{std::vector<float>(uint64_t(rows) * n), std::vector<float>(uint64_t(rows) * cfg.top_k),
              std::vector<uint32_t>(uint64_t(rows) * cfg.top_k)};
  if (auto why = read_route(sg, ig, wg, o); !why.empty()) return why;
  uint32_t max_ulp = 0, near = 0;
  for (uint32_t t = 0; t < rows; ++t) {
    const std::vector<float> logits(z.begin() + std::ptrdiff_t(t) * n, z.begin() + std::ptrdiff_t(t + 1) * n);
    std::vector<float> cs(n), cw(cfg.top_k);
    std::vector<uint32_t> ci(cfg.top_k);
    cmfx::route_hash(logits, std::span<const int32_t>(table), tokens[t], cfg, cs, ci, cw);  // the CPU op's ids
    const uint64_t k = cfg.top_k;
    for (uint32_t j = 0; j < k; ++j)
      if (o.idx[t * k + j] != ci[j])
        return "token " + std::to_string(t) + " slot " + std::to_string(j) + ": gpu id " +
               std::to_string(o.idx[t * k + j]) + ", cpu " + std::to_string(ci[j]);
    if (auto why = check_token(t, z.data() + uint64_t(t) * n, o.s.data() + uint64_t(t) * n, o.idx.data() + t * k,
                               o.w.data() + t * k, {}, n, cfg, s.dev.info().float64, &ci, max_ulp, near);
        !why.empty())
      return why;
  }
  info = "ids exact (token >= V clamped), scores " +
         (max_ulp ? "<= " + std::to_string(max_ulp) + " ulp" : std::string("bit-exact"));
  return {};
}

/// kernels::router_route (route.comp ROUTE_FUSED): two layers' router + routing of one token recorded back to back
/// (the arrival counter must return to 0 between them). Checks: each logits vector within the float64 product
/// (NMSE, max-abs), and ids and weights bit-identical to route_score / route_hash run on those logits (the routing
/// itself is route.comp's, covered above against the CPU). A shape it does not take returns false and records
/// nothing.
std::string router_case(suite& s, uint64_t seed, uint32_t n, uint64_t d, bool hash, format wf, std::string& info) {
  rng r(seed);
  route_config cfg;
  cfg.norm_eps = 1e-20f;
  const uint32_t k = cfg.top_k, vocab = 1000;
  std::vector<std::vector<float>> W(2), x(2);
  std::vector<gpu::gpu_matrix> gm;
  std::vector<gpu::buffer> xb;
  for (int l = 0; l < 2; ++l) {
    W[l] = r.normal(uint64_t(n) * d, float(2.0 / std::sqrt(double(d))));
    x[l] = r.normal(d);
    std::vector<uint8_t> bytes(W[l].size() * (wf == format::bf16 ? 2 : 4));
    for (size_t i = 0; i < W[l].size(); ++i) {
      if (wf == format::bf16) {  // W rounded to bf16 (to nearest, ties to even), its upper halves stored
        uint32_t u = std::bit_cast<uint32_t>(W[l][i]);
        u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
        W[l][i] = std::bit_cast<float>(u);
        std::memcpy(&bytes[i * 2], reinterpret_cast<const uint8_t*>(&u) + 2, 2);
      } else {
        std::memcpy(&bytes[i * 4], &W[l][i], 4);
      }
    }
    gm.push_back(gpu::upload_matrix(s.dev, wf, matrix_view{bytes.data(), bytes.size(), nullptr, 0,
                                                           scale_encoding::none, n, d}));
    xb.push_back(upload(s.dev, x[l]));
  }
  const std::vector<float> bias = r.normal(n, 0.3f);
  std::vector<int32_t> table(uint64_t(vocab) * k);
  for (auto& v : table) v = int32_t(r.below(n));
  const std::vector<uint32_t> token{uint32_t(r.below(vocab))};
  const gpu::buffer bb = upload(s.dev, bias), tb = gpu::upload_tid2eid(s.dev, table, k, n), kb = upload(s.dev, token);
  std::vector<guarded> zg, ig, wg, sg, ig2, wg2, sg2;
  for (int l = 0; l < 2; ++l) {
    zg.emplace_back(s.dev, uint64_t(n) * 4), ig.emplace_back(s.dev, k * 4, 0xDEADBEEFu), wg.emplace_back(s.dev, k * 4);
    ig2.emplace_back(s.dev, k * 4, 0xDEADBEEFu), wg2.emplace_back(s.dev, k * 4);
    sg.emplace_back(s.dev, uint64_t(n) * 4), sg2.emplace_back(s.dev, uint64_t(n) * 4);
  }
  const gpu::view bias_v = hash ? gpu::view() : gpu::view(bb), tab_v = hash ? gpu::view(tb) : gpu::view();
  gpu::commands c = s.dev.begin();
  for (int l = 0; l < 2; ++l)
    if (!s.kern.router_route(c, gm[l], xb[l], zg[l].payload(), bias_v, tab_v, vocab, kb, cfg, ig[l].payload(),
                             wg[l].payload(), sg[l].payload()))
      return "router_route did not take " + std::to_string(n) + " x " + std::to_string(d);
  if (c.dispatch_count() != 2) return std::to_string(c.dispatch_count()) + " dispatches for two tokens' routing (want 2)";
  for (int l = 0; l < 2; ++l) {  // the plain routing of the fused logits, for comparison
    if (hash)
      s.kern.route_hash(c, zg[l].payload(), tb, vocab, kb, 1, n, cfg, sg2[l].payload(), ig2[l].payload(),
                        wg2[l].payload());
    else
      s.kern.route_score(c, zg[l].payload(), bb, 1, n, cfg, sg2[l].payload(), ig2[l].payload(), wg2[l].payload());
  }
  s.submit(c);
  std::string worst;
  for (int l = 0; l < 2; ++l) {
    std::vector<float> z(n), w(k), w2(k), sc(n), sc2(n);
    std::vector<uint32_t> id(k), id2(k);
    std::string why;
    if (!zg[l].read(z.data(), why) || !ig[l].read(id.data(), why) || !wg[l].read(w.data(), why) ||
        !ig2[l].read(id2.data(), why) || !wg2[l].read(w2.data(), why) || !sg[l].read(sc.data(), why) ||
        !sg2[l].read(sc2.data(), why))
      return why;
    std::vector<double> ref(n);
    for (uint32_t e = 0; e < n; ++e) {
      double a = 0;
      for (uint64_t cc = 0; cc < d; ++cc) a += double(W[l][e * d + cc]) * double(x[l][cc]);
      ref[e] = a;
    }
    const std::string at = "layer " + std::to_string(l) + ": ";
    if (const std::string v = verdict(compare(z.data(), ref.data(), n), 1e-10, worst, 1e-5); !v.empty())
      return at + "logits vs float64: " + v;
    // every score from the finished logits (a routing that ran before some workgroup wrote its rows reads poison)
    for (uint32_t e = 0; e < n; ++e)
      if (std::bit_cast<uint32_t>(sc[e]) != std::bit_cast<uint32_t>(sc2[e]))
        return at + "score " + std::to_string(e) + ": fused " + std::to_string(sc[e]) + ", routed apart " +
               std::to_string(sc2[e]);
    for (uint32_t j = 0; j < k; ++j)
      if (id[j] != id2[j] || std::bit_cast<uint32_t>(w[j]) != std::bit_cast<uint32_t>(w2[j]))
        return at + "slot " + std::to_string(j) + ": fused id " + std::to_string(id[j]) + " w " + std::to_string(w[j]) +
               ", routed apart id " + std::to_string(id2[j]) + " w " + std::to_string(w2[j]);
  }
  // a router the fused mode does not take: false, nothing recorded
  const uint64_t d_odd = d + 2;
  const std::vector<float> Wo = r.normal(uint64_t(n) * d_odd), xo = r.normal(d_odd);
  const gpu::gpu_matrix go = gpu::upload_matrix(
      s.dev, format::f32,
      matrix_view{reinterpret_cast<const uint8_t*>(Wo.data()), Wo.size() * 4, nullptr, 0, scale_encoding::none, n, d_odd});
  const gpu::buffer xo_b = upload(s.dev, xo);
  gpu::commands c2 = s.dev.begin();
  if (s.kern.router_route(c2, go, xo_b, zg[0].payload(), bias_v, tab_v, vocab, kb, cfg, ig[0].payload(),
                          wg[0].payload()) ||
      c2.dispatch_count() != 0)
    return "router_route took " + std::to_string(d_odd) + " columns (not a multiple of 4)";
  info = "logits " + worst + "; scores, ids and weights the bits of route_" + (hash ? "hash" : "score") + " apart";
  return {};
}

}  // namespace

void route_cases(suite& s) {
  using R = std::string;
  auto sc = [&](uint32_t rows, uint32_t n, uint32_t k, float temp, float eps, bool bias, logit_kind kind,
                const R& note) {
    route_config cfg;
    cfg.top_k = k;
    cfg.temp = temp;
    cfg.norm_eps = eps;
    s.run("route_score", "-", std::to_string(rows) + "x" + std::to_string(n) + " k=" + std::to_string(k) + note,
          [=, &s](uint64_t seed, R& info) { return score_case(s, seed, rows, n, cfg, bias, kind, info); });
  };
  sc(4, 256, 6, 1.0f, 0.0f, true, logit_kind::normal, " V4 bias");
  sc(3, 384, 6, 1.0f, 1e-20f, true, logit_kind::normal, " V4.1 bias eps 1e-20");
  sc(3, 384, 6, 1.3f, 1e-20f, true, logit_kind::wide, " gate_temp 1.3, z beyond +-20");
  sc(2, 256, 6, 1.0f, 0.0f, false, logit_kind::wide, " no bias, z beyond +-20");
  sc(5, 100, 7, 1.0f, 0.0f, true, logit_kind::ties, " ragged, ties");
  sc(6, 37, 37, 1.0f, 0.0f, false, logit_kind::ties, " k=n, ties no bias");
  sc(1, 4096, 64, 1.0f, 0.0f, true, logit_kind::normal, " max size");
  s.run("route_hash", "-", "5x256 k=6 V=1000", [&](uint64_t seed, R& info) {
    route_config cfg;
    return hash_case(s, seed, 5, 256, 1000, cfg, info);
  });
  s.run("route_hash", "-", "3x384 k=6 V=129280 eps 1e-20", [&](uint64_t seed, R& info) {
    route_config cfg;
    cfg.norm_eps = 1e-20f;
    return hash_case(s, seed, 3, 384, 129280, cfg, info);
  });
  for (const auto& [n, d, hash, wf] :
       {std::tuple<uint32_t, uint64_t, bool, format>{256, 4096, false, format::f32}, {384, 4096, false, format::f32},
        {256, 4096, false, format::bf16}, {100, 1024, false, format::f32}, {256, 4096, true, format::f32},
        {384, 7168, true, format::bf16}, {64, 256, false, format::f32}, {8, 64, true, format::bf16}})
    s.run("router_route", "-",
          std::to_string(n) + "x" + std::to_string(d) + " " + std::string(format_name(wf)) +
              (hash ? " hash" : " score") + ", two layers in one recording",
          [&, n, d, hash, wf](uint64_t seed, R& info) { return router_case(s, seed, n, d, hash, wf, info); });
  s.run("route_hash", "-", "bad table rejected on upload", [&](uint64_t, R& info) -> R {
    const std::vector<int32_t> bad = {0, 1, 2, 7, 3, 256};  // 256 is not an expert of 256
    try {
      (void)gpu::upload_tid2eid(s.dev, bad, 3, 256);
    } catch (const usage_error& e) {
      info = e.what();
      return std::string(e.what()).find("entry 5") == std::string::npos ? "error does not name the entry" : "";
    }
    return "an out-of-range expert id was accepted";
  });
}

}  // namespace cmfx::parity

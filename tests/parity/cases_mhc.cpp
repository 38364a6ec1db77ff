// mHC cases (ops/mhc.hpp): the chain hc_mix → hc_pre_finish → hc_post (+ the next sublayer's mix) →
// hc_pre_finish, and hc_head, against the float64 references ref::hc_pre / hc_post / hc_head, per token.
// Shapes: V4 (hc 4, d 4096), hc_max = 8, ragged d (7, 300, 1000), 1–3 tokens; 20 Sinkhorn iterations and 1.
// Coefficients (pre, post, C: few outputs) and short outputs: per-output |got − ref| ≤ kHcRel · Σ|terms|
// (the magnitude of the sum that produced the output); y and X' over >= 64 outputs also NMSE ≤ kNmse.
#include "cmfx/core/error.hpp"
#include "cmfx/ops/mhc.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include <cstring>

#include "harness.hpp"

namespace cmfx::parity {

namespace {

constexpr double kHcRel = 2e-6;  // f32 outputs of double math (6e-8) and f32 folds of ≤ 9 terms

struct hc_params {
  std::vector<float> fn, base, scale;
};

hc_params make_params(rng& r, uint32_t rows, uint32_t n) {
  hc_params p;
  p.fn = r.normal(uint64_t(rows) * n, 1.0f / std::sqrt(float(n)));  // mixes of order 1
  p.base = r.normal(rows, 0.5f);
  p.scale = {r.uniform(0.5f, 2.0f), r.uniform(0.5f, 2.0f), r.uniform(0.5f, 2.0f)};
  return p;
}

/// Per-output bound check; mag[i] = Σ|terms| of output i.
std::string bounded(const char* what, const float* got, const std::vector<double>& ref, const std::vector<double>& mag,
                    double& worst) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double err = std::fabs(double(got[i]) - ref[i]);
    if (!(err <= kHcRel * std::max(mag[i], 1e-30))) {
      char b[160];
      std::snprintf(b, sizeof b, "%s[%zu]: gpu %.9g ref %.9g (bound %.2e)", what, i, double(got[i]), ref[i],
                    kHcRel * mag[i]);
      return b;
    }
    worst = std::max(worst, err / std::max(mag[i], 1e-30));
  }
  return {};
}

std::string read_all(std::initializer_list<std::pair<guarded*, void*>> outs) {
  std::string why;
  for (auto [g, p] : outs)
    if (!g->read(p, why)) return why;
  return {};
}

/// Checks coefficients (pre, post, C) and y of one token against ref::hc_pre.
std::string check_pre(const std::vector<float>& X, const hc_params& p, uint32_t hc, const gpu::kernels::hc_shape& sh,
                      const float* coeff, const float* y, double& worst, double& nmse) {
  const ref::hc_pre_out r = ref::hc_pre(X, p.fn, p.base, p.scale, hc, sh.norm_eps, sh.hc_eps, sh.iters);
  std::vector<double> want(r.pre), mag;
  want.insert(want.end(), r.post.begin(), r.post.end());
  want.insert(want.end(), r.C.begin(), r.C.end());
  for (double v : want) mag.push_back(std::max(std::fabs(v), 1.0));
  if (auto why = bounded("coeff", coeff, want, mag, worst); !why.empty()) return why;
  std::vector<double> ymag(sh.d, 0.0);
  for (uint32_t i = 0; i < sh.d; ++i)
    for (uint32_t j = 0; j < hc; ++j) ymag[i] += std::fabs(r.pre[j] * X[uint64_t(j) * sh.d + i]);
  if (auto why = bounded("y", y, r.y, ymag, worst); !why.empty()) return why;
  if (sh.d >= 64) {
    const stats st = compare(y, r.y.data(), sh.d);
    nmse = std::max(nmse, st.nmse);
    if (!(st.nmse <= kNmse)) return "y nmse " + std::to_string(st.nmse);
  }
  return {};
}

std::string chain_case(suite& s, uint64_t seed, uint32_t tokens, uint32_t hc, uint32_t d, uint32_t iters,
                       std::string& info) {
  rng r(seed);
  gpu::kernels::hc_shape sh;
  sh.hc = hc, sh.d = d, sh.iters = iters;
  const uint32_t rows = (2 + hc) * hc, n = hc * d, cf = gpu::kernels::hc_coeff_floats(hc);
  const std::vector<float> X = r.normal(uint64_t(tokens) * n), o = r.normal(uint64_t(tokens) * d);
  const hc_params p1 = make_params(r, rows, n), p2 = make_params(r, rows, n);
  const gpu::buffer xb = upload(s.dev, X), ob = upload(s.dev, o), fn1 = upload(s.dev, p1.fn),
                    b1 = upload(s.dev, p1.base), s1 = upload(s.dev, p1.scale), fn2 = upload(s.dev, p2.fn),
                    b2 = upload(s.dev, p2.base), s2 = upload(s.dev, p2.scale);
  const uint64_t pbytes = s.kern.hc_partials_bytes(sh, tokens, rows);
  guarded part1(s.dev, pbytes), part2(s.dev, pbytes), c1(s.dev, uint64_t(tokens) * cf * 4),
      y1(s.dev, uint64_t(tokens) * d * 4), xo(s.dev, uint64_t(tokens) * n * 4), c2(s.dev, uint64_t(tokens) * cf * 4),
      y2(s.dev, uint64_t(tokens) * d * 4);
  gpu::commands c = s.dev.begin();
  s.kern.hc_mix(c, sh, xb, fn1, rows, tokens, part1.payload());
  s.kern.hc_pre_finish(c, sh, part1.payload(), xb, b1, s1, tokens, c1.payload(), y1.payload());
  s.kern.hc_post(c, sh, ob, xb, c1.payload(), tokens, xo.payload(), fn2, rows, part2.payload());
  s.kern.hc_pre_finish(c, sh, part2.payload(), xo.payload(), b2, s2, tokens, c2.payload(), y2.payload());
  s.submit(c);
  const uint32_t dispatches = c.dispatch_count();
  std::vector<float> gc1(uint64_t(tokens) * cf), gy1(uint64_t(tokens) * d), gxo(uint64_t(tokens) * n),
      gc2(uint64_t(tokens) * cf), gy2(uint64_t(tokens) * d);
  std::vector<uint8_t> scratch(pbytes);
  if (auto why = read_all({{&part1, scratch.data()},
                           {&part2, scratch.data()},
                           {&c1, gc1.data()},
                           {&y1, gy1.data()},
                           {&xo, gxo.data()},
                           {&c2, gc2.data()},
                           {&y2, gy2.data()}});
      !why.empty())
    return why;
  double worst = 0, nmse = 0;
  for (uint32_t t = 0; t < tokens; ++t) {
    const std::string at = "token " + std::to_string(t) + ": ";
    const std::vector<float> Xt(X.begin() + std::ptrdiff_t(t) * n, X.begin() + std::ptrdiff_t(t + 1) * n);
    if (auto why = check_pre(Xt, p1, hc, sh, gc1.data() + t * cf, gy1.data() + uint64_t(t) * d, worst, nmse);
        !why.empty())
      return at + "pre 1: " + why;
    // post from the GPU's own f32 coefficients (the CPU passes its f32 post / C the same way)
    const float* cft = gc1.data() + t * cf;
    const std::vector<float> post(cft + hc, cft + 2 * hc), C(cft + 2 * hc, cft + cf);
    const std::vector<float> ot(o.begin() + std::ptrdiff_t(t) * d, o.begin() + std::ptrdiff_t(t + 1) * d);
    const std::vector<double> want = ref::hc_post(ot, Xt, post, C, hc);
    std::vector<double> mag(n, 0.0);
    for (uint32_t k = 0; k < hc; ++k)
      for (uint32_t i = 0; i < d; ++i) {
        double m = std::fabs(double(post[k]) * ot[i]);
        for (uint32_t j = 0; j < hc; ++j) m += std::fabs(double(C[j * hc + k]) * Xt[uint64_t(j) * d + i]);
        mag[uint64_t(k) * d + i] = m;
      }
    const float* xot = gxo.data() + uint64_t(t) * n;
    if (auto why = bounded("X'", xot, want, mag, worst); !why.empty()) return at + "post: " + why;
    const stats st = compare(xot, want.data(), n);
    nmse = std::max(nmse, st.nmse);
    if (!(st.nmse <= kNmse)) return at + "post nmse " + std::to_string(st.nmse);
    // the next sublayer's coefficients from the GPU's X' (mixed inside hc_post)
    const std::vector<float> Xn(xot, xot + n);
    if (auto why = check_pre(Xn, p2, hc, sh, gc2.data() + t * cf, gy2.data() + uint64_t(t) * d, worst, nmse);
        !why.empty())
      return at + "pre 2 (mix fused into hc_post): " + why;
  }
  char b[128];
  std::snprintf(b, sizeof b, "worst err/bound-scale %.1e, nmse %.1e, %u dispatches", worst, nmse, dispatches);
  info = b;
  return {};
}

std::string head_case(suite& s, uint64_t seed, uint32_t tokens, uint32_t hc, uint32_t d, std::string& info) {
  rng r(seed);
  gpu::kernels::hc_shape sh;
  sh.hc = hc, sh.d = d;
  const uint32_t n = hc * d, cf = gpu::kernels::hc_coeff_floats(hc);
  const std::vector<float> X = r.normal(uint64_t(tokens) * n);
  const hc_params p = make_params(r, hc, n);
  const float scale = p.scale[0];
  const gpu::buffer xb = upload(s.dev, X), fb = upload(s.dev, p.fn), bb = upload(s.dev, p.base);
  guarded part(s.dev, s.kern.hc_partials_bytes(sh, tokens, hc)), co(s.dev, uint64_t(tokens) * cf * 4),
      y(s.dev, uint64_t(tokens) * d * 4);
  gpu::commands c = s.dev.begin();
  s.kern.hc_mix(c, sh, xb, fb, hc, tokens, part.payload());
  s.kern.hc_head_finish(c, sh, part.payload(), xb, bb, scale, tokens, co.payload(), y.payload());
  s.submit(c);
  std::vector<float> gc(uint64_t(tokens) * cf), gy(uint64_t(tokens) * d);
  std::vector<uint8_t> scratch(s.kern.hc_partials_bytes(sh, tokens, hc));
  if (auto why = read_all({{&part, scratch.data()}, {&co, gc.data()}, {&y, gy.data()}}); !why.empty()) return why;
  double worst = 0;
  for (uint32_t t = 0; t < tokens; ++t) {
    const std::vector<float> Xt(X.begin() + std::ptrdiff_t(t) * n, X.begin() + std::ptrdiff_t(t + 1) * n);
    const ref::hc_pre_out rr = ref::hc_head(Xt, p.fn, p.base, scale, hc, sh.norm_eps, sh.hc_eps);
    std::vector<double> mag;
    for (double v : rr.pre) mag.push_back(std::max(std::fabs(v), 1.0));
    if (auto why = bounded("pre", gc.data() + t * cf, rr.pre, mag, worst); !why.empty()) return why;
    std::vector<double> ymag(d, 0.0);
    for (uint32_t i = 0; i < d; ++i)
      for (uint32_t j = 0; j < hc; ++j) ymag[i] += std::fabs(rr.pre[j] * Xt[uint64_t(j) * d + i]);
    if (auto why = bounded("y", gy.data() + uint64_t(t) * d, rr.y, ymag, worst); !why.empty()) return why;
  }
  char b[64];
  std::snprintf(b, sizeof b, "worst err/bound-scale %.1e", worst);
  info = b;
  return {};
}

}  // namespace

namespace {
/// hc_pre_finish / hc_head_finish with a norm weight == the same call without one followed by kernels::rmsnorm,
/// bit for bit (y and the coefficients), on fresh random inputs.
std::string fused_norm_case(suite& s, uint64_t seed, bool head, uint32_t tokens, uint32_t hc, uint32_t d,
                            std::string& info) {
  rng r(seed);
  gpu::kernels::hc_shape sh;
  sh.hc = hc, sh.d = d;
  const uint32_t rows = head ? hc : (2 + hc) * hc;
  const std::vector<float> X = r.normal(uint64_t(tokens) * hc * d), fn = r.normal(uint64_t(rows) * hc * d, 0.02f),
                           base = r.normal(rows, 0.1f), scale = {0.5f, 0.45f, 0.55f}, nw = r.normal(d, 0.1f);
  std::vector<float> nw1(nw);
  for (float& v : nw1) v += 1.0f;
  const gpu::buffer xb = upload(s.dev, X), fb = upload(s.dev, fn), bb = upload(s.dev, base),
                    sb = upload(s.dev, scale), nb = upload(s.dev, nw1),
                    pb = s.dev.alloc(s.kern.hc_partials_bytes(sh, tokens, rows));
  const uint64_t cf = uint64_t(tokens) * gpu::kernels::hc_coeff_floats(hc);
  guarded c1(s.dev, cf * 4), c2(s.dev, cf * 4), y1(s.dev, uint64_t(tokens) * d * 4), y2(s.dev, uint64_t(tokens) * d * 4);
  gpu::commands c = s.dev.begin();
  s.kern.hc_mix(c, sh, xb, fb, rows, tokens, pb);
  if (head) {
    s.kern.hc_head_finish(c, sh, pb, xb, bb, 0.7f, tokens, c1.payload(), y1.payload());
    s.kern.rmsnorm(c, y1.payload(), nb, y1.payload(), tokens, d, sh.norm_eps);
    s.kern.hc_head_finish(c, sh, pb, xb, bb, 0.7f, tokens, c2.payload(), y2.payload(), nb);
  } else {
    s.kern.hc_pre_finish(c, sh, pb, xb, bb, sb, tokens, c1.payload(), y1.payload());
    s.kern.rmsnorm(c, y1.payload(), nb, y1.payload(), tokens, d, sh.norm_eps);
    s.kern.hc_pre_finish(c, sh, pb, xb, bb, sb, tokens, c2.payload(), y2.payload(), nb);
  }
  s.submit(c);
  std::vector<float> a(uint64_t(tokens) * d), b(a.size()), ca(cf), cb(cf);
  std::string why;
  if (!y1.read(a.data(), why) || !y2.read(b.data(), why) || !c1.read(ca.data(), why) || !c2.read(cb.data(), why))
    return why;
  const uint64_t nc = head ? 0 : cf;  // hc_head_finish writes only pre (the first hc floats of each row)
  if (std::memcmp(ca.data(), cb.data(), nc * 4) != 0) return "coefficients differ";
  for (uint64_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0)
      return "y differs at " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
  info = "bit-identical to the unfused rmsnorm";
  return {};
}
/// The Sinkhorn apart: hc_pre_finish(..., false) and hc_sinkhorn recorded concurrently (fold: with
/// hc_pre_finish_fold) write, together, the coefficients and y of the whole hc_pre_finish bit for bit; and
/// hc_pre_finish(..., false) alone leaves C as it was (poisoned), hc_sinkhorn alone leaves pre/post and y.
std::string sinkhorn_apart_case(suite& s, uint64_t seed, bool fold, uint32_t tokens, uint32_t hc, uint32_t d,
                                std::string& info) {
  rng r(seed);
  gpu::kernels::hc_shape sh;
  sh.hc = hc, sh.d = d;
  const uint32_t rows = (2 + hc) * hc, stride = hc + 1;
  const std::vector<float> X = r.normal(uint64_t(tokens) * hc * d), fn = r.normal(uint64_t(rows) * hc * d, 0.02f),
                           base = r.normal(rows, 0.1f), scale = {0.5f, 0.45f, 0.55f}, nw = r.normal(d, 0.1f),
                           fw = r.normal(tokens * stride);
  const gpu::buffer xb = upload(s.dev, X), fb = upload(s.dev, fn), bb = upload(s.dev, base),
                    sb = upload(s.dev, scale), nb = upload(s.dev, nw), fdb = upload(s.dev, fw),
                    pb = s.dev.alloc(s.kern.hc_partials_bytes(sh, tokens, rows));
  const uint32_t per = gpu::kernels::hc_coeff_floats(hc);
  const uint64_t cf = uint64_t(tokens) * per, yn = uint64_t(tokens) * d;
  guarded c1(s.dev, cf * 4), c2(s.dev, cf * 4), c3(s.dev, cf * 4), c4(s.dev, cf * 4), y1(s.dev, yn * 4),
      y2(s.dev, yn * 4), y4(s.dev, yn * 4);
  auto pre = [&](gpu::commands& c, const gpu::view& co, const gpu::view& y, bool sinkhorn) {
    if (fold)
      s.kern.hc_pre_finish_fold(c, sh, pb, xb, bb, sb, tokens, co, fdb, stride, y, nb, sinkhorn);
    else
      s.kern.hc_pre_finish(c, sh, pb, xb, bb, sb, tokens, co, y, nb, sinkhorn);
  };
  gpu::commands c = s.dev.begin();
  s.kern.hc_mix(c, sh, xb, fb, rows, tokens, pb);
  pre(c, c1.payload(), y1.payload(), true);
  c.begin_concurrent();
  pre(c, c2.payload(), y2.payload(), false);
  s.kern.hc_sinkhorn(c, sh, pb, bb, sb, tokens, c2.payload());
  c.end_concurrent();
  s.kern.hc_sinkhorn(c, sh, pb, bb, sb, tokens, c3.payload());  // alone: C only
  pre(c, c4.payload(), y4.payload(), false);                     // alone: all but C
  s.submit(c);
  std::vector<float> a(cf), b(cf), b3(cf), b4(cf), ya(yn), yb(yn), y4v(yn);
  std::string why;
  if (!c1.read(a.data(), why) || !c2.read(b.data(), why) || !c3.read(b3.data(), why) || !c4.read(b4.data(), why) ||
      !y1.read(ya.data(), why) || !y2.read(yb.data(), why) || !y4.read(y4v.data(), why))
    return why;
  if (std::memcmp(a.data(), b.data(), cf * 4)) return "coefficients differ from the whole hc_pre_finish's";
  if (std::memcmp(ya.data(), yb.data(), yn * 4)) return "y differs from the whole hc_pre_finish's";
  if (std::memcmp(ya.data(), y4v.data(), yn * 4)) return "y of the part without the Sinkhorn differs";
  // each half alone writes only its own coefficients (guarded buffers start poisoned with NaN): C for
  // hc_sinkhorn, pre and post for hc_pre_finish(..., false) — so the two never write the same memory
  for (uint32_t t = 0; t < tokens; ++t)
    for (uint32_t i = 0; i < per; ++i) {
      const bool is_c = i >= 2 * hc;
      const uint64_t at = uint64_t(t) * per + i;
      const float v3 = b3[at], v4 = b4[at];
      if (is_c == std::isnan(v3) || (is_c && std::memcmp(&v3, &a[at], 4)))
        return "hc_sinkhorn alone: coefficient " + std::to_string(i) + " of token " + std::to_string(t) +
               (is_c ? " not the whole call's C" : " written (only C should be)");
      if (is_c != std::isnan(v4) || (!is_c && std::memcmp(&v4, &a[at], 4)))
        return "hc_pre_finish without the Sinkhorn: coefficient " + std::to_string(i) + " of token " +
               std::to_string(t) + (is_c ? " written (C is the Sinkhorn's)" : " not the whole call's");
    }
  info = "pre/post/y + C apart == the whole call, bit for bit";
  return {};
}
/// The boundary's int8 copy of y (hc_finish_args::y_q8: the finish quantises its normed y for the next products):
/// the bytes quantize_act(fmt, y) writes from the y the same call wrote, and y itself the bits of the call without
/// the copy. Both boundary finishes (the next site's pre, the head's); the two-dispatch fallback past the counters.
std::string post_finish_q8_case(suite& s, uint64_t seed, bool head, uint32_t tokens, uint32_t hc, uint32_t d, format f,
                                std::string& info) {
  rng r(seed);
  gpu::kernels::hc_shape sh;
  sh.hc = hc, sh.d = d;
  const uint32_t rows = head ? hc : (2 + hc) * hc, n = hc * d, per = gpu::kernels::hc_coeff_floats(hc);
  const uint64_t xn = uint64_t(tokens) * n, yn = uint64_t(tokens) * d, qb = gpu::kernels::act_q8_bytes(d, tokens);
  std::vector<float> c0(uint64_t(tokens) * per), nw = r.normal(d, 0.1f);
  for (float& v : c0) v = r.uniform(0.05f, 1.0f);
  for (float& v : nw) v += 1.0f;
  const gpu::buffer xb = upload(s.dev, r.normal(xn)), ob = upload(s.dev, r.normal(yn)),
                    fb = upload(s.dev, r.normal(uint64_t(rows) * n, 0.02f)), bb = upload(s.dev, r.normal(rows, 0.1f)),
                    sb = upload(s.dev, std::vector<float>{0.5f, 0.45f, 0.55f}), nb = upload(s.dev, nw);
  const uint64_t pbytes = s.kern.hc_partials_bytes(sh, tokens, rows);
  std::vector<guarded> co, xo, part, y;
  for (int i = 0; i < 2; ++i) {
    co.emplace_back(s.dev, c0.size() * 4), xo.emplace_back(s.dev, xn * 4), part.emplace_back(s.dev, pbytes);
    y.emplace_back(s.dev, yn * 4);
    s.dev.upload(co.back().payload(), c0.data(), c0.size() * 4);
  }
  guarded q8(s.dev, qb), ref(s.dev, qb);
  gpu::commands c = s.dev.begin();
  for (int i = 0; i < 2; ++i) {  // 0: plain; 1: with y's int8 copy
    gpu::kernels::hc_finish_args fin;
    fin.base = bb, fin.scale = sb, fin.head = head, fin.head_scale = 0.7f, fin.sinkhorn = false, fin.norm = nb;
    fin.y = y[size_t(i)].payload();
    if (i == 1) fin.y_q8 = q8.payload(), fin.y_q8_fmt = f;
    s.kern.hc_post_finish(c, sh, ob, xb, co[size_t(i)].payload(), tokens, xo[size_t(i)].payload(), fb, rows,
                          part[size_t(i)].payload(), fin);
  }
  const uint32_t disp = c.dispatch_count();
  c.barrier();
  s.kern.quantize_act(c, f, y[1].payload(), tokens, d, ref.payload());
  s.submit(c);
  const bool fallback = tokens > 2048;  // op_env::counter_slots / 4: post, finish (+ the quantisation)
  if (disp != (fallback ? 5u : 2u)) return std::to_string(disp) + " dispatches for the two boundaries";
  std::vector<float> y0(yn), y1(yn);
  std::vector<uint32_t> got(qb / 4), want(qb / 4);
  std::string why;
  if (!y[0].read(y0.data(), why) || !y[1].read(y1.data(), why) || !q8.read(got.data(), why) ||
      !ref.read(want.data(), why))
    return why;
  if (std::memcmp(y0.data(), y1.data(), yn * 4)) return "y with the int8 copy differs from y without it";
  for (uint64_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i])
      return "int8 copy word " + std::to_string(i) + " = " + std::to_string(got[i]) + ", quantize_act wrote " +
             std::to_string(want[i]);
  for (float v : y1)
    if (!std::isfinite(v)) return "y not finite";
  info = std::to_string(tokens) + " vector(s): the bytes of quantize_act" + (fallback ? " (two-dispatch fallback)" : "");
  return {};
}

/// A sublayer boundary in one dispatch (kernels::hc_post_finish: the finish in the last workgroup of each token)
/// == hc_post (or hc_mix without o) + hc_pre_finish / hc_head_finish, bit for bit: X', the partials, the
/// coefficients (rewritten in place, as the models do) and y. The fused call runs twice one after the other and
/// twice side by side in one concurrent group (they must take distinct arrival counters); then the whole recording
/// is submitted again, so every counter must be back at 0. More tokens than the counters take the two-dispatch
/// fallback (recorded outside the concurrent group, which refuses it). split_o: the sublayer output given as o and
/// o_add — the separate hc_post then gets o + o_add summed on the host, and hc_post with o_add must write the
/// same X' bit for bit. fold (V4.1's boundary): the finish is hc_pre_finish_fold's — the collapse weighted by the
/// pre of the coefficients the post read, the new coefficients written to a buffer of their own (coeff_out) and
/// the post's left as they were.
std::string post_finish_case(suite& s, uint64_t seed, bool post, bool head, bool sinkhorn, bool norm, uint32_t tokens,
                             uint32_t hc, uint32_t d, std::string& info, bool split_o = false, bool fold = false) {
  rng r(seed);
  gpu::kernels::hc_shape sh;
  sh.hc = hc, sh.d = d;
  const uint32_t rows = head ? hc : (2 + hc) * hc, n = hc * d, per = gpu::kernels::hc_coeff_floats(hc);
  const uint64_t cf = uint64_t(tokens) * per, xn = uint64_t(tokens) * n, yn = uint64_t(tokens) * d;
  const std::vector<float> X = r.normal(xn), o = r.normal(yn), fn = r.normal(uint64_t(rows) * n, 0.02f),
                           base = r.normal(rows, 0.1f), scale = {0.5f, 0.45f, 0.55f};
  std::vector<float> nw = r.normal(d, 0.1f), c0(cf);
  for (float& v : nw) v += 1.0f;
  for (float& v : c0) v = r.uniform(0.05f, 1.0f);  // pre, post, C of the previous site (read by the post)
  std::vector<float> o_add, o_sum = o;
  if (split_o) {
    o_add = r.normal(yn);
    for (uint64_t i = 0; i < yn; ++i) o_sum[i] = o[i] + o_add[i];
  }
  const gpu::buffer xb = upload(s.dev, X), ob = upload(s.dev, o), fb = upload(s.dev, fn), bb = upload(s.dev, base),
                    sb = upload(s.dev, scale), nb = upload(s.dev, nw), osb = upload(s.dev, o_sum),
                    oab = upload(s.dev, split_o ? o_add : o);
  const gpu::view oa = split_o ? gpu::view(oab) : gpu::view();
  guarded xadd(s.dev, xn * 4), padd(s.dev, s.kern.hc_partials_bytes(sh, tokens, rows)), cadd(s.dev, cf * 4);
  const uint64_t pbytes = s.kern.hc_partials_bytes(sh, tokens, rows);
  constexpr int runs = 5;  // 0: separate calls; 1, 2: fused, one after the other; 3, 4: fused side by side
  std::vector<guarded> part, co, xo, y, cout;  // cout: the finish's coefficients with fold
  for (int i = 0; i < runs; ++i) {
    part.emplace_back(s.dev, pbytes), co.emplace_back(s.dev, cf * 4), xo.emplace_back(s.dev, xn * 4);
    y.emplace_back(s.dev, yn * 4);
    s.dev.upload(co.back().payload(), c0.data(), cf * 4);
    if (fold) cout.emplace_back(s.dev, cf * 4);
  }
  // where run i's finish writes its coefficients
  const auto fin_coeff = [&](int i) -> guarded& { return fold ? cout[size_t(i)] : co[size_t(i)]; };
  gpu::kernels::hc_finish_args fin;
  fin.base = bb, fin.scale = sb, fin.head = head, fin.head_scale = 0.7f, fin.sinkhorn = sinkhorn;
  fin.norm = norm ? gpu::view(nb) : gpu::view();
  const gpu::view no;
  auto fused = [&](gpu::commands& c, int i) {
    gpu::kernels::hc_finish_args f = fin;
    f.y = y[i].payload();
    if (fold) f.fold = co[i].payload(), f.fold_stride = per, f.coeff_out = cout[i].payload();
    s.kern.hc_post_finish(c, sh, post ? gpu::view(ob) : no, xb, co[i].payload(), tokens, post ? xo[i].payload() : no,
                          fb, rows, part[i].payload(), f, oa);
  };
  gpu::commands c = s.dev.begin();
  if (fold) {  // a fold without its own coefficient output is refused (it would be the coefficients it rewrites)
    gpu::kernels::hc_finish_args f = fin;
    f.y = y[0].payload(), f.fold = co[0].payload(), f.fold_stride = per;
    bool threw = false;
    try {
      s.kern.hc_post_finish(c, sh, post ? gpu::view(ob) : no, xb, co[0].payload(), tokens,
                            post ? xo[0].payload() : no, fb, rows, part[0].payload(), f, oa);
    } catch (const usage_error&) {
      threw = true;
    }
    if (!threw) return "a fold without coeff_out was accepted";
  }
  const gpu::view x1 = post ? xo[0].payload() : gpu::view(xb);
  if (split_o) {  // hc_post with o_add alone, on a copy of the coefficients
    s.dev.upload(cadd.payload(), c0.data(), cf * 4);
    s.kern.hc_post(c, sh, ob, xb, cadd.payload(), tokens, xadd.payload(), fb, rows, padd.payload(), oa);
  }
  if (post)
    s.kern.hc_post(c, sh, split_o ? osb : ob, xb, co[0].payload(), tokens, xo[0].payload(), fb, rows, part[0].payload());
  else
    s.kern.hc_mix(c, sh, xb, fb, rows, tokens, part[0].payload());
  if (head)
    s.kern.hc_head_finish(c, sh, part[0].payload(), x1, bb, 0.7f, tokens, co[0].payload(), y[0].payload(), fin.norm);
  else if (fold)
    s.kern.hc_pre_finish_fold(c, sh, part[0].payload(), x1, bb, sb, tokens, cout[0].payload(), co[0].payload(), per,
                              y[0].payload(), fin.norm, sinkhorn);
  else
    s.kern.hc_pre_finish(c, sh, part[0].payload(), x1, bb, sb, tokens, co[0].payload(), y[0].payload(), fin.norm,
                         sinkhorn);
  fused(c, 1);
  fused(c, 2);
  const bool fallback = tokens > 2048;  // op_env::counter_slots / 4
  if (!fallback) c.begin_concurrent();
  fused(c, 3);
  fused(c, 4);
  if (!fallback) c.end_concurrent();
  auto compare_runs = [&]() -> std::string {
    std::vector<std::vector<uint8_t>> gp(runs, std::vector<uint8_t>(pbytes));
    std::vector<std::vector<float>> gc(runs, std::vector<float>(cf)), gx(runs, std::vector<float>(xn)),
        gy(runs, std::vector<float>(yn));
    for (int i = 0; i < runs; ++i) {
      std::string why;
      if (!part[i].read(gp[i].data(), why) || !fin_coeff(i).read(gc[i].data(), why) || !y[i].read(gy[i].data(), why) ||
          !xo[i].read(gx[i].data(), why))
        return "run " + std::to_string(i) + ": " + why;
      if (fold) {  // the post's coefficients are the fold's weights: read, never written
        std::vector<float> kept(cf);
        if (!co[i].read(kept.data(), why)) return "run " + std::to_string(i) + ": " + why;
        if (std::memcmp(kept.data(), c0.data(), cf * 4)) return "run " + std::to_string(i) + ": coeff rewritten";
      }
    }
    for (int i = 1; i < runs; ++i) {
      const std::string at = "fused run " + std::to_string(i) + ": ";
      if (std::memcmp(gp[i].data(), gp[0].data(), pbytes)) return at + "partials differ from hc_post's";
      if (post && std::memcmp(gx[i].data(), gx[0].data(), xn * 4)) return at + "X' differs from hc_post's";
      for (uint64_t k = 0; k < cf; ++k)
        if (std::memcmp(&gc[i][k], &gc[0][k], 4))
          return at + "coefficient " + std::to_string(k % per) + " of token " + std::to_string(k / per) + ": " +
                 std::to_string(gc[i][k]) + " vs " + std::to_string(gc[0][k]);
      for (uint64_t k = 0; k < yn; ++k)
        if (std::memcmp(&gy[i][k], &gy[0][k], 4))
          return at + "y[" + std::to_string(k) + "] " + std::to_string(gy[i][k]) + " vs " + std::to_string(gy[0][k]);
    }
    // the finish ran at all: y is finite and the coefficients it writes moved off their initial values
    for (float v : gy[1])
      if (!std::isfinite(v)) return "y not finite";
    if (std::memcmp(gc[1].data(), c0.data(), hc * 4) == 0) return "pre left as it was: did the finish run?";
    for (uint64_t k = 0; k < cf; ++k)  // every coefficient written (with fold: into the poisoned coeff_out)
      if (!std::isfinite(gc[1][k]) && (sinkhorn || head || k % per < 2 * hc))
        return "coefficient " + std::to_string(k % per) + " of token " + std::to_string(k / per) + " not finite";
    return {};
  };
  s.submit(c);
  if (auto why = compare_runs(); !why.empty()) return why;
  if (split_o) {
    std::vector<float> a(xn), b(xn);
    std::string why;
    if (!xadd.read(a.data(), why) || !xo[0].read(b.data(), why)) return why;
    if (std::memcmp(a.data(), b.data(), xn * 4)) return "hc_post with o_add: X' differs from hc_post of o + o_add";
  }
  // The same recording again (as the models resubmit theirs): the counters it uses must be back at 0.
  const std::vector<uint32_t> poison(yn, guarded::nan_word);
  for (int i = 0; i < runs; ++i) {
    s.dev.upload(co[i].payload(), c0.data(), cf * 4);
    s.dev.upload(y[i].payload(), poison.data(), yn * 4);
    if (fold) s.dev.upload(cout[i].payload(), std::vector<uint32_t>(cf, guarded::nan_word).data(), cf * 4);
  }
  s.submit(c);
  if (auto why = compare_runs(); !why.empty()) return "resubmitted: " + why;
  info = "bit-identical to the separate dispatches (" + std::to_string(tokens) + " token(s), 4 fused runs" +
         (fallback ? " through the two-dispatch fallback" : "") + ", submitted twice" +
         (split_o ? "; o + o_add as the host's sum" : "") + (fold ? "; folded by the post's pre" : "") + ")";
  return {};
}
/// V4.1's lagged collapse: hc_pre_finish_fold writes the coefficients hc_pre_finish writes (bit for bit) and
/// collapses with the given weights; hc_fold's y == hc_pre_finish_fold's y (bit for bit), and without a norm ==
/// ops_detail::hc_fold on the CPU within f32 rounding (bit-equal unless the device contracts into FMAs); the
/// normed y against float64.
std::string fold_case(suite& s, uint64_t seed, uint32_t tokens, uint32_t hc, uint32_t d, std::string& info) {
  rng r(seed);
  gpu::kernels::hc_shape sh;
  sh.hc = hc, sh.d = d, sh.norm_eps = 1e-20f;  // V4.1's eps
  const uint32_t rows = (2 + hc) * hc, stride = hc + 3;
  const std::vector<float> X = r.normal(uint64_t(tokens) * hc * d), fn = r.normal(uint64_t(rows) * hc * d, 0.02f),
                           base = r.normal(rows, 0.1f), scale = {0.5f, 0.45f, 0.55f}, fold = r.normal(tokens * stride);
  std::vector<float> nw = r.normal(d, 0.1f);
  for (float& v : nw) v += 1.0f;
  const gpu::buffer xb = upload(s.dev, X), fb = upload(s.dev, fn), bb = upload(s.dev, base),
                    sb = upload(s.dev, scale), nb = upload(s.dev, nw), fdb = upload(s.dev, fold),
                    pb = s.dev.alloc(s.kern.hc_partials_bytes(sh, tokens, rows));
  const uint64_t cf = uint64_t(tokens) * gpu::kernels::hc_coeff_floats(hc), yb = uint64_t(tokens) * d * 4;
  guarded c1(s.dev, cf * 4), c2(s.dev, cf * 4), y1(s.dev, yb), y2(s.dev, yb), y3(s.dev, yb), y4(s.dev, yb);
  gpu::commands c = s.dev.begin();
  s.kern.hc_mix(c, sh, xb, fb, rows, tokens, pb);
  s.kern.hc_pre_finish_fold(c, sh, pb, xb, bb, sb, tokens, c1.payload(), fdb, stride, y1.payload(), nb);
  s.kern.hc_pre_finish(c, sh, pb, xb, bb, sb, tokens, c2.payload(), y2.payload(), nb);
  s.kern.hc_fold(c, sh, xb, fdb, stride, tokens, y3.payload(), nb);
  s.kern.hc_fold(c, sh, xb, fdb, stride, tokens, y4.payload());
  s.submit(c);
  std::vector<float> a(uint64_t(tokens) * d), b3(a.size()), b4(a.size()), ca(cf), cb(cf), y2v(a.size());
  std::string why;
  if (!y1.read(a.data(), why) || !y2.read(y2v.data(), why) || !y3.read(b3.data(), why) || !y4.read(b4.data(), why) ||
      !c1.read(ca.data(), why) || !c2.read(cb.data(), why))
    return why;
  if (std::memcmp(ca.data(), cb.data(), cf * 4) != 0) return "coefficients differ from hc_pre_finish's";
  if (std::memcmp(a.data(), b3.data(), a.size() * 4) != 0) return "hc_fold's y differs from hc_pre_finish_fold's";
  if (std::memcmp(a.data(), y2v.data(), a.size() * 4) == 0) return "the fold weights had no effect";
  double nm_num = 0, nm_den = 0;
  uint64_t inexact = 0;
  for (uint32_t t = 0; t < tokens; ++t) {
    std::vector<float> yc(d);
    ops_detail::hc_fold(std::span<const float>(X.data() + uint64_t(t) * hc * d, uint64_t(hc) * d),
                        fold.data() + t * stride, hc, d, yc);
    // The same f32 operations in the same order as the CPU; a device may still contract them into FMAs (NVIDIA
    // does despite `precise`), so the bound is the f32 rounding of the hc terms, not bit equality.
    for (uint32_t i = 0; i < d; ++i) {
      double mag = 0;
      for (uint32_t j = 0; j < hc; ++j) mag += std::fabs(double(fold[t * stride + j]) * double(X[(uint64_t(t) * hc + j) * d + i]));
      const double err = std::fabs(double(b4[uint64_t(t) * d + i]) - double(yc[i]));
      if (!(err <= kHcRel * std::max(mag, 1e-30)))
        return "unnormed y[" + std::to_string(t) + "," + std::to_string(i) + "] " + std::to_string(b4[uint64_t(t) * d + i]) +
               " vs CPU " + std::to_string(yc[i]) + " beyond the f32 rounding bound";
      if (std::memcmp(&yc[i], &b4[uint64_t(t) * d + i], 4) != 0) ++inexact;
    }
    double ss = 0;
    for (uint32_t i = 0; i < d; ++i) {
      double v = 0;
      for (uint32_t j = 0; j < hc; ++j) v += double(fold[t * stride + j]) * double(X[(uint64_t(t) * hc + j) * d + i]);
      ss += v * v;
    }
    const double rr = 1.0 / std::sqrt(ss / d + 1e-20);
    for (uint32_t i = 0; i < d; ++i) {
      double v = 0;
      for (uint32_t j = 0; j < hc; ++j) v += double(fold[t * stride + j]) * double(X[(uint64_t(t) * hc + j) * d + i]);
      const double want = v * rr * double(nw[i]), e = double(a[uint64_t(t) * d + i]) - want;
      nm_num += e * e, nm_den += want * want;
    }
  }
  const double nmse = nm_num / std::max(nm_den, 1e-300);
  if (!(nmse <= 1e-12)) return "normed y NMSE " + std::to_string(nmse) + " > 1e-12";
  char bf[128];
  std::snprintf(bf, sizeof bf, "coeff/y bit-identical, CPU fold: %llu of %llu not bit-equal, normed NMSE %.1e",
                (unsigned long long)inexact, (unsigned long long)a.size(), nmse);
  info = bf;
  return {};
}
/// mHC blocks of several tokens (matvec_tuning::hc_tokens, mhc_block.comp HC_TOK): hc_mix and hc_post with the next
/// mix write the same X' and partials, bit for bit, as with one token per workgroup (the chain cases above check
/// that one against float64); token counts that leave a ragged last block.
std::string token_blocks_case(suite& s, uint64_t seed, uint32_t tokens, uint32_t hc, uint32_t d, uint32_t tok,
                              std::string& info) {
  rng r(seed);
  gpu::kernels::hc_shape sh;
  sh.hc = hc, sh.d = d;
  const uint32_t rows = (2 + hc) * hc, n = hc * d, cf = gpu::kernels::hc_coeff_floats(hc);
  const std::vector<float> X = r.normal(uint64_t(tokens) * n), o = r.normal(uint64_t(tokens) * d),
                           co = r.normal(uint64_t(tokens) * cf, 0.5f);
  const hc_params p = make_params(r, rows, n);
  const gpu::buffer xb = upload(s.dev, X), ob = upload(s.dev, o), cb = upload(s.dev, co), fb = upload(s.dev, p.fn);
  const uint64_t pbytes = s.kern.hc_partials_bytes(sh, tokens, rows), xbytes = uint64_t(tokens) * n * 4;
  struct restore {
    gpu::kernels& k;
    ~restore() { k.set_tuning({}); }
  } back{s.kern};
  std::vector<uint8_t> got[2][3];  // [1 token, tok tokens][mix partials, post partials, X']
  for (int pass = 0; pass < 2; ++pass) {
    gpu::matvec_tuning t;
    t.hc_tokens = pass == 0 ? 1 : tok;
    s.kern.set_tuning(t);
    guarded pm(s.dev, pbytes), pp(s.dev, pbytes), xo(s.dev, xbytes);
    gpu::commands c = s.dev.begin();
    s.kern.hc_mix(c, sh, xb, fb, rows, tokens, pm.payload());
    s.kern.hc_post(c, sh, ob, xb, cb, tokens, xo.payload(), fb, rows, pp.payload());
    s.submit(c);
    got[pass][0].resize(pbytes), got[pass][1].resize(pbytes), got[pass][2].resize(xbytes);
    if (auto why = read_all({{&pm, got[pass][0].data()}, {&pp, got[pass][1].data()}, {&xo, got[pass][2].data()}});
        !why.empty())
      return (pass ? "blocks of " + std::to_string(tok) + ": " : std::string("one token: ")) + why;
  }
  static const char* const what[3] = {"hc_mix's partials", "hc_post's partials", "hc_post's X'"};
  for (int i = 0; i < 3; ++i)
    if (std::memcmp(got[0][i].data(), got[1][i].data(), got[0][i].size()) != 0)
      return std::string(what[i]) + " differ between one token and " + std::to_string(tok) + " per workgroup";
  if (std::memcmp(got[0][0].data(), got[0][1].data(), pbytes) == 0) return "hc_post's partials equal hc_mix's: no post";
  info = "X' and partials bit-identical, " + std::to_string(tok) + " tokens per workgroup";
  return {};
}
}  // namespace

void mhc_cases(suite& s) {
  for (auto [tokens, hc, d] : {std::array<uint32_t, 3>{1, 4, 5120}, {3, 4, 300}, {2, 8, 64}, {2, 3, 7}})
    s.run("hc_fold", "-", std::to_string(tokens) + "x hc " + std::to_string(hc) + " d " + std::to_string(d),
          [=, &s](uint64_t seed, std::string& info) { return fold_case(s, seed, tokens, hc, d, info); });
  using R = std::string;
  for (auto [tokens, hc, d] : {std::array<uint32_t, 3>{1, 4, 4096}, {3, 4, 300}, {2, 8, 64}}) {
    const R name = std::to_string(tokens) + "x hc " + std::to_string(hc) + " d " + std::to_string(d) + " + fused norm";
    s.run("hc_pre/post", "-", name, [=, &s](uint64_t seed, R& info) { return fused_norm_case(s, seed, false, tokens, hc, d, info); });
    s.run("hc_head", "-", name, [=, &s](uint64_t seed, R& info) { return fused_norm_case(s, seed, true, tokens, hc, d, info); });
  }
  for (auto [tokens, hc, d] : {std::array<uint32_t, 3>{1, 4, 4096}, {3, 4, 300}, {2, 2, 64}})
    for (bool fold : {false, true})
      s.run("hc_pre/post", "-",
            std::to_string(tokens) + "x hc " + std::to_string(hc) + " d " + std::to_string(d) + " Sinkhorn apart" +
                (fold ? " (fold)" : ""),
            [=, &s](uint64_t seed, R& info) { return sinkhorn_apart_case(s, seed, fold, tokens, hc, d, info); });
  auto chain = [&](uint32_t tokens, uint32_t hc, uint32_t d, uint32_t iters, const R& note) {
    s.run("hc_pre/post", "-",
          std::to_string(tokens) + "x hc " + std::to_string(hc) + " d " + std::to_string(d) + " iters " +
              std::to_string(iters) + note,
          [=, &s](uint64_t seed, R& info) { return chain_case(s, seed, tokens, hc, d, iters, info); });
  };
  for (auto [tokens, hc, d, tok] :
       {std::array<uint32_t, 4>{20, 4, 4096, 8}, {13, 4, 300, 8}, {5, 8, 64, 3}, {9, 2, 7, 4}, {2049, 2, 7, 64}})
    s.run("hc_post", "-",
          std::to_string(tokens) + "x hc " + std::to_string(hc) + " d " + std::to_string(d) + " in blocks of " +
              std::to_string(tok) + " tokens",
          [=, &s](uint64_t seed, R& info) { return token_blocks_case(s, seed, tokens, hc, d, tok, info); });
  for (auto [tokens, hc, d] : {std::array<uint32_t, 3>{1, 4, 4096}, {3, 4, 300}, {2, 8, 64}, {1, 2, 7}, {2049, 2, 7}})
    for (int mode = 0; mode < 5; ++mode) {
      if (tokens > 2048 && mode != 0) continue;  // the fallback once
      // post + pre (Sinkhorn apart, norm: the models' decode), post + pre (whole), mix + pre, post + head (norm),
      // post + pre without a norm
      const bool post = mode != 2, head = mode == 3, sinkhorn = mode == 1 || mode == 2, norm = mode != 4;
      static const char* const names[5] = {"post + pre (Sinkhorn apart, norm)", "post + pre", "mix + pre",
                                           "post + head (norm)", "post + pre (Sinkhorn apart, no norm)"};
      s.run("hc_post_finish", "-",
            std::to_string(tokens) + "x hc " + std::to_string(hc) + " d " + std::to_string(d) + " " + names[mode],
            [=, &s](uint64_t seed, R& info) {
              return post_finish_case(s, seed, post, head, sinkhorn, norm, tokens, hc, d, info);
            });
    }
  // the MoE's shared expert apart added by the boundary (o_add): decode, several tokens, the fallback
  for (auto [tokens, hc, d] : {std::array<uint32_t, 3>{1, 4, 4096}, {3, 4, 300}, {2049, 2, 7}})
    s.run("hc_post_finish", "-",
          std::to_string(tokens) + "x hc " + std::to_string(hc) + " d " + std::to_string(d) +
              " post + pre (Sinkhorn apart, norm), o + o_add",
          [=, &s](uint64_t seed, R& info) {
            return post_finish_case(s, seed, true, false, false, true, tokens, hc, d, info, true);
          });
  // y's int8 copy written by the finish (the decode's boundary before the attention projections and the head)
  for (auto [tokens, hc, d, head, fi] : {std::array<uint32_t, 5>{1, 4, 4096, 0, 0}, {1, 4, 4096, 1, 0}, {3, 4, 288, 0, 1},
                                        {2, 8, 64, 0, 2}, {2049, 2, 64, 0, 0}}) {
    const format f = fi == 0 ? format::q4tp : fi == 1 ? format::q2tp : format::mxfp4;
    if (!s.kern.has_i8(f)) continue;
    s.run("hc_post_finish", "-",
          std::to_string(tokens) + "x hc " + std::to_string(hc) + " d " + std::to_string(d) +
              (head ? " post + head (norm)" : " post + pre (Sinkhorn apart, norm)") + ", y's int8 copy for " +
              std::string(format_name(f)),
          [=, &s](uint64_t seed, R& info) { return post_finish_q8_case(s, seed, head, tokens, hc, d, f, info); });
  }
  // V4.1's boundary: the collapse folded by the post's pre, the coefficients into their own buffer (decode: the
  // Sinkhorn apart with the norm; the whole finish without; the first mix; the fallback)
  for (auto [tokens, hc, d, mode] : {std::array<uint32_t, 4>{1, 4, 5120, 0}, {3, 4, 300, 1}, {2, 8, 64, 2},
                                     {1, 2, 7, 0}, {2049, 2, 7, 0}})
    s.run("hc_post_finish", "-",
          std::to_string(tokens) + "x hc " + std::to_string(hc) + " d " + std::to_string(d) +
              (mode == 0 ? " post + pre folded (Sinkhorn apart, norm)"
                         : mode == 1 ? " post + pre folded, no norm" : " mix + pre folded"),
          [=, &s](uint64_t seed, R& info) {
            return post_finish_case(s, seed, mode != 2, false, mode != 0, mode != 1, tokens, hc, d, info, false, true);
          });
  chain(1, 4, 4096, 20, " V4 decode");
  chain(3, 4, 4096, 20, " V4");
  chain(2, 4, 300, 20, " ragged");
  chain(2, 8, 100, 20, " hc_max ragged");
  chain(3, 3, 7, 1, " tiny, one iteration");
  chain(2, 2, 64, 20, " hc 2 (the subgroup Sinkhorn where hc·hc fits the smallest subgroup, also on lavapipe)");
  chain(1, 4, 1000, 0, " iters 0 = 1");
  for (auto [tokens, hc, d] : {std::array<uint32_t, 3>{1, 4, 4096}, {3, 4, 257}, {2, 8, 64}})
    s.run("hc_head", "-", std::to_string(tokens) + "x hc " + std::to_string(hc) + " d " + std::to_string(d),
          [=, &s](uint64_t seed, R& info) { return head_case(s, seed, tokens, hc, d, info); });
}

}  // namespace cmfx::parity

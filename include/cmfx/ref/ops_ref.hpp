#pragma once
/// @file ops_ref.hpp
/// @brief float64 scalar references of the layer primitives in include/cmfx/ops/ (spec §3.2–3.6, §4).
///
/// Written independently of the fast versions, as plain loops over double (llama2.c style), shapes in the
/// comments. They allocate freely and are slow on purpose: they are the oracle of tests/ops.
/// Deliberate differences of formulation: RMS by division by a sqrt; RoPE by std::complex multiplication;
/// Sinkhorn on a double matrix with explicit row/column sums; Hadamard by the explicit matrix
/// H[i][j] = (−1)^popcount(i & j); fake-quant by searching the format's value grid (ties to the even code).
/// Only two definitions are shared on purpose, because a selection must match exactly: the f32 router score
/// (sqrt_softplus, then the f32 sum s + bias) and the top-k order (stable sort, value descending, NaN = −inf).
#include <algorithm>
#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <numbers>
#include <numeric>
#include <vector>

#include "cmfx/formats/exmy.hpp"

namespace cmfx::ref {

// ---------------------------------------------------------------- RMS norm
/// out[i] = x[i] / sqrt(Σ x² / n + eps) · w[i]     x [n], w [n] or null
inline std::vector<double> rmsnorm(const std::vector<float>& x, const float* w, double eps) {
  double ss = 0.0;
  for (float v : x) ss += double(v) * double(v);
  const double denom = std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) / denom * (w ? double(w[i]) : 1.0);
  return out;
}

/// x [heads, hd] → each head normalised on its own, no weight
inline std::vector<double> rmsnorm_heads(const std::vector<float>& x, size_t heads, size_t hd, double eps) {
  std::vector<double> out(heads * hd);
  for (size_t h = 0; h < heads; ++h) {
    std::vector<float> head(x.begin() + std::ptrdiff_t(h * hd), x.begin() + std::ptrdiff_t((h + 1) * hd));
    const std::vector<double> r = rmsnorm(head, nullptr, eps);
    std::copy(r.begin(), r.end(), out.begin() + std::ptrdiff_t(h * hd));
  }
  return out;
}

// ---------------------------------------------------------------- RoPE
/// f [dim/2]: f_i = exp(−(2i/dim)·ln base); YaRN: blend f/factor and f by a linear ramp between the
/// correction dims of beta_fast (floor, ≥ 0) and beta_slow (ceil, ≤ dim−1).
inline std::vector<double> rope_freqs(unsigned dim, double base, bool yarn, double factor = 16.0,
                                      double original = 65536.0, double beta_fast = 32.0, double beta_slow = 1.0) {
  std::vector<double> f(dim / 2);
  for (unsigned i = 0; i < dim / 2; ++i) f[i] = std::exp(-(2.0 * i / dim) * std::log(base));
  if (!yarn) return f;
  // number of dims whose wavelength 2π/f fits `rot` times into `original`
  auto corr_dim = [&](double rot) {
    return (dim * std::log(original / (rot * 2.0 * std::numbers::pi))) / (2.0 * std::log(base));
  };
  double low = std::floor(corr_dim(beta_fast)), high = std::ceil(corr_dim(beta_slow));
  if (low < 0) low = 0;
  if (high > dim - 1) high = dim - 1;
  double width = high - low;
  if (width < 1e-3) width = 1e-3;
  for (unsigned i = 0; i < dim / 2; ++i) {
    double t = (i - low) / width;
    t = t < 0 ? 0 : (t > 1 ? 1 : t);
    const double smooth = 1.0 - t;  // 1: keep f, 0: interpolate f/factor
    f[i] = f[i] * smooth + (f[i] / factor) * (1.0 - smooth);
  }
  return f;
}

/// Rotate v[off + 2i], v[off + 2i + 1] (a + ib) by e^{±i·pos·f_i}, i < f.size().
inline void rope(std::vector<double>& v, size_t off, int64_t pos, const std::vector<double>& f, bool inverse) {
  for (size_t i = 0; i < f.size(); ++i) {
    const double ang = (inverse ? -1.0 : 1.0) * double(pos) * f[i];
    std::complex<double> z(v[off + 2 * i], v[off + 2 * i + 1]);
    z *= std::polar(1.0, ang);
    v[off + 2 * i] = z.real();
    v[off + 2 * i + 1] = z.imag();
  }
}

// ---------------------------------------------------------------- softmax
/// p_k = exp(ℓ_k − m) / (Σ exp(ℓ_k − m) + exp(sink − m)); −inf keys → 0; nothing finite → all 0
inline std::vector<double> attend_sink(const std::vector<float>& l, double sink) {
  std::vector<double> p(l.size(), 0.0);
  double m = sink;
  bool any = sink > -std::numeric_limits<double>::infinity();
  for (float v : l)
    if (v > -std::numeric_limits<float>::infinity()) {
      m = any ? std::max(m, double(v)) : double(v);
      any = true;
    }
  if (!any) return p;
  double den = any && sink > -std::numeric_limits<double>::infinity() ? std::exp(sink - m) : 0.0;
  for (float v : l)
    if (v > -std::numeric_limits<float>::infinity()) den += std::exp(double(v) - m);
  for (size_t k = 0; k < l.size(); ++k)
    if (l[k] > -std::numeric_limits<float>::infinity()) p[k] = std::exp(double(l[k]) - m) / den;
  return p;
}

inline std::vector<double> softmax(const std::vector<float>& l) {
  return attend_sink(l, -std::numeric_limits<double>::infinity());
}

// ---------------------------------------------------------------- top-k
/// The first min(k, n) indices of a stable sort by value descending (NaN counts as −inf).
inline std::vector<uint32_t> topk(const std::vector<float>& s, size_t k) {
  std::vector<uint32_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0u);
  auto key = [&](uint32_t i) { return std::isnan(s[i]) ? -std::numeric_limits<double>::infinity() : double(s[i]); };
  std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) { return key(a) > key(b); });
  idx.resize(std::min(k, s.size()));
  return idx;
}

// ---------------------------------------------------------------- MoE routing
/// The f32 router score: sqrt(softplus(z)), softplus = z past 20 (torch threshold).
inline float sqrt_softplus_f32(float z) {
  const double sp = double(z) > 20.0 ? double(z) : std::log1p(std::exp(double(z)));
  return float(std::sqrt(sp));
}

struct routed {
  std::vector<uint32_t> ids;  // [top_k]
  std::vector<double> w;      // [top_k]
  std::vector<float> s;       // [experts] unbiased f32 scores
};

/// w_k = s[id_k] / (Σ s[ids] + eps) · scale
inline void routing_weights(routed& r, double eps, double scale) {
  double sum = 0.0;
  for (uint32_t id : r.ids) sum += r.s[id];
  r.w.clear();
  for (uint32_t id : r.ids) r.w.push_back(double(r.s[id]) / (sum + eps) * scale);
}

/// logits [E], bias [E] or empty: ids = topk(s + bias), weights from unbiased s
inline routed route_score(const std::vector<float>& logits, const std::vector<float>& bias, size_t top_k,
                          double scale, double eps, float temp = 1.0f) {
  routed r;
  std::vector<float> sel(logits.size());
  for (size_t e = 0; e < logits.size(); ++e) {
    r.s.push_back(sqrt_softplus_f32(temp == 1.0f ? logits[e] : logits[e] / temp));
    sel[e] = bias.empty() ? r.s[e] : r.s[e] + bias[e];  // f32 sum, as the f32 reference tensors
  }
  r.ids = topk(sel, top_k);
  routing_weights(r, eps, scale);
  return r;
}

/// tid2eid [V, top_k] (any arithmetic type): ids = row min(token, V−1)
template <class T>
inline routed route_hash(const std::vector<float>& logits, const std::vector<T>& tid2eid, uint64_t token,
                         size_t top_k, double scale, double eps) {
  routed r;
  for (float z : logits) r.s.push_back(sqrt_softplus_f32(z));
  const uint64_t V = tid2eid.size() / top_k;
  const uint64_t row = token < V ? token : V - 1;
  for (size_t j = 0; j < top_k; ++j) r.ids.push_back(uint32_t(tid2eid[row * top_k + j]));
  routing_weights(r, eps, scale);
  return r;
}

/// silu(min(g, L)) · clamp(v, −L, L) · w;  L ≤ 0: no clamp
inline std::vector<double> swiglu_clamp(const std::vector<float>& g, const std::vector<float>& v, double L,
                                        double w = 1.0) {
  std::vector<double> out(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    double a = g[i], b = v[i];
    if (L > 0) {
      a = std::min(a, L);
      b = std::max(-L, std::min(b, L));
    }
    out[i] = a / (1.0 + std::exp(-a)) * b * w;
  }
  return out;
}

// ---------------------------------------------------------------- mHC
struct hc_pre_out {
  std::vector<double> pre, post, C, y;  // [hc], [hc], [hc·hc] row-major, [d]
};

/// m [rows] = fn [rows, hc·d] · X [hc·d] / sqrt(mean(X²) + eps)
inline std::vector<double> hc_mix(const std::vector<float>& X, const std::vector<float>& fn, size_t rows,
                                  double eps) {
  const size_t n = X.size();
  double ss = 0.0;
  for (float v : X) ss += double(v) * v;
  const double rms = std::sqrt(ss / double(n) + eps);
  std::vector<double> m(rows);
  for (size_t r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (size_t i = 0; i < n; ++i) acc += double(fn[r * n + i]) * double(X[i]);
    m[r] = acc / rms;
  }
  return m;
}

inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

/// y [d] = Σ_j pre[j] · X[j]
inline std::vector<double> hc_fold(const std::vector<float>& X, const std::vector<double>& pre, size_t hc) {
  const size_t d = X.size() / hc;
  std::vector<double> y(d, 0.0);
  for (size_t i = 0; i < d; ++i)
    for (size_t j = 0; j < hc; ++j) y[i] += pre[j] * double(X[j * d + i]);
  return y;
}

/// X [hc·d], fn [(2+hc)·hc, hc·d], base [(2+hc)·hc], scale [3]
inline hc_pre_out hc_pre(const std::vector<float>& X, const std::vector<float>& fn, const std::vector<float>& base,
                         const std::vector<float>& scale, size_t hc, double norm_eps, double hc_eps, unsigned iters) {
  const std::vector<double> m = hc_mix(X, fn, (2 + hc) * hc, norm_eps);
  hc_pre_out o;
  for (size_t j = 0; j < hc; ++j) {
    o.pre.push_back(sigmoid(m[j] * scale[0] + base[j]) + hc_eps);
    o.post.push_back(2.0 * sigmoid(m[hc + j] * scale[1] + base[hc + j]));
  }
  std::vector<std::vector<double>> c(hc, std::vector<double>(hc));
  for (size_t j = 0; j < hc; ++j) {
    std::vector<double> row(hc);
    for (size_t k = 0; k < hc; ++k) row[k] = m[2 * hc + j * hc + k] * scale[2] + base[2 * hc + j * hc + k];
    const double mx = *std::max_element(row.begin(), row.end());
    double z = 0.0;
    for (double r : row) z += std::exp(r - mx);
    for (size_t k = 0; k < hc; ++k) c[j][k] = std::exp(row[k] - mx) / z + hc_eps;
  }
  auto normalise_columns = [&] {
    std::vector<double> cs(hc, 0.0);
    for (size_t j = 0; j < hc; ++j)
      for (size_t k = 0; k < hc; ++k) cs[k] += c[j][k];
    for (size_t j = 0; j < hc; ++j)
      for (size_t k = 0; k < hc; ++k) c[j][k] = c[j][k] / (cs[k] + hc_eps);
  };
  auto normalise_rows = [&] {
    for (size_t j = 0; j < hc; ++j) {
      const double rs = std::accumulate(c[j].begin(), c[j].end(), 0.0);
      for (size_t k = 0; k < hc; ++k) c[j][k] = c[j][k] / (rs + hc_eps);
    }
  };
  normalise_columns();
  for (unsigned it = 1; it < iters; ++it) {
    normalise_rows();
    normalise_columns();
  }
  for (size_t j = 0; j < hc; ++j)
    for (size_t k = 0; k < hc; ++k) o.C.push_back(c[j][k]);
  o.y = hc_fold(X, o.pre, hc);
  return o;
}

/// X' [hc·d]: X'[k][i] = post[k]·o[i] + Σ_j C[j][k]·X[j][i]     (einsum "jk,jd->kd")
inline std::vector<double> hc_post(const std::vector<float>& o, const std::vector<float>& X,
                                   const std::vector<float>& post, const std::vector<float>& C, size_t hc) {
  const size_t d = o.size();
  std::vector<double> out(hc * d);
  for (size_t k = 0; k < hc; ++k)
    for (size_t i = 0; i < d; ++i) {
      double acc = double(post[k]) * o[i];
      for (size_t j = 0; j < hc; ++j) acc += double(C[j * hc + k]) * double(X[j * d + i]);
      out[k * d + i] = acc;
    }
  return out;
}

/// head collapse: pre [hc] = sigmoid(m·scale + base) + hc_eps, y = Σ pre[j] X[j]
inline hc_pre_out hc_head(const std::vector<float>& X, const std::vector<float>& fn, const std::vector<float>& base,
                          double scale, size_t hc, double norm_eps, double hc_eps) {
  const std::vector<double> m = hc_mix(X, fn, hc, norm_eps);
  hc_pre_out o;
  for (size_t j = 0; j < hc; ++j) o.pre.push_back(sigmoid(m[j] * scale + base[j]) + hc_eps);
  o.y = hc_fold(X, o.pre, hc);
  return o;
}

// ---------------------------------------------------------------- fake quant
/// Non-negative finite values of a format, index = code (codes ascend with value).
template <class Fmt>
inline std::vector<double> value_grid() {
  std::vector<double> g;
  for (uint32_t c = 0; c < (Fmt::code_count >> 1); ++c) {
    const double v = Fmt::decode(typename Fmt::storage(c));
    if (std::isfinite(v)) g.push_back(v);
  }
  return g;
}

/// Nearest grid value to |x| ≤ grid max, ties to the even code; the sign is kept.
inline double round_to_grid(double x, const std::vector<double>& grid) {
  const double a = std::fabs(x);
  size_t best = 0;
  for (size_t c = 1; c < grid.size(); ++c) {
    const double dc = std::fabs(grid[c] - a), db = std::fabs(grid[best] - a);
    if (dc < db || (dc == db && c % 2 == 0)) best = c;
  }
  return x < 0 ? -grid[best] : grid[best];
}

/// Per block: amax' = max(amax, floor); scale = smallest 2^e ≥ amax'/fmax; x = round(clamp(x/scale)) · scale
template <class Fmt>
inline std::vector<double> fake_quant(const std::vector<float>& x, size_t block, double fmax, double amax_floor) {
  const std::vector<double> grid = value_grid<Fmt>();
  std::vector<double> out(x.size());
  for (size_t b0 = 0; b0 < x.size(); b0 += block) {
    const size_t b1 = std::min(x.size(), b0 + block);
    double amax = amax_floor;
    for (size_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(double(x[i])));
    const double q = amax / fmax;
    int e = int(std::ceil(std::log2(q)));
    while (std::ldexp(1.0, e) < q) ++e;
    while (std::ldexp(1.0, e - 1) >= q) --e;
    const double scale = std::ldexp(1.0, e);
    for (size_t i = b0; i < b1; ++i) {
      const double v = std::max(-fmax, std::min(fmax, double(x[i]) / scale));
      out[i] = round_to_grid(v, grid) * scale;
    }
  }
  return out;
}

inline std::vector<double> act_quant_e4m3(const std::vector<float>& x, size_t block) {
  return fake_quant<e4m3>(x, block, 448.0, 1e-4f);  // the floor is the f32 constant 1e-4f
}
inline std::vector<double> act_quant_e2m1(const std::vector<float>& x, size_t block) {
  return fake_quant<e2m1>(x, block, 6.0, std::ldexp(6.0, -126));
}

// ---------------------------------------------------------------- Hadamard
/// y [n] = scale · H x,  H[i][j] = (−1)^popcount(i & j)
inline std::vector<double> hadamard(const std::vector<float>& x, double scale) {
  const size_t n = x.size();
  std::vector<double> y(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double acc = 0.0;
    for (size_t j = 0; j < n; ++j) acc += (std::popcount(i & j) % 2 ? -1.0 : 1.0) * double(x[j]);
    y[i] = scale * acc;
  }
  return y;
}

}  // namespace cmfx::ref

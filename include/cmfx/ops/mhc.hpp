#pragma once
/// @file mhc.hpp
/// @brief Manifold-constrained hyper-connections (spec §3.2 pre/Sinkhorn/post, §3.5 head collapse).
///
/// The residual stream is X = hc copies of a d-vector, row-major [hc, d] (hc = 4 in V4 and V4.1; any
/// 1 ≤ hc ≤ hc_max works). Per sublayer:
///   m       = (hc_fn · flatten(X)) · rsqrt(mean(X²) + norm_eps)      [(2+hc)·hc]; no learned norm weight
///   pre[j]  = sigmoid(m[j]·s0 + b[j]) + hc_eps
///   post[j] = 2·sigmoid(m[hc+j]·s1 + b[hc+j])
///   C[j,k]  = row-softmax(m[2hc+hc·j+k]·s2 + b[..]) + hc_eps, then C /= (colsum + hc_eps),
///             then iters−1 times { C /= (rowsum + hc_eps); C /= (colsum + hc_eps) }  — ENDS on a column pass
///             (columns sum to 1, rows only roughly); iters = 0 behaves as 1
///   y       = Σ_j pre[j]·X[j]                                         (the sublayer input, before its RMS)
///   X'[k]   = post[k]·o + Σ_j C[j,k]·X[j]                             (C's FIRST index is summed)
/// Reductions (norm, the (2+hc)·hc dot products of length hc·d) and the 4×4 Sinkhorn run in double; the
/// d-long folds run in f32 with a fixed summation order (j ascending).
#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <span>
#include <stdexcept>

#include "cmfx/ops/reduce.hpp"

namespace cmfx {

inline constexpr uint32_t hc_max = 8;

namespace ops_detail {
inline double sigmoid(double x) noexcept { return 1.0 / (1.0 + std::exp(-x)); }

inline size_t hc_dim(std::span<const float> X, uint32_t hc) {
  if (hc == 0 || hc > hc_max || X.size() % hc) throw std::invalid_argument("mhc: hc out of range or X not hc*d");
  return X.size() / hc;
}

/// m[i] = (fn row i · X) · rsqrt(mean(X²) + eps) for rows rows of fn.
inline void hc_mixes(std::span<const float> X, std::span<const float> fn, size_t rows, float norm_eps, double* m) {
  const size_t n = X.size();
  if (fn.size() != rows * n) throw std::invalid_argument("mhc: fn size != rows * hc * d");
  const double r = 1.0 / std::sqrt(sum_sq(X.data(), n) / double(n) + double(norm_eps));
  for (size_t i = 0; i < rows; ++i) m[i] = dot(fn.data() + i * n, X.data(), n) * r;
}

/// y = Σ_j pre[j]·X[j] in f32, j ascending.
inline void hc_fold(std::span<const float> X, const float* pre, uint32_t hc, size_t d, std::span<float> y) {
  if (y.size() != d) throw std::invalid_argument("mhc: y size != d");
  float* yp = y.data();
  const float* x = X.data();
  for (size_t i = 0; i < d; ++i) yp[i] = pre[0] * x[i];
  for (uint32_t j = 1; j < hc; ++j) {
    const float p = pre[j];
    const float* xj = x + j * d;
    for (size_t i = 0; i < d; ++i) yp[i] += p * xj[i];
  }
}
}  // namespace ops_detail

/// The coefficients of hc_pre from its mixes m [(2+hc)·hc] (ops_detail::hc_mixes): pre [hc], post [hc], C [hc·hc]
/// row-major. For callers that compute the mixes elsewhere (ops/mhc_pool.hpp); hc_pre is hc_mixes, this, hc_fold.
inline void hc_pre_coeffs(const double* m, std::span<const float> base, std::span<const float> scale, uint32_t hc,
                          float hc_eps, uint32_t iters, std::span<float> pre, std::span<float> post, std::span<float> C) {
  const size_t rows = size_t(2 + hc) * hc;
  if (hc == 0 || hc > hc_max || base.size() != rows || scale.size() != 3 || pre.size() != hc || post.size() != hc ||
      C.size() != hc * hc)
    throw std::invalid_argument("hc_pre: parameter or output size mismatch");
  const double s0 = scale[0], s1 = scale[1], s2 = scale[2], eps = hc_eps;
  for (uint32_t j = 0; j < hc; ++j) {
    pre[j] = float(ops_detail::sigmoid(m[j] * s0 + double(base[j])) + eps);
    post[j] = float(2.0 * ops_detail::sigmoid(m[hc + j] * s1 + double(base[hc + j])));
  }
  double c[hc_max][hc_max];
  for (uint32_t j = 0; j < hc; ++j) {  // row softmax + eps
    double mx = -std::numeric_limits<double>::infinity();
    for (uint32_t k = 0; k < hc; ++k) {
      c[j][k] = m[2 * hc + j * hc + k] * s2 + double(base[2 * hc + j * hc + k]);
      mx = std::max(mx, c[j][k]);
    }
    double sum = 0.0;
    for (uint32_t k = 0; k < hc; ++k) sum += (c[j][k] = std::exp(c[j][k] - mx));
    for (uint32_t k = 0; k < hc; ++k) c[j][k] = c[j][k] / sum + eps;
  }
  auto col_pass = [&] {
    for (uint32_t k = 0; k < hc; ++k) {
      double s = 0.0;
      for (uint32_t j = 0; j < hc; ++j) s += c[j][k];
      for (uint32_t j = 0; j < hc; ++j) c[j][k] /= s + eps;
    }
  };
  col_pass();
  for (uint32_t it = 1; it < iters; ++it) {
    for (uint32_t j = 0; j < hc; ++j) {
      double s = 0.0;
      for (uint32_t k = 0; k < hc; ++k) s += c[j][k];
      for (uint32_t k = 0; k < hc; ++k) c[j][k] /= s + eps;
    }
    col_pass();
  }
  for (uint32_t j = 0; j < hc; ++j)
    for (uint32_t k = 0; k < hc; ++k) C[j * hc + k] = float(c[j][k]);
}

/// mHC pre step. X [hc·d]; hc_fn [(2+hc)·hc, hc·d] row-major; base [(2+hc)·hc]; scale [3];
/// outputs pre [hc], post [hc], C [hc·hc] row-major (C[j·hc+k]), y [d].
inline void hc_pre(std::span<const float> X, std::span<const float> hc_fn, std::span<const float> base,
                   std::span<const float> scale, uint32_t hc, float norm_eps, float hc_eps, uint32_t iters,
                   std::span<float> pre, std::span<float> post, std::span<float> C, std::span<float> y) {
  const size_t d = ops_detail::hc_dim(X, hc);
  const size_t rows = size_t(2 + hc) * hc;
  if (base.size() != rows || scale.size() != 3 || pre.size() != hc || post.size() != hc || C.size() != hc * hc)
    throw std::invalid_argument("hc_pre: parameter or output size mismatch");
  double m[(2 + hc_max) * hc_max];
  ops_detail::hc_mixes(X, hc_fn, rows, norm_eps, m);
  hc_pre_coeffs(m, base, scale, hc, hc_eps, iters, pre, post, C);
  ops_detail::hc_fold(X, pre.data(), hc, d, y);
}

/// mHC post step: out[k] = post[k]·o + Σ_j C[j,k]·X[j]. o [d], X [hc·d], post [hc], C [hc·hc] row-major,
/// out [hc·d]. out must not overlap X (every out row reads all X rows).
inline void hc_post_cols(std::span<const float> o, std::span<const float> X, std::span<const float> post,
                         std::span<const float> C, uint32_t hc, size_t c0, size_t c1, std::span<float> out);

inline void hc_post(std::span<const float> o, std::span<const float> X, std::span<const float> post,
                    std::span<const float> C, uint32_t hc, std::span<float> out) {
  hc_post_cols(o, X, post, C, hc, 0, ops_detail::hc_dim(X, hc), out);
}

/// hc_post on the columns [c0, c1) of every copy only (the others of `out` untouched): the same operations per
/// element as hc_post, so column blocks computed apart (ops/mhc_pool.hpp) give hc_post's result bit for bit.
inline void hc_post_cols(std::span<const float> o, std::span<const float> X, std::span<const float> post,
                         std::span<const float> C, uint32_t hc, size_t c0, size_t c1, std::span<float> out) {
  const size_t d = ops_detail::hc_dim(X, hc);
  if (o.size() != d || post.size() != hc || C.size() != hc * hc || out.size() != X.size() || c0 > c1 || c1 > d)
    throw std::invalid_argument("hc_post: size mismatch");
  const float* x = X.data();
  const float* op = o.data();
  for (uint32_t k = 0; k < hc; ++k) {
    float* dst = out.data() + k * d;
    const float p = post[k];
    for (size_t i = c0; i < c1; ++i) dst[i] = p * op[i];
    for (uint32_t j = 0; j < hc; ++j) {
      const float cjk = C[j * hc + k];
      const float* xj = x + j * d;
      for (size_t i = c0; i < c1; ++i) dst[i] += cjk * xj[i];
    }
  }
}

/// Final collapse (V4 head): m = (fn · flatten(X))·rsqrt(mean(X²)+norm_eps) [hc]; pre = sigmoid(m·scale + base)
/// + hc_eps; y = Σ_j pre[j]·X[j]. fn [hc, hc·d], base [hc]; outputs pre [hc], y [d]. No Sinkhorn.
inline void hc_head(std::span<const float> X, std::span<const float> fn, std::span<const float> base, float scale,
                    uint32_t hc, float norm_eps, float hc_eps, std::span<float> pre, std::span<float> y) {
  const size_t d = ops_detail::hc_dim(X, hc);
  if (base.size() != hc || pre.size() != hc) throw std::invalid_argument("hc_head: size mismatch");
  double m[hc_max];
  ops_detail::hc_mixes(X, fn, hc, norm_eps, m);
  for (uint32_t j = 0; j < hc; ++j)
    pre[j] = float(ops_detail::sigmoid(m[j] * double(scale) + double(base[j])) + double(hc_eps));
  ops_detail::hc_fold(X, pre.data(), hc, d, y);
}

}  // namespace cmfx

#pragma once
/// @file mhc_pool.hpp
/// @brief The mHC steps of a chunk of tokens on a thread pool (ops/mhc.hpp), for chunks with fewer tokens than
/// workers — a decode step has one, and one worker computing its (2+hc)·hc mixes of length hc·d in double took
/// ~0.2 ms per sublayer on the H200 host, a quarter of a 16-thread step (docs/PERF.md "Thirty-sixth session").
///
/// The mixes' dot products and the norm's sum of squares are split over (token, row) items and hc_post over
/// (token, column block) items. Every value is computed by the same function in the same order as ops/mhc.hpp's
/// per-token calls, so the results are those calls' bit for bit (tests/ops/mhc_pool_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "cmfx/core/thread_pool.hpp"
#include "cmfx/ops/mhc.hpp"

namespace cmfx {

/// The mixes of n tokens: m[i·rows + r] = (fn row r · X_i) · rsqrt(mean(X_i²) + norm_eps), X_i = X + i·hd (hd = hc·d),
/// as ops_detail::hc_mixes computes them for one token. `raw`: scratch of at least n·(rows + 1) values.
inline void hc_mixes_pool(thread_pool& pool, const float* X, uint64_t n, size_t hd, std::span<const float> fn,
                          size_t rows, float norm_eps, std::span<double> raw, double* m) {
  if (fn.size() != rows * hd) throw std::invalid_argument("mhc: fn size != rows * hc * d");
  const uint64_t R = rows + 1;  // item r < rows: a dot product; r == rows: the sum of squares
  if (raw.size() < n * R) throw std::invalid_argument("mhc: mixes scratch smaller than n * (rows + 1)");
  pool.run(n * R, [&](uint64_t b, uint64_t e, unsigned) {
    for (uint64_t t = b; t < e; ++t) {
      const uint64_t i = t / R, r = t % R;
      const float* x = X + i * hd;
      raw[t] = r < rows ? ops_detail::dot(fn.data() + r * hd, x, hd) : ops_detail::sum_sq(x, hd);
    }
  });
  for (uint64_t i = 0; i < n; ++i) {
    const double s = 1.0 / std::sqrt(raw[i * R + rows] / double(hd) + double(norm_eps));
    for (size_t r = 0; r < rows; ++r) m[i * rows + r] = raw[i * R + r] * s;
  }
}
/// The same with `raw` a vector resized to n·(rows + 1).
inline void hc_mixes_pool(thread_pool& pool, const float* X, uint64_t n, size_t hd, std::span<const float> fn,
                          size_t rows, float norm_eps, std::vector<double>& raw, double* m) {
  raw.resize(n * (rows + 1));
  hc_mixes_pool(pool, X, n, hd, fn, rows, norm_eps, std::span<double>(raw), m);
}

/// hc_pre of n tokens up to its fold: the coefficients pre / post / C of token i at pre + i·hc, post + i·hc,
/// C + i·hc·hc, then `each(i)` on a worker (the caller's fold and norm: V4 folds with this pre, V4.1 with the previous
/// sublayer's). The mixes are split over (token, row) items (hc_mixes_pool) when there are fewer tokens than workers
/// and a token's mixes read at least `split_min` fn values; else each worker computes whole tokens, as hc_pre.
/// Either way the coefficients are hc_pre's bit for bit. `scratch`: reused between calls.
template <class Each>
void hc_pre_pool(thread_pool& pool, const float* X, uint64_t n, uint32_t hc, size_t d, std::span<const float> fn,
                 std::span<const float> base, std::span<const float> scale, float norm_eps, float hc_eps,
                 uint32_t iters, float* pre, float* post, float* C, std::vector<double>& scratch, Each&& each,
                 size_t split_min = size_t(1) << 15) {
  if (hc == 0 || hc > hc_max) throw std::invalid_argument("mhc: hc out of range");
  const size_t hd = size_t(hc) * d, rows = size_t(2 + hc) * hc;
  if (fn.size() != rows * hd) throw std::invalid_argument("mhc: fn size != rows * hc * d");
  auto coeffs = [&](uint64_t i, const double* m) {
    hc_pre_coeffs(m, base, scale, hc, hc_eps, iters, std::span<float>(pre + i * hc, hc),
                  std::span<float>(post + i * hc, hc), std::span<float>(C + i * hc * hc, size_t(hc) * hc));
    each(i);
  };
  if (n < pool.size() && rows * hd >= split_min) {
    // scratch: the raw sums (n·(rows + 1)), then the mixes (n·rows); it only grows, so a decode allocates nothing
    const size_t nraw = n * (rows + 1);
    if (scratch.size() < nraw + n * rows) scratch.resize(nraw + n * rows);
    double* m = scratch.data() + nraw;
    hc_mixes_pool(pool, X, n, hd, fn, rows, norm_eps, std::span<double>(scratch.data(), nraw), m);
    pool.run(n, [&](uint64_t b, uint64_t e, unsigned) {
      for (uint64_t i = b; i < e; ++i) coeffs(i, m + i * rows);
    });
    return;
  }
  pool.run(n, [&](uint64_t b, uint64_t e, unsigned) {
    double m[(2 + hc_max) * hc_max];
    for (uint64_t i = b; i < e; ++i) {
      ops_detail::hc_mixes(std::span<const float>(X + i * hd, hd), fn, rows, norm_eps, m);
      coeffs(i, m);
    }
  });
}

/// hc_post of n tokens: out_i = hc_post(o_i, X_i, post_i, C_i) with o_i = o + i·d, X_i / out_i = X / out + i·hc·d,
/// post_i = post + i·hc, C_i = C + i·hc·hc; column blocks of at least `min_cols` so that every worker has one.
inline void hc_post_pool(thread_pool& pool, const float* o, const float* X, const float* post, const float* C,
                         uint64_t n, uint32_t hc, size_t d, float* out, size_t min_cols = 256) {
  const size_t hd = size_t(hc) * d;
  const uint64_t want = (pool.size() + n - 1) / std::max<uint64_t>(n, 1);  // blocks per token
  const uint64_t nb = std::clamp<uint64_t>(want, 1, std::max<size_t>(1, d / std::max<size_t>(min_cols, 1)));
  const size_t blk = (d + nb - 1) / nb;
  pool.run(n * nb, [&](uint64_t b, uint64_t e, unsigned) {
    for (uint64_t t = b; t < e; ++t) {
      const uint64_t i = t / nb, c0 = (t % nb) * blk;
      hc_post_cols(std::span<const float>(o + i * d, d), std::span<const float>(X + i * hd, hd),
                   std::span<const float>(post + i * hc, hc), std::span<const float>(C + i * hc * hc, size_t(hc) * hc),
                   hc, std::min<size_t>(c0, d), std::min<size_t>(c0 + blk, d), std::span<float>(out + i * hd, hd));
    }
  });
}

}  // namespace cmfx

#pragma once
/// @file rmsnorm.hpp
/// @brief RMS normalisation (spec §3.2–3.3): out = x · rsqrt(mean(x²) + eps) [· weight].
///
/// The mean of squares is accumulated in double and the reciprocal square root is taken in double, so eps as
/// small as 1e-20 (V4.1's norm_eps) and inputs whose squares underflow f32 still normalise correctly. Outputs
/// are rounded to f32 once. `out` may alias `x` (element-wise after the reduction).
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>

#include "cmfx/ops/reduce.hpp"

namespace cmfx {

/// 1/sqrt(mean(x²) + eps), in double.
inline double rms_inv(const float* x, size_t n, float eps) noexcept {
  const double ms = n ? ops_detail::sum_sq(x, n) / double(n) : 0.0;
  return 1.0 / std::sqrt(ms + double(eps));
}

/// out[i] = x[i] · r · weight[i] (weight may be null: no weight). x.size() == out.size().
inline void rmsnorm(std::span<const float> x, const float* weight, float eps, std::span<float> out) {
  if (out.size() != x.size()) throw std::invalid_argument("rmsnorm: out size != x size");
  const size_t n = x.size();
  const double r = rms_inv(x.data(), n, eps);
  const float* xp = x.data();
  float* op = out.data();
  if (weight) {
    for (size_t i = 0; i < n; ++i) op[i] = float(double(xp[i]) * r * double(weight[i]));
  } else {
    for (size_t i = 0; i < n; ++i) op[i] = float(double(xp[i]) * r);
  }
}

/// Per-head RMS without weight (V4's q_h · rsqrt(mean(q_h²) + eps)): x is [heads, head_dim] row-major.
inline void rmsnorm_heads(std::span<const float> x, uint32_t heads, uint32_t head_dim, float eps,
                          std::span<float> out) {
  if (x.size() != size_t(heads) * head_dim || out.size() != x.size())
    throw std::invalid_argument("rmsnorm_heads: sizes != heads*head_dim");
  for (uint32_t h = 0; h < heads; ++h) {
    const size_t o = size_t(h) * head_dim;
    rmsnorm(x.subspan(o, head_dim), nullptr, eps, out.subspan(o, head_dim));
  }
}

}  // namespace cmfx

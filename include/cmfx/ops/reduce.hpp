#pragma once
/// @file reduce.hpp
/// @brief Small reductions shared by the ops headers: f32 data, f64 accumulators.
///
/// Eight independent double accumulators, combined in a fixed order at the end: the result does not depend on
/// the vector width the compiler picks, and the loop body is plain enough for g++ to vectorize the float→double
/// conversion and the multiply-adds (no fast-math needed, because no reduction is reassociated).
#include <cstddef>

namespace cmfx::ops_detail {

inline constexpr size_t lanes = 8;

/// Combine the lanes pairwise (fixed order).
inline double fold(const double (&a)[lanes]) noexcept {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/// Σ x[i]² in double.
inline double sum_sq(const float* x, size_t n) noexcept {
  double a[lanes] = {};
  const size_t body = n - n % lanes, rem = n % lanes;
  for (size_t i = 0; i < body; i += lanes)
    for (size_t l = 0; l < lanes; ++l) a[l] += double(x[i + l]) * double(x[i + l]);
  double tail = 0.0;
  for (size_t l = 0; l < rem; ++l) tail += double(x[body + l]) * double(x[body + l]);
  return fold(a) + tail;
}

/// Σ x[i]·y[i] in double.
inline double dot(const float* x, const float* y, size_t n) noexcept {
  double a[lanes] = {};
  const size_t body = n - n % lanes, rem = n % lanes;
  for (size_t i = 0; i < body; i += lanes)
    for (size_t l = 0; l < lanes; ++l) a[l] += double(x[i + l]) * double(y[i + l]);
  double tail = 0.0;
  for (size_t l = 0; l < rem; ++l) tail += double(x[body + l]) * double(y[body + l]);
  return fold(a) + tail;
}

}  // namespace cmfx::ops_detail

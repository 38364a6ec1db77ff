#pragma once
/// @file gemm_generic.hpp
/// @brief Portable small-batch GEMM Y[t, r] = sum_c W[r, c] * X[t, c] for any weight format: each row is
///        decoded once with the format trait into per-thread scratch, then dotted with every token (xsimd,
///        compiled for whatever the translation unit targets). The reference path for formats without a
///        specialised decoder and for CPUs without AVX2.
#include <xsimd/xsimd.hpp>

#include <vector>

#include "cmfx/formats/format.hpp"

namespace cmfx::kernels {

inline float dot_f32(const float* a, const float* b, uint64_t n) noexcept {
  using batch = xsimd::batch<float>;
  constexpr uint64_t W = batch::size;
  batch s0(0.0f), s1(0.0f);
  uint64_t i = 0;
  for (; i + 2 * W <= n; i += 2 * W) {
    s0 = xsimd::fma(batch::load_unaligned(a + i), batch::load_unaligned(b + i), s0);
    s1 = xsimd::fma(batch::load_unaligned(a + i + W), batch::load_unaligned(b + i + W), s1);
  }
  for (; i + W <= n; i += W) s0 = xsimd::fma(batch::load_unaligned(a + i), batch::load_unaligned(b + i), s0);
  float s = xsimd::hadd(s0 + s1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

template <class F>
void gemm_rows_generic(const matrix_view& w, const float* X, uint64_t n, uint64_t ldx, float* Y, uint64_t ldy,
                       uint64_t r0, uint64_t r1) {
  thread_local std::vector<float> row;
  if (row.size() < w.cols) row.resize(w.cols);  // grows once per thread, never per call afterwards
  for (uint64_t r = r0; r < r1; ++r) {
    F::decode_row(w, r, row.data());
    for (uint64_t t = 0; t < n; ++t) Y[t * ldy + r] = dot_f32(row.data(), X + t * ldx, w.cols);
  }
}

}  // namespace cmfx::kernels

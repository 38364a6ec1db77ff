#pragma once
/// @file gemm_ref.hpp
/// @brief float64 reference for GEMM / matvec over any weight format: rows decoded exactly by the format
///        trait, products and sums in double. The oracle of tests/kernels and of the GPU parity suite.
#include <vector>

#include "cmfx/formats/format_list.hpp"

namespace cmfx::ref {

/// Y[t, r] = sum_c W[r, c] * X[t, c] in double; W [rows, cols] in format f, X [n, cols], Y [n, rows].
inline std::vector<double> gemm(format f, const matrix_view& w, const float* X, uint64_t n) {
  std::vector<double> Y(n * w.rows, 0.0);
  std::vector<float> row(w.cols);
  visit_format(f, [&]<class F>() {
    for (uint64_t r = 0; r < w.rows; ++r) {
      F::decode_row(w, r, row.data());
      for (uint64_t t = 0; t < n; ++t) {
        double s = 0.0;
        for (uint64_t c = 0; c < w.cols; ++c) s += double(row[c]) * double(X[t * w.cols + c]);
        Y[t * w.rows + r] = s;
      }
    }
  });
  return Y;
}

}  // namespace cmfx::ref

#pragma once
/// @file hadamard.hpp
/// @brief In-place Walsh–Hadamard transform in natural (Sylvester) order: x ← scale · H_n x with
///        H_n[i][j] = (−1)^popcount(i & j), n = 2^k. H is symmetric, and H_n·H_n = n·I, so scale = n^−½
///        makes it orthonormal (the V4 indexer uses n = 128, scale = 128^−½, spec §3.3 / §3.6; this is what
///        fast_hadamard_transform(x, scale) computes).
///
/// O(n log n) radix-2 butterflies (a, b) → (a + b, a − b) in f32, stride 1, 2, 4, …; the scale is applied at
/// the end.
#include <cstddef>
#include <span>
#include <stdexcept>

namespace cmfx {

inline void hadamard_inplace(std::span<float> x, float scale) {
  const size_t n = x.size();
  if (n == 0 || (n & (n - 1))) throw std::invalid_argument("hadamard_inplace: length must be a power of two");
  float* v = x.data();
  for (size_t h = 1; h < n; h *= 2) {
    for (size_t i = 0; i < n; i += 2 * h) {
      float* a = v + i;
      float* b = v + i + h;
      for (size_t j = 0; j < h; ++j) {
        const float s = a[j] + b[j], t = a[j] - b[j];
        a[j] = s;
        b[j] = t;
      }
    }
  }
  for (size_t i = 0; i < n; ++i) v[i] *= scale;
}

/// Apply the transform to each of `rows` consecutive vectors of length n (e.g. the 64 index heads × 128).
inline void hadamard_rows(std::span<float> x, size_t n, float scale) {
  if (n == 0 || x.size() % n) throw std::invalid_argument("hadamard_rows: size not a multiple of n");
  for (size_t r = 0; r < x.size(); r += n) hadamard_inplace(x.subspan(r, n), scale);
}

}  // namespace cmfx

#pragma once
// Shared helpers of tests/ops: fresh random inputs (never all zero) and a checker that prints the measured
// error of every comparison and names the seed when a bound is broken.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "support/hex.hpp"
#include "support/metrics.hpp"

namespace cmfx::test {

struct op_rng {
  std::mt19937_64 g;
  explicit op_rng(uint64_t seed) : g(seed) {}

  /// N(0, sigma²) with 0.2 % 8× outliers; never all zero.
  std::vector<float> normal(size_t n, float sigma = 1.0f) {
    std::normal_distribution<float> nd(0.0f, sigma);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::vector<float> v(n);
    bool nonzero = false;
    for (auto& x : v) {
      x = nd(g);
      if (u(g) < 0.002f) x *= 8.0f;
      nonzero |= x != 0.0f;
    }
    if (!nonzero && n) v[0] = sigma;
    return v;
  }
  float uniform(float a, float b) { return std::uniform_real_distribution<float>(a, b)(g); }
  uint64_t below(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(g); }
};

/// %g formatting for shape labels.
inline std::string g(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

/// Checks one comparison against its bounds and prints the measured numbers.
template <class Got, class Want>
inline error_stats check_close(const char* op, const std::string& shape, uint64_t seed, const Got& got,
                               const Want& want, double nmse_max, double abs_max) {
  EXPECT_EQ(got.size(), want.size()) << op << " " << shape;
  const error_stats e = compare(got.data(), want.data(), std::min(got.size(), want.size()));
  std::printf("[ops] %-14s %-34s nmse %.3e  max_abs %.3e  (ref max %.3g)\n", op, shape.c_str(), e.nmse, e.max_abs,
              e.ref_max);
  EXPECT_EQ(e.nonfinite, 0u) << op << " " << shape << " seed " << seed;
  EXPECT_LE(e.nmse, nmse_max) << op << " " << shape << " seed " << seed;
  EXPECT_LE(e.max_abs, abs_max) << op << " " << shape << " seed " << seed;
  return e;
}

}  // namespace cmfx::test

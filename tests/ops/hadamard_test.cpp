// Walsh–Hadamard (natural / Sylvester order): the O(n log n) butterflies against the explicit ±1 matrix.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cmfx/ops/hadamard.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "op_test_util.hpp"

using namespace cmfx;
using namespace cmfx::test;

namespace {

constexpr double kHadamardNmse = 1e-13;   // log2(n) f32 butterfly levels
constexpr double kHadamardMaxAbs = 5e-6;  // outputs O(1..10) with scale n^-1/2
constexpr double kTwiceMaxAbs = 1e-5;     // H·H·x/n = x

TEST(Hadamard, MatchesExplicitMatrix) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  for (size_t n : {1, 2, 4, 8, 32, 64, 128, 256, 1024})
    for (bool unit : {false, true}) {
      const float scale = unit ? 1.0f / std::sqrt(float(n)) : 1.0f;
      const std::vector<float> x = r.normal(n);
      std::vector<float> y = x;
      hadamard_inplace(y, scale);
      const auto want = ref::hadamard(x, scale);
      check_close("hadamard", "n=" + std::to_string(n) + " scale=" + g(scale), seed, y, want, kHadamardNmse,
                  unit ? kHadamardMaxAbs : kHadamardMaxAbs * std::sqrt(double(n)));
      if (unit) {
        hadamard_inplace(y, scale);  // orthonormal and symmetric: its own inverse
        for (size_t i = 0; i < n; ++i) EXPECT_NEAR(y[i], x[i], kTwiceMaxAbs) << "n=" << n << " seed " << seed;
      }
    }
}

TEST(Hadamard, IndexHeads) {
  // The V4 indexer rotates each 128-wide head of q [64, 128] with scale 128^-1/2.
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  const std::vector<float> x = r.normal(64 * 128);
  std::vector<float> y = x;
  const float scale = 1.0f / std::sqrt(128.0f);
  hadamard_rows(y, 128, scale);
  std::vector<double> want;
  for (size_t h = 0; h < 64; ++h) {
    const auto w = ref::hadamard(std::vector<float>(x.begin() + std::ptrdiff_t(h * 128),
                                                    x.begin() + std::ptrdiff_t((h + 1) * 128)),
                                 scale);
    want.insert(want.end(), w.begin(), w.end());
  }
  check_close("hadamard_rows", "64x128", seed, y, want, kHadamardNmse, kHadamardMaxAbs);
}

TEST(Hadamard, NaturalOrder) {
  // H_4 · e_1 = column 1 of H_4 = [1, −1, 1, −1]; H_4 · e_2 = [1, 1, −1, −1].
  std::vector<float> e1 = {0, 1, 0, 0}, e2 = {0, 0, 1, 0};
  hadamard_inplace(e1, 1.0f);
  hadamard_inplace(e2, 1.0f);
  EXPECT_EQ(e1, (std::vector<float>{1, -1, 1, -1}));
  EXPECT_EQ(e2, (std::vector<float>{1, 1, -1, -1}));
  std::vector<float> bad(6);
  EXPECT_THROW(hadamard_inplace(bad, 1.0f), std::invalid_argument);
}

}  // namespace

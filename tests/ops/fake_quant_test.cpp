// QAT fake-quant: act_quant_e4m3 (blocks 128 / 64 / 32) and act_quant_e2m1 (block 32), ragged tails included,
// must equal the float64 grid-search reference bit for bit; the quantisation error itself stays within the
// format's usual range.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cmfx/ops/fake_quant.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "op_test_util.hpp"

using namespace cmfx;
using namespace cmfx::test;

namespace {

constexpr double kVsRefNmse = 0.0;     // exact: power-of-two scales and RNE rounding leave no freedom
constexpr double kVsRefMaxAbs = 0.0;
// Per-block error of the quantisation itself vs the input (sanity, not the parity check): e4m3 keeps every
// normal value within 2^-4 relative (NMSE ≤ 2^-8); e2m1 blocks with one 8x outlier round most values to 0/±0.5.
constexpr double kE4m3QuantNmse = 4e-3;
constexpr double kE2m1QuantNmse = 0.15;

// Per-block magnitudes from 2^-20 to 2^20, a few exact zeros, and some blocks below the amax floor.
std::vector<float> blocky_input(op_rng& r, size_t n, uint32_t block) {
  std::vector<float> x = r.normal(n);
  for (size_t b = 0; b < n; b += block) {
    const float u = r.uniform(0, 1);
    const float mag = u < 0.1f ? 1e-6f : std::ldexp(1.0f, int(r.below(41)) - 20);
    for (size_t i = b; i < std::min(n, b + block); ++i) {
      x[i] *= mag;
      if (r.uniform(0, 1) < 0.01f) x[i] = 0.0f;
    }
  }
  x[0] = x[0] == 0.0f ? 1.0f : x[0];
  return x;
}

std::vector<double> as_double(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

TEST(ActQuantE4m3, MatchesReferenceExactly) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  // V4 Linear inputs d=4096 block 128; V4.1 d=5120 block 32; KV nope dims 448 block 64; V4.1 window kv 512
  // block 32; ragged tails 100/64, 130/128, 5/32, 1000/128.
  const std::pair<size_t, uint32_t> shapes[] = {{4096, 128}, {5120, 32}, {448, 64}, {512, 32}, {100, 64},
                                                {130, 128},  {5, 32},    {1000, 128}, {2048, 128}, {7168, 128}};
  for (auto [n, block] : shapes) {
    const std::vector<float> x = blocky_input(r, n, block);
    std::vector<float> q = x;
    act_quant_e4m3(q, block);
    const auto want = ref::act_quant_e4m3(x, block);
    const std::string shape = "n=" + std::to_string(n) + " block=" + std::to_string(block);
    check_close("act_quant_e4m3", shape, seed, q, want, kVsRefNmse, kVsRefMaxAbs);
    // Quantisation error per block relative to the block (magnitudes differ by 2^40 between blocks).
    for (size_t b = 0; b < n; b += block) {
      const size_t len = std::min<size_t>(block, n - b);
      const std::vector<float> xb(x.begin() + std::ptrdiff_t(b), x.begin() + std::ptrdiff_t(b + len));
      const std::vector<float> qb(q.begin() + std::ptrdiff_t(b), q.begin() + std::ptrdiff_t(b + len));
      if (len >= 16) {
        EXPECT_LE(compare(qb.data(), as_double(xb).data(), len).nmse, kE4m3QuantNmse) << shape;
      }
    }
  }
}

TEST(ActQuantE4m3, HandExamples) {
  // amax 1000 → 1000/448 = 2.23 → scale 4; 1000/4 = 250 rounds to 256 (spacing 16 in [128, 256)) → 1024.
  std::vector<float> x = {1000.0f, -3.0f, 0.0f};
  act_quant_e4m3(x, 128);
  EXPECT_EQ(x, (std::vector<float>{1024.0f, -3.0f, 0.0f}));
  // amax exactly 448·2^k → scale 2^k exactly (ceil of an exact log2), nothing clamps.
  std::vector<float> y = {448.0f * 8, 3.0f};
  act_quant_e4m3(y, 128);
  EXPECT_EQ(y[0], 448.0f * 8);
  EXPECT_EQ(y[1], 3.0f);  // 3/8 = 0.375 = 1.5·2^-2 is an e4m3 value
  // Values far below the block's amax fall into e4m3 subnormals (spacing 2^-9 · scale) or flush to zero.
  std::vector<float> z = {448.0f, 0.001f, 0.0009f};  // scale 1
  act_quant_e4m3(z, 128);
  EXPECT_EQ(z[1], std::ldexp(1.0f, -9));  // 0.001 > 2^-10 (0.000977): nearer to 2^-9
  EXPECT_EQ(z[2], 0.0f);                  // 0.0009 < 2^-10: nearer to 0
}

TEST(ActQuantE2m1, MatchesReferenceExactly) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  // V4 index heads 64×128 and one head, ragged 45 and 31, a single value, d=5120.
  const std::pair<size_t, uint32_t> shapes[] = {{8192, 32}, {128, 32}, {45, 32}, {31, 32}, {1, 32}, {5120, 32}};
  for (auto [n, block] : shapes) {
    const std::vector<float> x = blocky_input(r, n, block);
    std::vector<float> q = x;
    act_quant_e2m1(q, block);
    const auto want = ref::act_quant_e2m1(x, block);
    const std::string shape = "n=" + std::to_string(n) + " block=" + std::to_string(block);
    check_close("act_quant_e2m1", shape, seed, q, want, kVsRefNmse, kVsRefMaxAbs);
    for (size_t b = 0; b + block <= n; b += block) {
      const std::vector<float> xb(x.begin() + std::ptrdiff_t(b), x.begin() + std::ptrdiff_t(b + block));
      const std::vector<float> qb(q.begin() + std::ptrdiff_t(b), q.begin() + std::ptrdiff_t(b + block));
      EXPECT_LE(compare(qb.data(), as_double(xb).data(), block).nmse, kE2m1QuantNmse) << shape;
    }
  }
}

TEST(ActQuantE2m1, HandExamples) {
  // amax 6 → scale 1: grid ±{0, .5, 1, 1.5, 2, 3, 4, 6}; 2.5 ties to 2 (even code), 5 ties to 4, 0.25 to 0.
  std::vector<float> x = {6.0f, 2.5f, 5.0f, 0.25f, -1.2f, 1.75f};
  act_quant_e2m1(x, 32);
  EXPECT_EQ(x, (std::vector<float>{6.0f, 2.0f, 4.0f, 0.0f, -1.0f, 2.0f}));
}

TEST(FakeQuant, Pow2Ceil) {
  EXPECT_EQ(pow2_ceil(1.0f), 1.0f);
  EXPECT_EQ(pow2_ceil(std::nextafter(1.0f, 2.0f)), 2.0f);
  EXPECT_EQ(pow2_ceil(0.75f), 1.0f);
  EXPECT_EQ(pow2_ceil(0.5f), 0.5f);
  EXPECT_EQ(pow2_ceil(3.0e-7f), std::ldexp(1.0f, -21));
}

}  // namespace

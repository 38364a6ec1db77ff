// The AVX2 activation quantiser (act_q8_avx2.hpp, the AVX2 and AVX-512 tables' quantize_act) against the scalar
// quantize_act_q8 (act_q8.hpp): the same bytes in every layout, the same scales and block sums, on fresh random
// data of several magnitudes, blocks with exact rounding ties, all-zero blocks, subnormal and huge values.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <random>

#include "cmfx/kernels/cpu_kernels.hpp"
#include "support/hex.hpp"

using namespace cmfx;

namespace {

void expect_same(const std::vector<float>& X, uint64_t n, uint64_t cols, act_layout layout, const char* what) {
  const cpu_kernel_table& k = cpu_kernels_for(cpu_arch::avx2);
  ASSERT_NE(k.quantize_act, &quantize_act_q8) << "the AVX2 table should carry the vector quantiser";
  act_q8 want, got;
  quantize_act_q8(X.data(), n, cols, layout, want);
  got.q.assign(n * cols, int8_t(0x5A));  // poisoned: every byte must be written
  got.scale.assign(n * (cols / 32), -1.0f);
  got.bsum.assign(n * (cols / 32), 0x7777);
  k.quantize_act(X.data(), n, cols, layout, got);
  ASSERT_EQ(got.n, n);
  ASSERT_EQ(got.blocks, cols / 32);
  ASSERT_EQ(got.layout, layout);
  for (uint64_t i = 0; i < n * cols; ++i)
    ASSERT_EQ(got.q[i], want.q[i]) << what << " layout " << int(layout) << " byte " << i << " of " << n << "x" << cols;
  for (uint64_t i = 0; i < n * (cols / 32); ++i) {
    ASSERT_EQ(std::memcmp(&got.scale[i], &want.scale[i], 4), 0) << what << " scale of block " << i;
    ASSERT_EQ(got.bsum[i], want.bsum[i]) << what << " sum of block " << i;
  }
}

TEST(ActQ8Avx2, MatchesScalarBitForBit) {
  if (!cpu_supports(cpu_arch::avx2)) GTEST_SKIP() << "this CPU has no AVX2";
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  uint64_t checked = 0;
  for (auto [n, cols] : {std::pair{1ull, 32ull}, {3ull, 96ull}, {1ull, 4096ull}, {5ull, 2080ull}, {2ull, 8192ull}, {9ull, 608ull}})
    for (float mag : {1.0f, 3e-3f, 40.0f, 1e-30f, 1e-36f, 1e30f}) {
      std::vector<float> X(n * cols);
      for (auto& x : X) x = mag * nd(g);
      if (cols >= 96) {
        // block 1: rounding ties — amax 127 makes inv exactly 1, so k + 0.5 lands on a tie
        for (uint64_t j = 0; j < 32; ++j) X[32 + j] = float(int(j) - 16) + 0.5f;
        X[32 + 5] = 127.0f;
        // block 2: all zeros (scale 1, bytes 0), with a negative zero
        for (uint64_t j = 0; j < 32; ++j) X[64 + j] = 0.0f;
        X[64 + 3] = -0.0f;
      }
      for (act_layout l : {act_layout::natural, act_layout::nibble, act_layout::crumb}) {
        expect_same(X, n, cols, l, "random");
        ++checked;
      }
    }
  std::printf("[ act-q8 ] seed %llu: %llu cases bit-identical\n", (unsigned long long)seed, (unsigned long long)checked);
}

}  // namespace

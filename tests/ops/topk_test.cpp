// Exact top-k: the fast nth_element/sort selection must equal a full stable sort, index for index, on data
// full of ties, −inf and NaN, at the real sizes (experts 256/384, index top-512, vocabulary 129280).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cmfx/ops/topk.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "op_test_util.hpp"

using namespace cmfx;
using namespace cmfx::test;

namespace {

constexpr float kTieStep = 0.25f;  // values rounded to multiples of this: many exact ties
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::vector<uint32_t> run_topk(const std::vector<float>& s, size_t k) {
  std::vector<topk_entry> scratch(s.size());
  std::vector<uint32_t> out(std::min(k, s.size()), 0xFFFFFFFFu);
  const size_t got = topk(s, k, scratch, out);
  EXPECT_EQ(got, std::min(k, s.size()));
  return out;
}

TEST(TopK, ExactOnTiesAgainstStableSort) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  const std::pair<size_t, size_t> shapes[] = {{256, 6},   {384, 6},     {128, 3},      {1000, 512},   {4096, 512},
                                              {16384, 2048}, {129280, 1}, {129280, 50}, {129280, 512}, {7, 10},
                                              {8, 8},     {1, 1},       {33, 0}};
  for (auto [n, k] : shapes)
    for (float spread : {2.0f, 40.0f}) {  // 2: a handful of distinct values; 40: mostly distinct
      std::vector<float> s = r.normal(n, spread);
      for (auto& v : s) {
        v = std::round(v / kTieStep) * kTieStep;
        const float u = r.uniform(0, 1);
        if (u < 0.01f) v = kNegInf;
        else if (u < 0.02f) v = kNaN;
        else if (u < 0.03f) v = -0.0f;
      }
      const auto want = ref::topk(s, k);
      const auto got = run_topk(s, k);
      EXPECT_EQ(got, want) << "n=" << n << " k=" << k << " spread=" << spread << " seed " << seed;
    }
  std::printf("[ops] topk           13 shapes x 2 spreads, exact index match (seed %llu)\n",
              static_cast<unsigned long long>(seed));
}

TEST(TopK, TieRuleByHand) {
  EXPECT_EQ(run_topk({1, 3, 3, 2, 3}, 2), (std::vector<uint32_t>{1, 2}));
  EXPECT_EQ(run_topk({1, 3, 3, 2, 3}, 5), (std::vector<uint32_t>{1, 2, 4, 3, 0}));
  // NaN ranks as −inf, ties with −inf resolved by index; −0 and +0 tie.
  EXPECT_EQ(run_topk({kNaN, kNegInf, 0.0f}, 3), (std::vector<uint32_t>{2, 0, 1}));
  EXPECT_EQ(run_topk({0.0f, -0.0f, kNaN}, 2), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(run_topk({-0.0f, 0.0f}, 1), (std::vector<uint32_t>{0}));
  // k > n returns n.
  EXPECT_EQ(run_topk({5, 6}, 10), (std::vector<uint32_t>{1, 0}));
}

TEST(TopK, SelectionMarginByHand) {
  std::vector<topk_entry> sc(8);
  // the 2nd largest (3) against the 3rd (2.5), over max |s| = 4 (the -inf mask and +inf pin left out)
  const std::vector<float> s{1, 4, kNegInf, 2.5f, 3, std::numeric_limits<float>::infinity(), -4};
  EXPECT_FLOAT_EQ(selection_margin(s, 2, sc), 0.5f / 4.0f);
  EXPECT_FLOAT_EQ(selection_margin(s, 1, sc), 1.0f / 4.0f);
  EXPECT_EQ(selection_margin(s, 2, std::span<topk_entry>(sc).first(7)), 0.125f);
  EXPECT_EQ(selection_margin(std::vector<float>{3, 3, 1}, 1, sc), 0.0f);                         // an exact tie
  EXPECT_TRUE(std::isinf(selection_margin(s, 5, sc)));                       // 5 finite values: nothing left out
  EXPECT_TRUE(std::isinf(selection_margin(s, 0, sc)));
  EXPECT_EQ(selection_margin(std::vector<float>{0, 0, 0}, 1, sc), 0.0f);
  EXPECT_THROW(selection_margin(s, 2, std::span<topk_entry>(sc).first(3)), std::invalid_argument);
}

TEST(TopK, SelectionMarginMatchesSortedGap) {
  const uint64_t seed = fresh_seed();
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d;
  for (size_t n : {2u, 7u, 256u, 1000u})
    for (size_t k : {1u, 6u, 512u}) {
      std::vector<float> s(n);
      for (auto& x : s) x = d(g);
      std::vector<topk_entry> sc(n);
      std::vector<float> srt(s);
      std::sort(srt.begin(), srt.end(), std::greater<float>());
      float amax = 0;
      for (float x : s) amax = std::max(amax, std::fabs(x));
      const float want = k < n ? (srt[k - 1] - srt[k]) / amax : std::numeric_limits<float>::infinity();
      EXPECT_EQ(selection_margin(s, k, sc), want) << "n " << n << " k " << k << " seed " << seed;
    }
}

TEST(TopK, RejectsShortBuffers) {
  std::vector<float> s(10, 1.0f);
  std::vector<topk_entry> small(9), ok(10);
  std::vector<uint32_t> out(3), tiny(2);
  EXPECT_THROW(topk(s, 3, small, out), std::invalid_argument);
  EXPECT_THROW(topk(s, 3, ok, tiny), std::invalid_argument);
}

}  // namespace

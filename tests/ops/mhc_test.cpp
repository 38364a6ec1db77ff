// Hyper-connections: hc_pre (mixes, Sinkhorn ending on a column pass, fold), hc_post (C's first index summed)
// and hc_head against the float64 reference at d = 4096 / 5120 (hc = 4) and small and ragged shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cmfx/ops/mhc.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "op_test_util.hpp"

using namespace cmfx;
using namespace cmfx::test;

namespace {

constexpr double kMixNmse = 1e-13;     // pre, post, C: double math, one f32 rounding
constexpr double kMixMaxAbs = 5e-7;    // values ≤ 2
constexpr double kFoldNmse = 1e-13;    // y and X': f32 folds of ≤ hc+1 terms
constexpr double kFoldMaxAbs = 5e-5;   // |y|, |X'| reach ~110 (8x outliers, 4 copies): a few f32 ulps at 64–128
constexpr double kColSumTol = 1e-4;    // ends on a column pass: column k sums to 1 − hc_eps/colsum_k

struct hc_case {
  uint32_t hc;
  size_t d;
  uint32_t iters;
  float norm_eps;
};
const hc_case kCases[] = {{4, 4096, 20, 1e-6f}, {4, 5120, 20, 1e-20f}, {4, 7, 20, 1e-6f}, {4, 1000, 1, 1e-6f},
                          {4, 64, 3, 1e-20f},   {2, 33, 20, 1e-6f},    {3, 129, 5, 1e-6f}, {1, 16, 20, 1e-6f}};
constexpr float kHcEps = 1e-6f;

struct hc_weights {
  std::vector<float> fn, base, scale;
};
hc_weights make_weights(op_rng& r, uint32_t hc, size_t d, size_t rows) {
  hc_weights w;
  w.fn = r.normal(rows * hc * d, 1.0f / std::sqrt(float(hc * d)));  // mixes m ~ N(0, 1)
  w.base = r.normal(rows, 1.0f);
  w.scale = {r.uniform(0.3f, 2.0f), r.uniform(0.3f, 2.0f), r.uniform(0.3f, 2.0f)};
  return w;
}

std::string label(const hc_case& c) {
  return "hc=" + std::to_string(c.hc) + " d=" + std::to_string(c.d) + " it=" + std::to_string(c.iters);
}

TEST(HcPre, MatchesReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  for (const hc_case& c : kCases) {
    const size_t rows = size_t(2 + c.hc) * c.hc;
    const std::vector<float> X = r.normal(c.hc * c.d, r.uniform(0.1f, 3.0f));
    const hc_weights w = make_weights(r, c.hc, c.d, rows);
    std::vector<float> pre(c.hc), post(c.hc), C(c.hc * c.hc), y(c.d);
    hc_pre(X, w.fn, w.base, w.scale, c.hc, c.norm_eps, kHcEps, c.iters, pre, post, C, y);
    const auto want = ref::hc_pre(X, w.fn, w.base, w.scale, c.hc, c.norm_eps, kHcEps, c.iters);
    check_close("hc_pre pre", label(c), seed, pre, want.pre, kMixNmse, kMixMaxAbs);
    check_close("hc_pre post", label(c), seed, post, want.post, kMixNmse, kMixMaxAbs);
    check_close("hc_pre C", label(c), seed, C, want.C, kMixNmse, kMixMaxAbs);
    check_close("hc_pre y", label(c), seed, y, want.y, kFoldNmse, kFoldMaxAbs);
    for (uint32_t k = 0; k < c.hc; ++k) {
      double col = 0;
      for (uint32_t j = 0; j < c.hc; ++j) col += C[j * c.hc + k];
      EXPECT_NEAR(col, 1.0, kColSumTol) << "column " << k << " " << label(c) << " seed " << seed;
    }
  }
}

TEST(HcPre, EndsOnColumnPass) {
  // Strongly skewed mixes: after 20 iterations columns sum to 1 exactly enough, rows visibly do not.
  const uint32_t hc = 4;
  const size_t d = 8, rows = 24;
  std::vector<float> X(hc * d, 1.0f), fn(rows * hc * d, 0.0f), base(rows, 0.0f), scale = {1, 1, 1};
  for (uint32_t j = 0; j < hc; ++j)
    for (uint32_t k = 0; k < hc; ++k) base[8 + j * hc + k] = float((j * 7 + k * 3) % 5) * 3.0f;
  std::vector<float> pre(hc), post(hc), C(hc * hc), y(d);
  hc_pre(X, fn, base, scale, hc, 1e-6f, 1e-6f, 20, pre, post, C, y);
  const auto want = ref::hc_pre(X, fn, base, scale, hc, 1e-6, 1e-6, 20);
  double worst_row = 0;
  for (uint32_t j = 0; j < hc; ++j) {
    double row = 0, col = 0;
    for (uint32_t k = 0; k < hc; ++k) {
      row += C[j * hc + k];
      col += C[k * hc + j];
      EXPECT_NEAR(C[j * hc + k], want.C[j * hc + k], 1e-6);
    }
    EXPECT_NEAR(col, 1.0, kColSumTol);
    worst_row = std::max(worst_row, std::fabs(row - 1.0));
  }
  EXPECT_GT(worst_row, 1e-4) << "rows sum to 1: the iteration ended on a row pass";
  for (uint32_t j = 0; j < hc; ++j) {  // m = 0 → pre = sigmoid(0) + eps, post = 2·sigmoid(0)
    EXPECT_FLOAT_EQ(pre[j], 0.5f + 1e-6f);
    EXPECT_FLOAT_EQ(post[j], 1.0f);
  }
}

TEST(HcPost, MatchesReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  for (const hc_case& c : kCases) {
    const std::vector<float> X = r.normal(c.hc * c.d), o = r.normal(c.d, 2.0f);
    std::vector<float> post(c.hc), C(c.hc * c.hc);
    for (auto& v : post) v = r.uniform(0.0f, 2.0f);
    for (auto& v : C) v = r.uniform(0.0f, 1.0f);
    std::vector<float> out(X.size());
    hc_post(o, X, post, C, c.hc, out);
    const auto want = ref::hc_post(o, X, post, C, c.hc);
    check_close("hc_post", label(c), seed, out, want, kFoldNmse, kFoldMaxAbs);
  }
}

TEST(HcPost, SumsOverFirstIndex) {
  // C[0][1] = 1, all else 0, post = 0: X'[1] = X[0] and X'[0] = 0 (the transpose would give X'[0] = X[1]).
  const uint32_t hc = 2;
  const std::vector<float> X = {1, 2, 3, 10, 20, 30}, o = {5, 5, 5}, post = {0, 0}, C = {0, 1, 0, 0};
  std::vector<float> out(6);
  hc_post(o, X, post, C, hc, out);
  EXPECT_EQ(out, (std::vector<float>{0, 0, 0, 1, 2, 3}));
}

TEST(HcHead, MatchesReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  for (const hc_case& c : kCases) {
    const std::vector<float> X = r.normal(c.hc * c.d, r.uniform(0.1f, 3.0f));
    const hc_weights w = make_weights(r, c.hc, c.d, c.hc);
    const float scale = r.uniform(0.3f, 2.0f);
    std::vector<float> pre(c.hc), y(c.d);
    hc_head(X, w.fn, w.base, scale, c.hc, c.norm_eps, kHcEps, pre, y);
    const auto want = ref::hc_head(X, w.fn, w.base, scale, c.hc, c.norm_eps, kHcEps);
    check_close("hc_head pre", label(c), seed, pre, want.pre, kMixNmse, kMixMaxAbs);
    check_close("hc_head y", label(c), seed, y, want.y, kFoldNmse, kFoldMaxAbs);
  }
}

TEST(Hc, RejectsBadShapes) {
  std::vector<float> X(4 * 8), fn(24 * 32), base(24), scale(3), pre(4), post(4), C(16), y(8);
  EXPECT_THROW(hc_pre(X, fn, base, scale, 9, 1e-6f, 1e-6f, 20, pre, post, C, y), std::invalid_argument);
  EXPECT_THROW(hc_pre(X, fn, base, scale, 3, 1e-6f, 1e-6f, 20, pre, post, C, y), std::invalid_argument);
  std::vector<float> y_bad(7);
  EXPECT_THROW(hc_pre(X, fn, base, scale, 4, 1e-6f, 1e-6f, 20, pre, post, C, y_bad), std::invalid_argument);
}

}  // namespace

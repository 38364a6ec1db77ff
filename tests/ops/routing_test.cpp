// MoE gate math: sqrt-softplus, score routing (V4: 256 experts, V4.1: 384, DSpark: 128 top-3) and hash routing
// (tid2eid as int32 and as f32, vocabulary 129280) against the float64 reference; ids must match exactly.
// Clamped SwiGLU at the expert widths 2048 / 2304 and ragged sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cmfx/ops/routing.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "op_test_util.hpp"

using namespace cmfx;
using namespace cmfx::test;

namespace {

constexpr double kWeightNmse = 1e-13;    // weights: double sums, one f32 rounding
constexpr double kWeightMaxAbs = 3e-7;   // weights ≤ 1.5
constexpr double kWeightSumTol = 1e-6;   // Σw = route_scale
constexpr double kSwigluNmse = 1e-12;    // f32 exp, silu and two products
constexpr double kSwigluMaxAbs = 4e-5;   // outputs up to |silu(10)·10·w| ≈ 100·w: a few f32 ulps at 64–128
constexpr double kSwigluNoClampMaxAbs = 5e-4;  // limit 0 (no clamp): outputs reach ~4000
constexpr uint32_t kVocab = 129280;

TEST(Routing, SqrtSoftplusThreshold) {
  EXPECT_EQ(sqrt_softplus(25.0f), 5.0f);  // linear past 20
  EXPECT_FLOAT_EQ(sqrt_softplus(20.0f), float(std::sqrt(std::log1p(std::exp(20.0)))));
  EXPECT_FLOAT_EQ(sqrt_softplus(0.0f), float(std::sqrt(std::log(2.0))));
  EXPECT_FLOAT_EQ(sqrt_softplus(-30.0f), float(std::sqrt(std::exp(-30.0))));
  EXPECT_GT(sqrt_softplus(-200.0f), -1.0f);  // no NaN
}

struct score_case {
  size_t experts;
  route_config cfg;
  bool bias;
};

TEST(Routing, ScoreRoutingMatchesReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  const score_case cases[] = {{256, {6, 1.5f, 0.0f, 1.0f}, true},   {384, {6, 1.5f, 1e-20f, 1.0f}, true},
                              {128, {3, 1.5f, 1e-20f, 1.0f}, true},  {256, {6, 1.5f, 0.0f, 1.0f}, false},
                              {257, {8, 2.5f, 0.0f, 0.7f}, true},    {6, {6, 1.0f, 0.0f, 1.0f}, true}};
  for (const score_case& c : cases)
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<float> z = r.normal(c.experts, 3.0f);
      if (trial % 4 == 1)  // many exact ties: equal logits and no bias spread
        for (auto& v : z) v = std::round(v);
      if (trial % 4 == 2) z[r.below(c.experts)] = 25.0f;  // past the softplus threshold
      std::vector<float> bias(c.bias ? c.experts : 0);
      for (auto& b : bias) b = trial % 4 == 1 ? 0.0f : r.uniform(-0.1f, 0.1f);
      std::vector<float> s(c.experts), w(c.cfg.top_k);
      std::vector<uint32_t> idx(c.cfg.top_k);
      std::vector<topk_entry> scratch(c.experts);
      route_score(z, c.bias ? bias.data() : nullptr, c.cfg, s, scratch, idx, w);
      const auto want = ref::route_score(z, bias, c.cfg.top_k, c.cfg.route_scale, c.cfg.norm_eps, c.cfg.temp);
      ASSERT_EQ(idx, want.ids) << "experts " << c.experts << " trial " << trial << " seed " << seed;
      EXPECT_EQ(s, want.s);
      if (trial == 0)
        check_close("route_score", std::to_string(c.experts) + " top" + std::to_string(c.cfg.top_k), seed, w, want.w,
                    kWeightNmse, kWeightMaxAbs);
      else
        EXPECT_LE(compare(w.data(), want.w.data(), w.size()).max_abs, kWeightMaxAbs) << "seed " << seed;
      double sum = 0;
      for (float v : w) sum += v;
      EXPECT_NEAR(sum, c.cfg.route_scale, kWeightSumTol);
    }
}

template <class T>
void hash_case(op_rng& r, uint64_t seed, size_t experts, const char* label) {
  const route_config cfg{6, 1.5f, 0.0f, 1.0f};
  std::vector<T> table(size_t(kVocab) * cfg.top_k);
  for (size_t row = 0; row < kVocab; ++row)
    for (uint32_t j = 0; j < cfg.top_k; ++j) table[row * cfg.top_k + j] = T(r.below(experts));
  for (int trial = 0; trial < 50; ++trial) {
    const uint64_t token = trial == 0 ? kVocab + 1000 : trial == 1 ? kVocab - 1 : r.below(kVocab);
    const std::vector<float> z = r.normal(experts, 2.0f);
    std::vector<float> s(experts), w(6);
    std::vector<uint32_t> idx(6);
    route_hash(z, table, token, cfg, s, idx, w);
    const auto want = ref::route_hash(z, table, token, 6, 1.5, 0.0);
    ASSERT_EQ(idx, want.ids) << label << " token " << token << " seed " << seed;
    if (trial == 2)
      check_close(label, std::to_string(experts) + " experts", seed, w, want.w, kWeightNmse, kWeightMaxAbs);
    else
      EXPECT_LE(compare(w.data(), want.w.data(), w.size()).max_abs, kWeightMaxAbs) << "seed " << seed;
  }
}

TEST(Routing, HashRoutingMatchesReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  hash_case<int32_t>(r, seed, 256, "route_hash i32");
  hash_case<float>(r, seed, 256, "route_hash f32");
  hash_case<int32_t>(r, seed, 384, "route_hash i32");
}

TEST(Routing, HashRoutingUsesUnbiasedScoresAndRejectsBadIds) {
  const std::vector<float> z = {0.0f, 1.0f, 2.0f, 3.0f};
  const std::vector<int32_t> table = {3, 0, 1, 2};  // V = 2 rows of top-2
  const route_config cfg{2, 1.0f, 0.0f, 1.0f};
  std::vector<float> s(4), w(2);
  std::vector<uint32_t> idx(2);
  route_hash(z, table, 7, cfg, s, idx, w);  // token ≥ V → last row
  EXPECT_EQ(idx, (std::vector<uint32_t>{1, 2}));
  EXPECT_NEAR(w[0], s[1] / (s[1] + s[2]), 1e-7);
  const std::vector<float> bad_f = {0.5f, 1.0f};
  const std::vector<int32_t> bad_i = {4, 1};
  EXPECT_THROW(route_hash(z, bad_f, 0, cfg, s, idx, w), std::out_of_range);
  EXPECT_THROW(route_hash(z, bad_i, 0, cfg, s, idx, w), std::out_of_range);
}

TEST(SwigluClamp, MatchesReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  for (size_t n : {1, 37, 2048, 2304, 4096, 5121})
    for (float limit : {10.0f, 0.0f}) {
      const std::vector<float> gt = r.normal(n, 6.0f), v = r.normal(n, 6.0f);  // clamps on both sides
      const float wgt = r.uniform(0.05f, 1.0f);
      std::vector<float> out(n);
      swiglu_clamp(gt, v, limit, out, wgt);
      const auto want = ref::swiglu_clamp(gt, v, limit, wgt);
      check_close("swiglu_clamp", "n=" + std::to_string(n) + " limit=" + g(limit), seed, out, want, kSwigluNmse,
                  limit > 0 ? kSwigluMaxAbs : kSwigluNoClampMaxAbs);
    }
}

TEST(SwigluClamp, AsymmetricClamp) {
  const std::vector<float> gt = {-30.0f, 15.0f, -3.0f}, v = {-50.0f, 20.0f, 2.0f};
  std::vector<float> out(3);
  swiglu_clamp(gt, v, 10.0f, out);
  const auto silu = [](double x) { return x / (1.0 + std::exp(-x)); };
  EXPECT_NEAR(out[0], silu(-30.0) * -10.0, 1e-15);  // gate not clamped from below, value clamped to −10
  EXPECT_NEAR(out[1], silu(10.0) * 10.0, 1e-4);     // gate clamped to 10 from above, value to 10
  EXPECT_NEAR(out[2], silu(-3.0) * 2.0, 1e-6);
}

}  // namespace

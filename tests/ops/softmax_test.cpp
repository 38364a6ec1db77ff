// attend_sink / softmax_inplace against the float64 reference: masked keys, sinks of every size, all-masked rows.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cmfx/ops/softmax.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "op_test_util.hpp"

using namespace cmfx;
using namespace cmfx::test;

namespace {

constexpr double kSoftmaxNmse = 1e-13;    // f32 exp (≤ 1 ulp) and one f32 rounding of each p
constexpr double kSoftmaxMaxAbs = 2e-7;   // p ≤ 1
constexpr double kSumTolerance = 1e-6;    // Σp + p_sink = 1
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Key counts of real rows: 1, the 128-slot window, window + 512 picks (640), ragged, a long HCA row.
const size_t kLengths[] = {1, 5, 128, 129, 640, 1000, 4096};

TEST(AttendSink, MatchesReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  for (size_t n : kLengths)
    for (float mask_frac : {0.0f, 0.3f, 0.9f})
      for (float sink_shift : {-30.0f, 0.0f, 5.0f, 40.0f}) {
        std::vector<float> l = r.normal(n, 4.0f);
        for (auto& v : l)
          if (r.uniform(0, 1) < mask_frac) v = kNegInf;
        l[r.below(n)] = r.uniform(-2, 2);  // at least one live key
        const float sink = r.uniform(-3, 3) + sink_shift;
        std::vector<float> p(n);
        const double den = attend_sink(l, sink, p);
        EXPECT_GT(den, 0.0);
        const auto want = ref::attend_sink(l, sink);
        check_close("attend_sink", "n=" + std::to_string(n) + " mask=" + g(mask_frac) + " sink+" + g(sink_shift), seed,
                    p, want, kSoftmaxNmse, kSoftmaxMaxAbs);
        double sum = 0.0, m = sink;
        for (size_t k = 0; k < n; ++k) {
          sum += p[k];
          if (l[k] == kNegInf) {
            EXPECT_EQ(p[k], 0.0f) << "masked key got mass, seed " << seed;
          }
          m = std::max(m, double(l[k]));
        }
        EXPECT_NEAR(sum + std::exp(double(sink) - m) / den, 1.0, kSumTolerance) << "seed " << seed;
        EXPECT_LT(sum, 1.0 + kSumTolerance);
      }
}

TEST(AttendSink, AllMaskedGivesZero) {
  std::vector<float> l(128, kNegInf), p(128, 1.0f);
  attend_sink(l, 0.5f, p);
  for (float v : p) EXPECT_EQ(v, 0.0f);
  std::fill(p.begin(), p.end(), 1.0f);
  EXPECT_EQ(attend_sink(l, kNegInf, p), 0.0);  // no sink either: still zeros, no NaN
  for (float v : p) EXPECT_EQ(v, 0.0f);
}

TEST(AttendSink, SinkOnlyInDenominator) {
  // Two equal keys and a sink of the same logit: each key gets 1/3.
  std::vector<float> l = {2.0f, 2.0f}, p(2);
  attend_sink(l, 2.0f, p);
  EXPECT_NEAR(p[0], 1.0 / 3, 1e-7);
  EXPECT_NEAR(p[1], 1.0 / 3, 1e-7);
  // A sink of −inf is plain softmax.
  attend_sink(l, kNegInf, p);
  EXPECT_FLOAT_EQ(p[0], 0.5f);
}

TEST(SoftmaxInplace, MatchesReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  for (size_t n : kLengths)
    for (float mask_frac : {0.0f, 0.5f}) {
      std::vector<float> x = r.normal(n, 5.0f);
      for (auto& v : x)
        if (r.uniform(0, 1) < mask_frac) v = kNegInf;
      x[r.below(n)] = 1.0f;
      const auto want = ref::softmax(x);
      softmax_inplace(x);
      check_close("softmax", "n=" + std::to_string(n) + " mask=" + g(mask_frac), seed, x, want, kSoftmaxNmse,
                  kSoftmaxMaxAbs);
      double sum = 0;
      for (float v : x) sum += v;
      EXPECT_NEAR(sum, 1.0, kSumTolerance);
    }
  std::vector<float> dead(7, kNegInf);
  softmax_inplace(dead);
  for (float v : dead) EXPECT_EQ(v, 0.0f);
}

}  // namespace

// RoPE: golden frequencies from the spec (§3.3), the adjacent-pair convention on a hand-computed example,
// and apply/inverse against the float64 complex-multiplication reference at the real head shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cmfx/ops/rope.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "op_test_util.hpp"

using namespace cmfx;
using namespace cmfx::test;

namespace {

constexpr double kFreqRel = 1e-6;          // spec goldens carry 6–7 significant digits
constexpr double kFreqVsRefRel = 1e-13;    // fast table vs reference formulation, both double
constexpr double kRopeNmse = 1e-13;        // one f32 rounding of each rotated channel
constexpr double kRopeMaxAbs = 4e-6;       // half an f32 ulp of channels < 64 (N(0,1), 8x outliers)
constexpr double kRoundTripMaxAbs = 4e-6;  // apply then inverse: two f32 roundings

const rope_config kCompressed{64, 160000.0, true};
const rope_config kSwa{64, 10000.0, false};

void expect_rel(double got, double want, double rel, const char* what) {
  EXPECT_NEAR(got, want, std::fabs(want) * rel) << what;
}

TEST(Rope, GoldenFrequenciesCompressed) {
  const rope_table t(kCompressed);
  ASSERT_EQ(t.pairs(), 32u);
  expect_rel(t.freq(0), 1.0, kFreqRel, "f_0");
  expect_rel(t.freq(1), 0.687656, kFreqRel, "f_1");
  expect_rel(t.freq(15), 3.635539e-3, kFreqRel, "f_15");
  expect_rel(t.freq(16), 2.265625e-3, kFreqRel, "f_16");
  expect_rel(t.freq(31), 5.680529e-7, kFreqRel, "f_31");
  // lo = 15, hi = 25: f_15 untouched, f_25 and above fully divided by the factor 16.
  expect_rel(t.freq(15), std::pow(160000.0, -30.0 / 64), 1e-15, "f_15 = base^(-30/64)");
  expect_rel(t.freq(25), std::pow(160000.0, -50.0 / 64) / 16, 1e-15, "f_25 = base^(-50/64)/16");
  expect_rel(t.freq(20), std::pow(160000.0, -40.0 / 64) * (0.5 / 16 + 0.5), 1e-15, "f_20 half ramp");
}

TEST(Rope, GoldenFrequenciesSwa) {
  const rope_table t(kSwa);
  expect_rel(t.freq(0), 1.0, kFreqRel, "f_0");
  expect_rel(t.freq(1), 0.7498942, kFreqRel, "f_1");
  expect_rel(t.freq(31), 1.333521e-4, kFreqRel, "f_31");
}

TEST(Rope, TableMatchesReference) {
  for (const rope_config& c : {kCompressed, kSwa, rope_config{16, 500.0, true, 4.0, 256.0, 8.0, 1.0}}) {
    const rope_table t(c);
    const auto want = ref::rope_freqs(c.dim, c.base, c.yarn, c.factor, c.original, c.beta_fast, c.beta_slow);
    for (uint32_t i = 0; i < t.pairs(); ++i) expect_rel(t.freq(i), want[i], kFreqVsRefRel, "freq vs ref");
  }
}

// dim 4, base 100 → f = {1, 0.1}; x = [1, 2, 3, 4] at pos 3. Adjacent pairs (x0,x1) by 3 rad, (x2,x3) by
// 0.3 rad. The half-split convention would pair (x0,x2) and (x1,x3) and give different numbers.
TEST(Rope, AdjacentPairsHandComputed) {
  const rope_table t(rope_config{4, 100.0, false});
  std::vector<float> x = {1, 2, 3, 4};
  apply_rope(x, 3, t, false);
  const double adjacent[4] = {-1.272232513, -1.838864985, 1.683928641, 4.707906576};
  const double half_split[4] = {-1.413352521, 0.728592152, -2.828857482, 4.412386370};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(x[i], adjacent[i], 1e-6) << "channel " << i;
    EXPECT_GT(std::fabs(x[i] - half_split[i]), 0.1) << "channel " << i << " matches the half-split convention";
  }
  apply_rope(x, 3, t, true);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(x[i], float(i + 1), 1e-6);
}

TEST(Rope, PositionZeroIsIdentity) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  for (const rope_config& c : {kCompressed, kSwa}) {
    const rope_table t(c);
    const std::vector<float> x = r.normal(512);
    for (bool inv : {false, true}) {
      std::vector<float> y = x;
      apply_rope_last(y, 64, 0, t, inv);
      EXPECT_EQ(y, x) << "seed " << seed;
    }
  }
}

// heads × head_dim with the rope on the last 64 channels: V4 q (64×512), kv (1×512), index q (64×128),
// a bare 64-channel tail, and a custom 16-dim table on 40-wide heads.
TEST(Rope, ApplyAndInverseMatchReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  struct shape {
    uint32_t heads, head_dim;
    rope_config cfg;
  };
  const rope_config small{16, 500.0, true, 4.0, 256.0, 8.0, 1.0};
  const shape shapes[] = {{64, 512, kCompressed}, {64, 512, kSwa}, {1, 512, kCompressed},
                          {64, 128, kCompressed}, {1, 64, kSwa},   {7, 40, small}};
  const int64_t fixed_pos[] = {1, 127, 65535, 65536, 1000000};
  for (const shape& s : shapes) {
    const rope_table t(s.cfg);
    const auto f = ref::rope_freqs(s.cfg.dim, s.cfg.base, s.cfg.yarn, s.cfg.factor, s.cfg.original, s.cfg.beta_fast,
                                   s.cfg.beta_slow);
    for (int trial = 0; trial < 6; ++trial) {
      const int64_t pos = trial < 5 ? fixed_pos[trial] : int64_t(r.below(1000001));
      for (bool inv : {false, true}) {
        const std::vector<float> x = r.normal(size_t(s.heads) * s.head_dim);
        std::vector<float> y = x, y_cs = x;
        std::vector<double> want(x.begin(), x.end());
        std::vector<double> cs(s.cfg.dim);
        t.rotation(pos, cs);
        for (uint32_t h = 0; h < s.heads; ++h) {
          std::span<float> head(y.data() + size_t(h) * s.head_dim, s.head_dim);
          apply_rope_last(head, s.cfg.dim, pos, t, inv);
          apply_rope_cs(std::span<float>(y_cs.data() + size_t(h) * s.head_dim + s.head_dim - s.cfg.dim, s.cfg.dim), cs,
                        inv);
          ref::rope(want, size_t(h) * s.head_dim + s.head_dim - s.cfg.dim, pos, f, inv);
        }
        EXPECT_EQ(y, y_cs) << "apply_rope_cs differs from apply_rope, seed " << seed;
        check_close("rope", std::to_string(s.heads) + "x" + std::to_string(s.head_dim) + "/" +
                                std::to_string(s.cfg.dim) + " pos=" + std::to_string(pos) + (inv ? " inv" : ""),
                    seed, y, want, kRopeNmse, kRopeMaxAbs);
        // Inverse of apply is the identity (up to two f32 roundings).
        apply_rope_last(std::span<float>(y.data(), s.head_dim), s.cfg.dim, pos, t, !inv);
        for (uint32_t i = 0; i < s.head_dim; ++i)
          EXPECT_NEAR(y[i], x[i], kRoundTripMaxAbs) << "round trip, pos " << pos << " seed " << seed;
      }
    }
  }
}

TEST(Rope, RejectsBadShapes) {
  const rope_table t(kSwa);
  std::vector<float> x(63);
  EXPECT_THROW(apply_rope(x, 1, t, false), std::invalid_argument);
  EXPECT_THROW(apply_rope_last(x, 64, 1, t, false), std::invalid_argument);
  EXPECT_THROW(rope_table(rope_config{63, 10000.0, false}), std::invalid_argument);
}

}  // namespace

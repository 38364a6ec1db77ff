// rmsnorm / rmsnorm_heads against the float64 reference, fresh inputs per run (seed printed on failure).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "cmfx/ops/rmsnorm.hpp"
#include "cmfx/ref/ops_ref.hpp"
#include "op_test_util.hpp"

using namespace cmfx;
using namespace cmfx::test;

namespace {

// f32 output rounding only (the reduction is in double): ~2^-24 relative per element.
constexpr double kRmsNmse = 1e-13;
constexpr double kRmsMaxAbs = 4e-6;     // outputs reach ~60 (8x outliers times weights up to 1.5): ½ ulp < 64
constexpr double kRmsTinyNmse = 1e-13;  // inputs whose squares are near or below the f32 range

TEST(RmsNorm, MatchesReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  const size_t dims[] = {1, 7, 100, 512, 1023, 1024, 4096, 4097, 5120};
  for (size_t d : dims)
    for (float eps : {1e-6f, 1e-20f})
      for (bool with_w : {false, true}) {
        const std::vector<float> x = r.normal(d, r.uniform(0.01f, 3.0f));
        std::vector<float> w(d);
        for (auto& v : w) v = r.uniform(0.5f, 1.5f);
        std::vector<float> out(d);
        rmsnorm(x, with_w ? w.data() : nullptr, eps, out);
        const auto want = ref::rmsnorm(x, with_w ? w.data() : nullptr, eps);
        check_close("rmsnorm", "d=" + std::to_string(d) + (with_w ? " w" : "") + " eps=" + g(eps), seed,
                    out, want, kRmsNmse, kRmsMaxAbs);
      }
}

TEST(RmsNorm, TinyInputsAndTinyEps) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  // 1e-10: squares near eps=1e-20; 1e-19: squares in the f32 subnormal range; 1e-30: squares underflow f32.
  for (float mag : {1e-10f, 1e-19f, 1e-30f})
    for (size_t d : {64, 4096, 5121}) {
      const std::vector<float> x = r.normal(d, mag);
      std::vector<float> out(d);
      rmsnorm(x, nullptr, 1e-20f, out);
      const auto want = ref::rmsnorm(x, nullptr, 1e-20f);
      check_close("rmsnorm tiny", "mag=" + g(mag) + " d=" + std::to_string(d), seed, out, want,
                  kRmsTinyNmse, kRmsMaxAbs);
    }
  // Zero vector with eps 1e-20: finite zeros.
  std::vector<float> z(128, 0.0f), out(128, 1.0f);
  rmsnorm(z, nullptr, 1e-20f, out);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(RmsNorm, InPlace) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  std::vector<float> x = r.normal(4096);
  const auto want = ref::rmsnorm(x, nullptr, 1e-6);
  rmsnorm(x, nullptr, 1e-6f, x);
  check_close("rmsnorm inplace", "d=4096", seed, x, want, kRmsNmse, kRmsMaxAbs);
}

TEST(RmsNormHeads, MatchesReference) {
  const uint64_t seed = fresh_seed();
  op_rng r(seed);
  const std::pair<uint32_t, uint32_t> shapes[] = {{64, 512}, {64, 128}, {32, 128}, {3, 7}, {1, 4096}, {5, 33}};
  for (auto [h, hd] : shapes)
    for (float eps : {1e-6f, 1e-20f}) {
      std::vector<float> x = r.normal(size_t(h) * hd, 0.3f);
      for (uint32_t k = 0; k < h; ++k)  // a different magnitude per head
        for (uint32_t i = 0; i < hd; ++i) x[k * hd + i] *= float(k + 1);
      std::vector<float> out(x.size());
      rmsnorm_heads(x, h, hd, eps, out);
      const auto want = ref::rmsnorm_heads(x, h, hd, eps);
      check_close("rmsnorm_heads", std::to_string(h) + "x" + std::to_string(hd), seed, out, want, kRmsNmse,
                  kRmsMaxAbs);
    }
}

TEST(RmsNorm, RejectsSizeMismatch) {
  std::vector<float> x(8, 1.0f), out(7);
  EXPECT_THROW(rmsnorm(x, nullptr, 1e-6f, out), std::invalid_argument);
  EXPECT_THROW(rmsnorm_heads(x, 3, 3, 1e-6f, out), std::invalid_argument);
}

}  // namespace

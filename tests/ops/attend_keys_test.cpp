// One head's attention over gathered K = V rows (ops/attend_keys.hpp): against a float64 evaluation of the same
// formula (logits, sink softmax, weighted sum) at the models' head dims (V4 512, V4.1's indexer-free 512) and small
// and ragged ones, with and without a sink; and the AVX2 / AVX-512 builds against the baseline build bit for bit
// (every build this CPU runs; the test prints which ones it compared).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "cmfx/ops/attend_keys.hpp"
#include "op_test_util.hpp"

using namespace cmfx;
using namespace cmfx::test;

namespace {

constexpr double kNmse = 1e-12;  // f32 logits and outputs from double sums: a few f32 roundings

struct ak_case {
  size_t hd, nk;
  float sink;
};
const ak_case kCases[] = {{512, 37, 0.5f},    {512, 640, -1.0f}, {512, 1, 2.0f},   {7, 5, 0.0f},
                          {33, 129, 3.0f},    {129, 2, -std::numeric_limits<float>::infinity()},
                          {64, 300, 1.25f},   {1, 9, -0.5f}};

std::vector<double> reference(const std::vector<float>& q, const std::vector<std::vector<float>>& keys, size_t hd,
                              double scale, float sink) {
  std::vector<double> l(keys.size());
  double m = double(sink);
  for (size_t k = 0; k < keys.size(); ++k) {
    double s = 0;
    for (size_t c = 0; c < hd; ++c) s += double(q[c]) * double(keys[k][c]);
    l[k] = s * scale;
    m = std::max(m, l[k]);
  }
  double den = std::isinf(sink) ? 0.0 : std::exp(double(sink) - m);
  for (double& x : l) den += (x = std::exp(x - m));
  std::vector<double> o(hd, 0.0);
  for (size_t k = 0; k < keys.size(); ++k)
    for (size_t c = 0; c < hd; ++c) o[c] += l[k] / den * double(keys[k][c]);
  return o;
}

TEST(AttendKeys, MatchesFloat64AndEveryBuildBitForBit) {
  op_rng r(0x61747464);
  const char* names[] = {"baseline", "avx2", "avx512f"};
  int compared = 1;
#if defined(__x86_64__) && defined(__GNUC__)
  compared = 1 + int(attend_detail::best_attend_isa());
#endif
  std::cout << "[ attend_keys ] builds compared on this CPU:";
  for (int i = 0; i < compared; ++i) std::cout << ' ' << names[i];
  std::cout << '\n';
  for (const ak_case& c : kCases) {
    SCOPED_TRACE("hd " + std::to_string(c.hd) + " keys " + std::to_string(c.nk));
    const std::vector<float> q = r.normal(c.hd, 1.0f);
    std::vector<std::vector<float>> keys(c.nk);
    std::vector<const float*> kp(c.nk);
    for (size_t k = 0; k < c.nk; ++k) keys[k] = r.normal(c.hd, 1.5f), kp[k] = keys[k].data();
    const double scale = 1.0 / std::sqrt(double(c.hd));
    const std::vector<double> want = reference(q, keys, c.hd, scale, c.sink);
    std::vector<float> base;
    for (int isa = 0; isa < compared; ++isa) {
      SCOPED_TRACE(names[isa]);
      std::vector<float> out(c.hd, NAN), logit(c.nk, NAN);
      std::vector<double> acc(c.hd, NAN);
      attend_keys(q.data(), kp.data(), c.nk, c.hd, scale, c.sink, logit.data(), acc.data(), out.data(), isa);
      double err = 0, ref = 0;
      for (size_t i = 0; i < c.hd; ++i) err += (out[i] - want[i]) * (out[i] - want[i]), ref += want[i] * want[i];
      EXPECT_LE(err / std::max(ref, 1e-300), kNmse) << "nmse";
      if (isa == 0)
        base = out;
      else
        EXPECT_EQ(std::memcmp(base.data(), out.data(), c.hd * sizeof(float)), 0) << "differs from the baseline build";
    }
  }
}

}  // namespace

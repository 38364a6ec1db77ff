// The sampler's vocabulary passes (sample/vocab_pass.hpp) and its fast full-vocabulary path:
//  - sample_exp against a long-double exp (relative error bound) and its edge cases (0, −708 boundary, −inf);
//  - exp_weights, sanitize, max_of, divide_max: every build (baseline, AVX2, AVX-512 where the CPU has them)
//    gives the same bits as the scalar definition, at ragged sizes;
//  - the sampler's choice at temperature only (no candidate array, whole vocabulary in index order) equals the
//    choice of the candidate-array path over the same tokens (exactly), and both equal the token a long-double
//    softmax reference picks for the same uniform draw, except where the draw falls within 1e-12 of a boundary
//    (counted; there must be almost none).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cmfx/sample/sampler.hpp"
#include "cmfx/sample/vocab_pass.hpp"

namespace {

using cmfx::sample_rng;

constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
const size_t kSizes[] = {1, 3, 7, 8, 63, 64, 65, 257, 1000, 4099, 129280};

std::vector<float> random_values(size_t n, uint64_t seed, double lo, double hi) {
  sample_rng r(seed);
  std::vector<float> z(n);
  for (auto& v : z) v = static_cast<float>(lo + r.uniform() * (hi - lo));
  return z;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST(VocabPass, ExpAgainstLongDouble) {
  sample_rng r(77);
  long double worst = 0;
  for (int i = 0; i < 400000; ++i) {
    // Uniform over [−708, 0], and densely near 0 where r is small.
    const double x = i % 2 ? -708.0 * r.uniform() : -r.uniform() * std::ldexp(1.0, -int(r.next() % 40));
    const long double ref = std::exp(static_cast<long double>(x));
    const long double e = std::fabs(static_cast<long double>(cmfx::sample_exp(x)) - ref) / ref;
    worst = std::max(worst, e);
  }
  std::printf("sample_exp: max relative error %.3Lg (%.2Lf ulp of 1)\n", worst, worst / 0x1p-52L);
  EXPECT_LT(worst, 4e-16L);
  EXPECT_EQ(cmfx::sample_exp(0.0), 1.0);
  EXPECT_EQ(cmfx::sample_exp(-0.0), 1.0);
  EXPECT_NEAR(cmfx::sample_exp(-708.0) / std::exp(-708.0), 1.0, 4e-16);
  EXPECT_EQ(cmfx::sample_exp(-708.0000001), 0.0);  // below the smallest normal: 0 (documented)
  EXPECT_EQ(cmfx::sample_exp(-1e6), 0.0);
  EXPECT_EQ(cmfx::sample_exp(-std::numeric_limits<double>::infinity()), 0.0);
  // Positive arguments are outside the sampler's use but still right.
  EXPECT_NEAR(cmfx::sample_exp(1.5) / std::exp(1.5), 1.0, 4e-16);
}

TEST(VocabPass, EveryBuildGivesTheScalarBits) {
  namespace d = cmfx::vocab_detail;
  for (size_t n : kSizes) {
    auto z = random_values(n, 100 + n, -40.0, 0.0);
    if (n > 4) {
      z[1] = NEG_INF;
      z[3] = -800.0f;  // below −708: weight 0
      z[n - 1] = 0.0f;
    }
    const double m = 0.25;  // z − m < 0
    std::vector<double> want(n), got(n);
    for (size_t i = 0; i < n; ++i) want[i] = cmfx::sample_exp(static_cast<double>(z[i]) - m);
    cmfx::exp_weights(z.data(), n, m, got.data());
    EXPECT_TRUE(same_bits(want, got)) << "exp_weights n=" << n;
    d::exp_weights_body(z.data(), n, m, got.data());
    EXPECT_TRUE(same_bits(want, got)) << "baseline n=" << n;
#if defined(__x86_64__) && defined(__GNUC__)
    if (d::have_avx2()) {
      std::fill(got.begin(), got.end(), -1.0);
      d::exp_weights_avx2(z.data(), n, m, got.data());
      EXPECT_TRUE(same_bits(want, got)) << "AVX2 n=" << n;
    }
    if (d::have_avx512()) {
      std::fill(got.begin(), got.end(), -1.0);
      d::exp_weights_avx512(z.data(), n, m, got.data());
      EXPECT_TRUE(same_bits(want, got)) << "AVX-512 n=" << n;
    }
#endif
  }
}

TEST(VocabPass, SanitizeMaxDivide) {
  for (size_t n : kSizes) {
    auto src = random_values(n, 300 + n, -30.0, 30.0);
    if (n > 7) {
      src[0] = std::numeric_limits<float>::quiet_NaN();
      src[2] = -std::numeric_limits<float>::quiet_NaN();
      src[4] = std::bit_cast<float>(0x7f800001u);  // signalling-NaN pattern
      src[5] = std::numeric_limits<float>::infinity();
      src[6] = -0.0f;
      src[7] = std::numeric_limits<float>::denorm_min();
    }
    std::vector<float> dst(n), want(n);
    for (size_t i = 0; i < n; ++i) want[i] = std::isnan(src[i]) ? NEG_INF : src[i];
    cmfx::sanitize(src.data(), dst.data(), n);
    EXPECT_EQ(std::memcmp(dst.data(), want.data(), n * sizeof(float)), 0) << "sanitize n=" << n;

    float mx = NEG_INF;
    for (float v : want) mx = std::max(mx, v);
    EXPECT_EQ(cmfx::max_of(dst.data(), n), mx) << "max n=" << n;

    if (n > 7) dst[5] = want[5] = 29.0f;  // no +inf before the division check
    for (const float t : {1.0f, 0.7f, 1.3f}) {
      std::vector<float> a = dst, b = want;
      float m2 = NEG_INF;
      for (float& v : b) {
        v /= t;
        m2 = std::max(m2, v);
      }
      EXPECT_EQ(cmfx::divide_max(a.data(), n, t), m2) << "divide_max n=" << n << " t=" << t;
      EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0) << "divide n=" << n << " t=" << t;
    }
  }
  // All −inf: the maximum is −inf; a lone +0 beats −0 or equals it (either is a maximum).
  std::vector<float> all(70, NEG_INF);
  EXPECT_EQ(cmfx::max_of(all.data(), all.size()), NEG_INF);
  all[13] = -0.0f;
  all[40] = 0.0f;
  EXPECT_EQ(cmfx::max_of(all.data(), all.size()), 0.0f);
}

// The token a long-double softmax gives for the uniform draw u over `order` (the candidates in the order the
// sampler holds them); `margin` receives the distance of u·Σ to the nearest boundary, relative to Σ.
// The logits are divided by the temperature in float32 first, as the sampler does (its documented step 4).
int32_t reference_pick(const std::vector<float>& z, const std::vector<int32_t>& order, float t, double u,
                       long double& margin) {
  auto zt = [&](int32_t i) { return static_cast<long double>(z[size_t(i)] / t); };
  long double m = -INFINITY;
  for (int32_t i : order) m = std::max(m, zt(i));
  long double total = 0;
  for (int32_t i : order) total += std::exp(zt(i) - m);
  const long double r = static_cast<long double>(u) * total;
  long double cum = 0;
  margin = INFINITY;
  int32_t chosen = -1;
  for (int32_t i : order) {
    cum += std::exp(zt(i) - m);
    margin = std::min(margin, std::fabs(cum - r) / total);
    if (chosen < 0 && r < cum) chosen = i;
  }
  return chosen;
}

TEST(VocabPass, FullVocabularyDrawMatchesReferenceAndCandidatePath) {
  size_t compared = 0, near_ties = 0;
  for (size_t n : {size_t{2}, size_t{77}, size_t{1000}, size_t{4099}, size_t{129280}}) {
    std::vector<int32_t> all(n);
    for (size_t i = 0; i < n; ++i) all[i] = static_cast<int32_t>(i);
    for (const float t : {1.0f, 0.6f, 1.7f}) {
      cmfx::sampling_params fast, cand;
      fast.temperature = cand.temperature = t;
      fast.seed = cand.seed = 9000 + n;
      // min-p far below every weight: the candidate-array path keeps every token, in index order.
      cand.min_p = 1e-30f;
      cmfx::sampler sf(n, fast), sc(n, cand);
      sample_rng u_rng(fast.seed);  // the sampler draws exactly one uniform per token
      const int draws = n > 10000 ? 12 : 60;
      for (int k = 0; k < draws; ++k) {
        const auto z = random_values(n, 5000 + 31 * n + size_t(k), -8.0, 8.0);
        const int32_t a = sf.sample(z).token;
        const int32_t b = sc.sample(z).token;
        ASSERT_EQ(a, b) << "fast path and candidate path differ, n=" << n << " t=" << t << " draw " << k;
        EXPECT_EQ(sf.last_candidates().size(), n);
        EXPECT_EQ(sc.last_candidates(), all);
        long double margin = 0;
        const int32_t want = reference_pick(z, all, t, u_rng.uniform(), margin);
        if (margin < 1e-12L) {
          ++near_ties;
          continue;
        }
        ++compared;
        EXPECT_EQ(a, want) << "n=" << n << " t=" << t << " draw " << k;
      }
    }
  }
  std::printf("full-vocabulary draws: %zu compared with the reference, %zu near ties skipped\n", compared,
              near_ties);
  EXPECT_GE(compared, 500u);
  EXPECT_LE(near_ties, 2u);
}

TEST(VocabPass, TopKDrawMatchesReference) {
  // top-k: the k largest in descending order (stable), then the same weights and pick().
  const size_t n = 129280;
  size_t compared = 0;
  for (const int32_t k : {1, 5, 40, 300, 20000}) {
    cmfx::sampling_params p;
    p.temperature = 0.8f;
    p.top_k = k;
    p.seed = 31 + uint64_t(k);
    cmfx::sampler s(n, p);
    sample_rng u_rng(p.seed);
    for (int d = 0; d < 6; ++d) {
      const auto z = random_values(n, 777 + size_t(k) * 13 + size_t(d), -6.0, 6.0);
      std::vector<int32_t> order(n);
      for (size_t i = 0; i < n; ++i) order[i] = static_cast<int32_t>(i);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return z[size_t(a)] > z[size_t(b)]; });
      order.resize(size_t(k));
      const int32_t got = s.sample(z).token;
      EXPECT_EQ(s.last_candidates(), order);
      long double margin = 0;
      const int32_t want = reference_pick(z, order, 0.8f, u_rng.uniform(), margin);
      if (margin < 1e-12L) continue;
      ++compared;
      EXPECT_EQ(got, want) << "k=" << k << " draw " << d;
    }
  }
  EXPECT_GE(compared, 28u);
}

}  // namespace

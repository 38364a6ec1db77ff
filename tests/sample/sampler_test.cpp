// Sampler (sample/sampler.hpp): greedy and its tie rule, top-k = 1 == greedy, seeded determinism (with fixed
// expected tokens, so a platform that differs fails), the empirical distribution against softmax(z/T) (chi-square),
// exactly which tokens top-k/top-p/min-p keep, penalties against hand-computed values, logprobs against a float64
// log-softmax, and no allocation per token after warm-up (global operator new is counted in this binary).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <random>

#include "cmfx/sample/sampler.hpp"
#include "cmfx/sample/stop_strings.hpp"

namespace {
std::atomic<size_t> g_allocations{0};
}  // namespace

// Counting replacement of the global allocation functions (malloc/free underneath; GCC's -Wmismatched-new-delete
// does not see that the replacements pair up).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

using cmfx::sampler;
using cmfx::sampling_params;

constexpr float NEG_INF = -std::numeric_limits<float>::infinity();

std::vector<float> random_logits(size_t n, uint64_t seed, float scale = 3.0f) {
  cmfx::sample_rng r(seed);
  std::vector<float> z(n);
  for (auto& v : z) v = static_cast<float>((r.uniform() * 2.0 - 1.0) * scale);
  return z;
}

std::vector<double> softmax64(const std::vector<float>& z, double t = 1.0) {
  double m = -INFINITY;
  for (float v : z) m = std::max(m, static_cast<double>(v) / t);
  std::vector<double> p(z.size());
  double s = 0;
  for (size_t i = 0; i < z.size(); ++i) s += p[i] = std::exp(static_cast<double>(z[i]) / t - m);
  for (auto& v : p) v /= s;
  return p;
}

std::vector<int32_t> sorted(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(Sampler, RngIsTheStandardEngine) {
  std::mt19937_64 ref;  // default seed 5489: the standard fixes the 10000th output
  ref.discard(9999);
  EXPECT_EQ(ref(), 9981545732273789042ull);
  cmfx::sample_rng r(5489);
  for (int i = 0; i < 9999; ++i) r.next();
  EXPECT_EQ(r.next(), 9981545732273789042ull);
  cmfx::sample_rng a(7);
  double sum = 0, esum = 0;
  for (int i = 0; i < 100000; ++i) {
    const double u = a.uniform();
    ASSERT_TRUE(u >= 0.0 && u < 1.0);
    sum += u;
    esum += a.exponential();
  }
  EXPECT_NEAR(sum / 100000, 0.5, 0.005);
  EXPECT_NEAR(esum / 100000, 1.0, 0.01);
}

// rng.hpp writes MT19937-64 out (its state is handed to the device sampler): every value as std::mt19937_64's,
// across several twists, for several seeds; the state carried over continues the same stream.
TEST(Sampler, WrittenOutEngineMatchesStdAndCarriesItsState) {
  for (const uint64_t seed : {0ull, 1ull, 5489ull, 0xDEADBEEFCAFEF00Dull}) {
    std::mt19937_64 ref(seed);
    cmfx::sample_rng r(seed);
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(r.next(), ref()) << "seed " << seed << " value " << i;
    cmfx::sample_rng copy(12345);
    copy.set_state(r.state());
    for (int i = 0; i < 700; ++i) ASSERT_EQ(copy.next(), ref()) << "seed " << seed << " carried value " << i;
  }
}

// With a temperature every sample() draws one random number, also where the largest logit is ±inf and the
// choice is made without it (the device sampler's rule; sampler::accept_drawn advances the same way).
TEST(Sampler, OneDrawPerSampledTokenEvenForInfiniteLogits) {
  sampling_params p;
  p.temperature = 0.8f;
  p.seed = 99;
  sampler s(16, p);
  cmfx::sample_rng ref(99);
  std::vector<float> z = random_logits(16, 3);
  z[5] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(s.sample(z).token, 5);
  (void)ref.next();
  EXPECT_TRUE(s.rng_state().x == ref.state().x && s.rng_state().index == ref.state().index);
  s.accept_drawn(3);
  (void)ref.next();
  EXPECT_EQ(s.count(3), 1u);
  EXPECT_TRUE(s.rng_state().x == ref.state().x && s.rng_state().index == ref.state().index);
  EXPECT_TRUE(p.device_samplable(16));
  p.top_k = 4;
  EXPECT_FALSE(p.device_samplable(16));
  EXPECT_TRUE(p.device_samplable(4));  // k >= vocab keeps everything: no top-k
  EXPECT_TRUE(p.device_samplable(16, 4));  // a device top-k of up to 4
  p.top_k = 0;
  p.repetition_penalty = 1.1f;
  EXPECT_TRUE(p.device_samplable(16));  // penalties: from penalty_state
  EXPECT_TRUE(p.has_penalties());
  p.logprobs = true;
  EXPECT_FALSE(p.device_samplable(16));  // a device without logprobs
  EXPECT_TRUE(p.device_samplable(16, 0, 0));  // the chosen token's (kernels::logprobs)
  p.top_logprobs = 5;
  EXPECT_FALSE(p.device_samplable(16, 0, 4));
  EXPECT_TRUE(p.device_samplable(16, 0, 5));
  p.logprobs_from = cmfx::logprob_source::processed;  // only the raw logits' on a device
  EXPECT_FALSE(p.device_samplable(16, 0, 5));
  p.logprobs_from = cmfx::logprob_source::raw;
  p.temperature = 0.0f;
  EXPECT_FALSE(p.device_samplable(16, 0, 5));  // greedy with a penalty: the host's
  p.repetition_penalty = 1.0f;
  EXPECT_TRUE(p.device_samplable(16, 0, 5));  // greedy: the device's argmax
  sampler g(16, p);
  const cmfx::mt19937_64_state before = g.rng_state();
  g.accept_drawn(7);  // a greedy choice draws nothing
  EXPECT_EQ(g.count(7), 1u);
  EXPECT_TRUE(g.rng_state().x == before.x && g.rng_state().index == before.index);
}

TEST(Sampler, GreedyIsArgmaxLowerIndexOnTies) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  sampling_params p;
  p.temperature = 0.0f;
  sampler s(6, p);
  const std::vector<float> z = {1.0f, 5.0f, 3.0f, 5.0f, NEG_INF, nan};
  EXPECT_EQ(s.sample(z).token, 1);
  p.temperature = -1.0f;  // ≤ 0 is greedy
  sampler s2(6, p);
  EXPECT_EQ(s2.sample(z).token, 1);
  EXPECT_EQ(s2.sample(std::vector<float>{nan, nan, 7.0f, 7.0f, nan, 7.0f}).token, 2);
  EXPECT_EQ(s2.sample(std::vector<float>(6, nan)).token, 0);
  EXPECT_THROW(s2.sample(std::vector<float>(5, 0.0f)), cmfx::usage_error);
}

TEST(Sampler, TopK1EqualsGreedy) {
  sampling_params g;
  g.temperature = 0.0f;
  sampling_params k1;
  k1.temperature = 0.8f;
  k1.top_k = 1;
  k1.seed = 99;
  sampler a(1000, g), b(1000, k1);
  for (uint64_t t = 0; t < 50; ++t) {
    auto z = random_logits(1000, t);
    z[(t * 37) % 1000] = z[(t * 91) % 1000] = 4.0f;  // a tie at the top
    EXPECT_EQ(a.sample(z).token, b.sample(z).token) << t;
  }
}

TEST(Sampler, SeededDeterminism) {
  sampling_params p;
  p.temperature = 0.9f;
  p.top_p = 0.95f;
  p.top_k = 40;
  p.min_p = 0.01f;
  p.seed = 42;
  std::vector<int32_t> a, b, c;
  sampler s1(5000, p), s2(5000, p);
  p.seed = 43;
  sampler s3(5000, p);
  for (uint64_t t = 0; t < 64; ++t) {
    const auto z = random_logits(5000, 1000 + t, 4.0f);
    a.push_back(s1.sample(z).token);
    b.push_back(s2.sample(z).token);
    c.push_back(s3.sample(z).token);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Fixed expectation: the same on every platform (mt19937_64 + this file's conversions + total orders).
  const std::vector<int32_t> first8(a.begin(), a.begin() + 8);
  EXPECT_EQ(first8, (std::vector<int32_t>{3830, 3508, 725, 3507, 3132, 2033, 3442, 3404}));
  s1.reset();  // reseeds and forgets: the same sequence again
  std::vector<int32_t> again;
  for (uint64_t t = 0; t < 64; ++t) again.push_back(s1.sample(random_logits(5000, 1000 + t, 4.0f)).token);
  EXPECT_EQ(again, a);
}

// Chi-square of `draws` samples against the expected probabilities (tokens with p = 0 must never appear).
double chi_square(sampler& s, const std::vector<float>& z, const std::vector<double>& p, size_t draws) {
  std::vector<size_t> obs(z.size(), 0);
  for (size_t i = 0; i < draws; ++i) ++obs[static_cast<size_t>(s.sample(z).token)];
  double chi2 = 0;
  for (size_t i = 0; i < z.size(); ++i) {
    if (p[i] == 0.0) {
      EXPECT_EQ(obs[i], 0u) << "token " << i << " should be excluded";
      continue;
    }
    const double e = p[i] * static_cast<double>(draws);
    chi2 += (static_cast<double>(obs[i]) - e) * (static_cast<double>(obs[i]) - e) / e;
  }
  return chi2;
}

TEST(Sampler, EmpiricalDistributionMatchesSoftmax) {
  const std::vector<float> z = {1.0f, 2.0f, 0.5f, -1.0f, 3.0f, 0.0f, 1.5f, -0.5f};
  sampling_params p;
  p.temperature = 0.7f;
  p.seed = 2024;
  sampler s(z.size(), p);
  // 8 categories → 7 degrees of freedom; the 99.9% quantile is 24.32. Seeded: the result is fixed, not flaky.
  const double chi1 = chi_square(s, z, softmax64(z, 0.7), 200000);
  EXPECT_LT(chi1, 24.32);
  std::printf("chi-square: %.3f (7 dof)\n", chi1);
  // Negative control: the same test rejects draws at T = 0.7 compared with softmax(z / 0.8).
  sampler s_ctl(z.size(), p);
  EXPECT_GT(chi_square(s_ctl, z, softmax64(z, 0.8), 200000), 100.0);

  // top-k = 4 at T = 1.3: the 4 largest, renormalised (3 dof: 99.9% quantile 16.27).
  p.temperature = 1.3f;
  p.top_k = 4;
  sampler s2(z.size(), p);
  auto q = softmax64(z, 1.3);
  for (size_t i : {2u, 3u, 5u, 7u}) q[i] = 0;  // kept: 4 (3.0), 1 (2.0), 6 (1.5), 0 (1.0)
  double sum = 0;
  for (double v : q) sum += v;
  for (double& v : q) v /= sum;
  const double chi2 = chi_square(s2, z, q, 200000);
  EXPECT_LT(chi2, 16.27);
  std::printf("chi-square with top-k: %.3f (3 dof)\n", chi2);
}

TEST(Sampler, TruncationKeepsExactlyTheRightTokens) {
  const std::vector<double> probs = {0.05, 0.30, 0.10, 0.25, 0.20, 0.04, 0.06};  // order: 1 3 4 2 6 0 5
  std::vector<float> z;
  for (double v : probs) z.push_back(static_cast<float>(std::log(v)));
  auto kept = [&](int k, float top_p, float min_p) {
    sampling_params p;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    sampler s(z.size(), p);
    (void)s.sample(z);
    return sorted(s.last_candidates());
  };
  using v = std::vector<int32_t>;
  EXPECT_EQ(kept(0, 1.0f, 0.0f), (v{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(kept(3, 1.0f, 0.0f), (v{1, 3, 4}));
  EXPECT_EQ(kept(100, 1.0f, 0.0f), (v{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(kept(0, 0.6f, 0.0f), (v{1, 3, 4}));  // mass before 2 is 0.75 ≥ 0.6
  EXPECT_EQ(kept(0, 0.5f, 0.0f), (v{1, 3}));     // mass before 4 is 0.55 ≥ 0.5
  EXPECT_EQ(kept(0, 0.25f, 0.0f), (v{1}));
  EXPECT_EQ(kept(0, 0.9f, 0.0f), (v{1, 2, 3, 4, 6}));  // before 0: 0.91
  EXPECT_EQ(kept(0, 1.0f, 0.5f), (v{1, 3, 4}));  // p ≥ 0.15
  EXPECT_EQ(kept(0, 1.0f, 0.3f), (v{1, 2, 3, 4}));  // p ≥ 0.09
  // top-k 5 (mass 0.91) then top-p 0.7 on the renormalised five: before 2 it is 0.75/0.91 = 0.824 → {1, 3, 4};
  // then min-p 0.7 (p ≥ 0.21 of the original scale) → {1, 3}.
  EXPECT_EQ(kept(5, 0.7f, 0.0f), (v{1, 3, 4}));
  EXPECT_EQ(kept(5, 0.7f, 0.7f), (v{1, 3}));
  // Ties at the top-k boundary: the lower index.
  sampling_params p;
  p.top_k = 2;
  sampler s(4, p);
  (void)s.sample(std::vector<float>{2.0f, 2.0f, 2.0f, 1.0f});
  EXPECT_EQ(sorted(s.last_candidates()), (v{0, 1}));
  // Large vocabulary, top-p only (weighted quickselect, fixed-point masses): the same set as a full sort.
  const auto big = random_logits(50000, 5, 6.0f);
  sampling_params pb;
  pb.top_p = 0.8f;
  sampler sb(big.size(), pb);
  (void)sb.sample(big);
  const auto pr = softmax64(big);
  std::vector<int32_t> order(big.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return big[size_t(a)] > big[size_t(b)]; });
  double before = 0;
  std::vector<int32_t> want;
  for (int32_t t : order) {
    if (!want.empty() && before >= 0.8) break;
    want.push_back(t);
    before += pr[static_cast<size_t>(t)];
  }
  EXPECT_GT(want.size(), 64u);
  EXPECT_EQ(sorted(sb.last_candidates()), sorted(want));

  // Heavy ties (logits on a 0.5 grid): top-k = 100 (heap selection) is the first 100 of the stable descending
  // order, in that order; top-p cuts inside a run of equal values by index.
  auto grid = random_logits(50000, 9, 6.0f);
  for (auto& g : grid) g = std::round(g * 2.0f) / 2.0f;
  std::vector<int32_t> rank(grid.size());
  for (size_t i = 0; i < rank.size(); ++i) rank[i] = static_cast<int32_t>(i);
  std::stable_sort(rank.begin(), rank.end(), [&](int32_t a, int32_t b) { return grid[size_t(a)] > grid[size_t(b)]; });
  sampling_params pk;
  pk.top_k = 100;
  sampler sk(grid.size(), pk);
  (void)sk.sample(grid);
  EXPECT_EQ(sk.last_candidates(), std::vector<int32_t>(rank.begin(), rank.begin() + 100));
  for (float top_p : {0.3f, 0.77f, 0.999f}) {
    sampling_params pp;
    pp.top_p = top_p;
    sampler sp(grid.size(), pp);
    (void)sp.sample(grid);
    const auto pg = softmax64(grid);
    double mass = 0;
    size_t k = 0;
    while (k < rank.size() && (k == 0 || mass < top_p)) mass += pg[static_cast<size_t>(rank[k++])];
    EXPECT_EQ(sorted(sp.last_candidates()), sorted(std::vector<int32_t>(rank.begin(), rank.begin() + std::ptrdiff_t(k))))
        << "top_p " << top_p;
  }
}

TEST(Sampler, PenaltiesHandComputed) {
  sampling_params p;
  p.temperature = 0.0f;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  sampler s(6, p);
  const std::vector<int32_t> prompt = {0, 1, 5};
  s.set_prompt(prompt);
  s.accept(3);
  s.accept(3);
  s.accept(1);
  const std::vector<float> z = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 0.0f};
  EXPECT_EQ(s.sample(z).token, 0);
  auto pz = s.processed_logits();
  EXPECT_FLOAT_EQ(pz[0], 2.0f / 1.5f);                 // prompt only: divided
  EXPECT_FLOAT_EQ(pz[1], -1.0f * 1.5f - 0.25f - 0.5f);  // prompt + once in the output: multiplied, then penalised
  EXPECT_FLOAT_EQ(pz[2], 0.5f);                        // unseen
  EXPECT_FLOAT_EQ(pz[3], 3.0f / 1.5f - 2 * 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(pz[4], -2.0f);
  EXPECT_FLOAT_EQ(pz[5], 0.0f);                        // 0 stays 0 under the repetition penalty
  EXPECT_EQ(s.count(0), 1u);                           // sample() recorded its choice
  EXPECT_EQ(s.sample(z).token, 3);                     // token 0 now: 2/1.5 − 0.25 − 0.5 = 0.583 < 1.0
  EXPECT_FLOAT_EQ(s.processed_logits()[0], 2.0f / 1.5f - 0.25f - 0.5f);
  // Temperature divides the penalised logits.
  p.temperature = 2.0f;
  s.set_params(p);
  (void)s.sample(z);
  EXPECT_FLOAT_EQ(s.processed_logits()[3], (3.0f / 1.5f - 3 * 0.25f - 0.5f) / 2.0f);
  s.reset();
  (void)s.sample(z);
  EXPECT_FLOAT_EQ(s.processed_logits()[1], -0.5f);
}

TEST(Sampler, LogprobsAgainstFloat64) {
  auto z = random_logits(50, 77, 8.0f);
  z[10] = z[20] = 9.0f;  // a tie among the most likely
  z[30] = NEG_INF;
  sampling_params p;
  p.temperature = 2.0f;
  p.top_k = 3;
  p.logprobs = true;
  p.top_logprobs = 5;
  p.seed = 3;
  for (auto src : {cmfx::logprob_source::raw, cmfx::logprob_source::processed}) {
    p.logprobs_from = src;
    sampler s(z.size(), p);
    const auto& r = s.sample(z);
    const auto q = softmax64(z, src == cmfx::logprob_source::raw ? 1.0 : 2.0);
    EXPECT_NEAR(r.logprob, std::log(q[static_cast<size_t>(r.token)]), 1e-6);
    ASSERT_EQ(r.top_logprobs.size(), 5u);
    EXPECT_EQ(r.top_logprobs[0].token, 10);
    EXPECT_EQ(r.top_logprobs[1].token, 20);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_NEAR(r.top_logprobs[i].logprob, std::log(q[static_cast<size_t>(r.top_logprobs[i].token)]), 1e-6);
      if (i > 0) {
        EXPECT_GE(r.top_logprobs[i - 1].logprob, r.top_logprobs[i].logprob);
      }
    }
  }
}

TEST(Sampler, StopTokens) {
  sampling_params p;
  p.temperature = 0.0f;
  p.stop_tokens = {1, 4};
  sampler s(5, p);
  EXPECT_TRUE(s.sample(std::vector<float>{0, 9, 0, 0, 0}).stop);
  EXPECT_FALSE(s.sample(std::vector<float>{0, 0, 9, 0, 0}).stop);
  EXPECT_TRUE(s.sample(std::vector<float>{0, 0, 0, 0, 9}).stop);
  p.stop_tokens = {7};
  EXPECT_THROW(s.set_params(p), cmfx::usage_error);
  p.stop_tokens = {};
  p.top_p = 0.0f;
  EXPECT_THROW(s.set_params(p), cmfx::usage_error);
}

TEST(Sampler, NoAllocationPerTokenAfterWarmup) {
  sampling_params p;
  p.temperature = 0.8f;
  p.top_k = 50;
  p.top_p = 0.9f;
  p.min_p = 0.02f;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.3f;
  p.frequency_penalty = 0.2f;
  p.top_logprobs = 5;
  p.stop_tokens = {1};
  sampler s(32000, p);
  const auto z = random_logits(32000, 11, 5.0f);
  (void)s.sample(z);
  p.top_k = 0;  // the growing-prefix top-p path as well
  sampler s2(32000, p);
  (void)s2.sample(z);
  const size_t before = g_allocations.load();
  for (int i = 0; i < 200; ++i) {
    (void)s.sample(z);
    (void)s2.sample(z);
  }
  EXPECT_EQ(g_allocations.load(), before);

  cmfx::stop_string_matcher m({"STOP", "\n\n"});
  (void)m.push("warm up with a chunk of the largest size .....");
  const size_t before2 = g_allocations.load();
  for (int i = 0; i < 200; ++i) (void)m.push("some tokens\n");
  EXPECT_EQ(g_allocations.load(), before2);
}

}  // namespace

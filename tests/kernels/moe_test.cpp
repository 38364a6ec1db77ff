// Expert-batched MoE against a float64 reference (decoded weights, SwiGLU with the asymmetric clamp, routing
// weight before W2, shared expert with weight 1), at several token counts and expert formats.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "cmfx/kernels/moe.hpp"
#include "support/hex.hpp"
#include "support/metrics.hpp"

using namespace cmfx;

namespace {

constexpr double kNmse = 1e-9;

struct owned_expert {
  encoded_matrix g, u, dn;
  expert_view v;
};

template <class F>
owned_expert make_expert(uint64_t d, uint64_t I, uint64_t seed, float gain) {
  owned_expert o;
  auto wg = test::random_weights(I * d, seed, gain), wu = test::random_weights(I * d, seed + 1, gain),
       wd = test::random_weights(d * I, seed + 2, gain);
  o.g = F::encode(wg.data(), I, d);
  o.u = F::encode(wu.data(), I, d);
  o.dn = F::encode(wd.data(), d, I);
  auto view = [](const encoded_matrix& e, uint64_t r, uint64_t c) {
    return matrix_view{e.data.data(), e.data.size(), e.scale.empty() ? nullptr : e.scale.data(), e.scale.size(),
                       e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0, r, c};
  };
  o.v = {view(o.g, I, d), view(o.u, I, d), view(o.dn, d, I), F::id, F::id, F::id};
  return o;
}

template <class F>
std::vector<double> apply_ref(const expert_view& e, const float* x, uint64_t d, float w, float limit) {
  const uint64_t I = e.gate.rows;
  std::vector<float> row(std::max(d, I));
  std::vector<double> h(I), y(d, 0.0);
  for (uint64_t r = 0; r < I; ++r) {
    double g = 0, v = 0;
    F::decode_row(e.gate, r, row.data());
    for (uint64_t c = 0; c < d; ++c) g += double(row[c]) * x[c];
    F::decode_row(e.up, r, row.data());
    for (uint64_t c = 0; c < d; ++c) v += double(row[c]) * x[c];
    g = std::min(g, double(limit));
    v = std::clamp(v, -double(limit), double(limit));
    h[r] = g / (1.0 + std::exp(-g)) * v * w;
  }
  for (uint64_t r = 0; r < d; ++r) {
    F::decode_row(e.down, r, row.data());
    for (uint64_t c = 0; c < I; ++c) y[r] += double(row[c]) * h[c];
  }
  return y;
}

// int8 activations (moe_forward(..., act_precision::i8)): the expert input and the SwiGLU output are each rounded
// to int8 per 32 values (act_q8.hpp) before the integer-dot kernels; two such roundings give an output NMSE near
// 1e-4 on these inputs (the single-GEMM path: ~1e-5 … 2e-4, gemm_i8_test.cpp). Bound: 1e-3.
constexpr double kNmseI8 = 1e-3;

template <class F>
void run_case(uint64_t d, uint64_t I, uint32_t E, uint32_t top_k, uint64_t n, float gain,
              act_precision act = act_precision::f32) {
  const uint64_t seed = test::fresh_seed();
  std::mt19937_64 rng(seed);
  std::vector<owned_expert> ex;
  for (uint32_t e = 0; e < E; ++e) ex.push_back(make_expert<F>(d, I, seed + 10 * e, gain));
  owned_expert sh = make_expert<F>(d, I, seed + 999, gain);
  std::vector<expert_view> views;
  for (auto& e : ex) views.push_back(e.v);
  const auto X = test::random_weights(n * d, seed + 5, 1.0f);
  std::vector<uint32_t> ids(n * top_k);
  std::vector<float> w(n * top_k);
  for (uint64_t t = 0; t < n; ++t) {
    std::vector<uint32_t> perm(E);
    for (uint32_t e = 0; e < E; ++e) perm[e] = e;
    std::shuffle(perm.begin(), perm.end(), rng);
    for (uint32_t j = 0; j < top_k; ++j) {
      ids[t * top_k + j] = perm[j];
      w[t * top_k + j] = 0.1f + float(rng() % 1000) / 1000.0f;
    }
  }
  const float limit = 10.0f;
  std::vector<double> want(n * d, 0.0);
  for (uint64_t t = 0; t < n; ++t) {
    for (uint32_t j = 0; j < top_k; ++j) {
      const auto y = apply_ref<F>(views[ids[t * top_k + j]], X.data() + t * d, d, w[t * top_k + j], limit);
      for (uint64_t c = 0; c < d; ++c) want[t * d + c] += y[c];
    }
    const auto y = apply_ref<F>(sh.v, X.data() + t * d, d, 1.0f, limit);
    for (uint64_t c = 0; c < d; ++c) want[t * d + c] += y[c];
  }
  thread_pool pool(3);
  moe_scratch scratch;
  std::vector<float> out(n * d, NAN), first;
  // The second call reuses the scratch; the third and fourth take rows in dynamic chunks (20 → 24 rows: chunk
  // edges inside experts; 8) and must give the static partition's result bit for bit.
  const uint64_t chunks[] = {0, 0, 20, 8};
  for (int rep = 0; rep < 4; ++rep) {
    std::fill(out.begin(), out.end(), NAN);
    moe_forward(pool, best_cpu_kernels(), views, &sh.v, X.data(), n, d, ids.data(), w.data(), top_k, limit, out.data(),
                scratch, act, chunks[rep]);
    if (rep == 0) first = out;
    else EXPECT_EQ(std::memcmp(out.data(), first.data(), out.size() * 4), 0) << "rep " << rep << ", seed " << seed;
    const auto st = test::compare(out.data(), want.data(), out.size());
    std::printf("[ moe ] %-6s %s d=%llu I=%llu E=%u k=%u n=%llu nmse %.2e max-abs %.2e\n", std::string(F::name).c_str(),
                act == act_precision::i8 ? "i8 " : "f32", (unsigned long long)d, (unsigned long long)I, E, top_k,
                (unsigned long long)n, st.nmse, st.max_abs);
    EXPECT_EQ(st.nonfinite, 0u);
    EXPECT_LE(st.nmse, act == act_precision::i8 ? kNmseI8 : kNmse) << "seed " << seed;
    if (act == act_precision::i8 && best_cpu_kernels().gemm_i8[size_t(F::id)] != nullptr) {
      EXPECT_GT(st.nmse, 1e-12) << "the int8 path did not run (result exact to float64)";
    }
  }
}

TEST(Moe, Q4tpDecodeAndBatches) {
  run_case<fmt_q4tp>(64, 32, 8, 2, 1, 0.3f);
  run_case<fmt_q4tp>(256, 96, 16, 6, 5, 0.3f);
  run_case<fmt_q4tp>(128, 64, 8, 6, 33, 0.3f);
}
TEST(Moe, Q2tpAndMxfp4) {
  run_case<fmt_q2tp>(256, 64, 12, 6, 3, 0.3f);
  run_case<fmt_mxfp4>(256, 64, 12, 6, 7, 0.3f);
}
TEST(Moe, ClampIsExercised) {
  // Large gains push gate/up past the limit of 10 on many rows.
  run_case<fmt_f32>(96, 32, 4, 2, 4, 3.0f);
}

TEST(Moe, Int8Activations) {
  if (best_cpu_kernels().gemm_i8[size_t(format::q4tp)] == nullptr) GTEST_SKIP() << "no int8 kernels on this CPU";
  run_case<fmt_q4tp>(256, 96, 16, 6, 1, 0.3f, act_precision::i8);
  run_case<fmt_q4tp>(128, 64, 8, 6, 33, 0.3f, act_precision::i8);
  run_case<fmt_q2tp>(256, 64, 12, 6, 3, 0.3f, act_precision::i8);
  run_case<fmt_mxfp4>(256, 64, 12, 6, 7, 0.3f, act_precision::i8);
}

}  // namespace

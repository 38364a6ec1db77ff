// CPU GEMM / matvec of every format and every instruction-set level this CPU runs, against the float64
// reference on fresh random data; outputs poisoned before the call, sentinels around them.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cmfx/kernels/cpu_kernels.hpp"
#include "cmfx/ref/gemm_ref.hpp"
#include "support/hex.hpp"
#include "support/metrics.hpp"

using namespace cmfx;

namespace {

// The kernels decode exactly what the trait decodes; only the f32 accumulation order differs from the f64
// reference, so the bounds are those of f32 dot products, for every format alike.
// NMSE only over >= 64 outputs (a single dot can cancel to almost nothing); every output is also held to the
// f32 summation bound: |err| <= kAbsSumRel * sum_c |w_rc * x_c| (n * 2^-24 would be the worst case).
constexpr double kNmse = 1e-10;
constexpr double kAbsSumRel = 2e-6;

constexpr uint32_t kSentinel = 0x7FC0DEADu;  // a NaN bit pattern no kernel produces

struct shape {
  uint64_t rows, cols, n;
};

/// The instruction-set levels of the kernel tables that this CPU runs.
std::vector<cpu_arch> runnable_archs() {
  std::vector<cpu_arch> out;
  for (cpu_arch a : {cpu_arch::generic, cpu_arch::avx2, cpu_arch::avx512, cpu_arch::avx512_gfni})
    if (cpu_supports(a)) out.push_back(a);
  return out;
}

/// A float's bits, both zeros as 0 (sums of signed zeros are +0, so a zero weight may come out as either).
uint32_t bits_zero_blind(float v) { return v == 0.0f ? 0u : std::bit_cast<uint32_t>(v); }

template <class F>
class Gemm : public ::testing::Test {};

template <class>
struct to_gtest;
template <class... Ts>
struct to_gtest<type_list<Ts...>> {
  using type = ::testing::Types<Ts...>;
};
struct name_gen {
  template <class F>
  static std::string GetName(int) { return std::string(F::name); }
};
TYPED_TEST_SUITE(Gemm, to_gtest<all_formats>::type, name_gen);

TYPED_TEST(Gemm, MatchesFloat64Reference) {
  using F = TypeParam;
  // rows longer than 4096 columns: the 8-bit kernels' column tiles (1-2 tokens; a ragged tail, rows across an FP8
  // tile row) and their several-rows-per-pass path (5 tokens)
  const shape shapes[] = {{1, 32, 1},   {7, 96, 1},    {13, 160, 3},   {33, 4096, 1}, {64, 1024, 9},
                          {130, 256, 17}, {5, 33, 2},  {9, 200, 4},    {1024, 4096, 1}, {256, 2048, 2},
                          {37, 8224, 1}, {130, 4200, 2}, {9, 8192, 5}};
  thread_pool pool(3);
  for (cpu_arch arch : {cpu_arch::generic, cpu_arch::avx2, cpu_arch::avx512, cpu_arch::avx512_gfni}) {
    if (!cpu_supports(arch)) {
      std::printf("[ gemm ] %s kernels not runnable on this CPU: not tested\n", std::string(cpu_arch_name(arch)).c_str());
      continue;
    }
    const cpu_kernel_table& k = cpu_kernels_for(arch);
    for (const shape& s : shapes) {
      if (!F::shape_ok(s.rows, s.cols)) continue;
      const uint64_t seed = test::fresh_seed();
      const auto wf = test::random_weights(s.rows * s.cols, seed);
      const encoded_matrix e = F::encode(wf.data(), s.rows, s.cols);
      const matrix_view v{e.data.data(), e.data.size(), e.scale.empty() ? nullptr : e.scale.data(), e.scale.size(),
                          e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0, s.rows, s.cols};
      const auto X = test::random_weights(s.n * s.cols, seed + 1, 1.0f);
      const std::vector<double> want = ref::gemm(F::id, v, X.data(), s.n);
      const uint64_t pad = 16, ny = s.n * s.rows;
      std::vector<float> Y(ny + 2 * pad, std::bit_cast<float>(kSentinel));
      std::fill(Y.begin() + pad, Y.begin() + pad + long(ny), NAN);  // poison the output
      gemm(pool, k, F::id, v, X.data(), s.n, Y.data() + pad);
      for (uint64_t i = 0; i < pad; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>(Y[i]), kSentinel) << "write before the output";
        ASSERT_EQ(std::bit_cast<uint32_t>(Y[pad + ny + i]), kSentinel) << "write past the output";
      }
      const auto st = test::compare(Y.data() + pad, want.data(), ny);
      std::printf("[ gemm ] %-8s %-14s %5llux%-5llu n=%-3llu nmse %.2e max-abs %.2e (ref max %.2e)\n",
                  std::string(F::name).c_str(), std::string(cpu_arch_name(arch)).c_str(), (unsigned long long)s.rows,
                  (unsigned long long)s.cols, (unsigned long long)s.n, st.nmse, st.max_abs, st.ref_max);
      EXPECT_EQ(st.nonfinite, 0u) << "unwritten or non-finite outputs";
      if (ny >= 64) {
        EXPECT_LE(st.nmse, kNmse) << F::name << " " << s.rows << "x" << s.cols << " seed " << seed;
      }
      std::vector<float> row(s.cols);
      for (uint64_t r = 0; r < s.rows; ++r) {
        F::decode_row(v, r, row.data());
        for (uint64_t t = 0; t < s.n; ++t) {
          double mag = 0;
          for (uint64_t c = 0; c < s.cols; ++c) mag += std::fabs(double(row[c]) * X[t * s.cols + c]);
          ASSERT_LE(std::fabs(double(Y[pad + t * s.rows + r]) - want[t * s.rows + r]), kAbsSumRel * mag + 1e-30)
              << F::name << " r=" << r << " t=" << t << " seed " << seed;
        }
      }
    }
  }
}

// The strict path's per-group weight scales are the trait's to the bit (ladder tables built 8 rows at a time,
// codes unpacked and looked up 8 or 16 at a time, MXFP4 e8m0 scales decoded in vectors): with one-hot tokens
// (x = e_c) every output is one product v * s, rounded once as decode_row rounds it, so Y[c, r] must equal
// W[r, c] bit for bit (zeros up to sign). Group counts 3, 17 and 25 cover the 16-, 8- and 1-group steps of the lookup; 19 rows a
// ragged last block of 8 ladder rows.
template <class F>
void check_one_hot_exact() {
  thread_pool pool(2);
  for (cpu_arch arch : runnable_archs()) {
    const cpu_kernel_table& k = cpu_kernels_for(arch);
    for (const shape& s : {shape{8, 96, 0}, shape{3, 544, 0}, shape{19, 800, 0}}) {
      const uint64_t seed = test::fresh_seed();
      const auto wf = test::random_weights(s.rows * s.cols, seed);
      const encoded_matrix e = F::encode(wf.data(), s.rows, s.cols);
      const matrix_view v{e.data.data(), e.data.size(), e.scale.empty() ? nullptr : e.scale.data(), e.scale.size(),
                          e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0, s.rows, s.cols};
      std::vector<float> X(s.cols * s.cols, 0.0f);
      for (uint64_t c = 0; c < s.cols; ++c) X[c * s.cols + c] = 1.0f;
      std::vector<float> Y(s.cols * s.rows, NAN), row(s.cols);
      gemm(pool, k, F::id, v, X.data(), s.cols, Y.data());
      uint64_t nonzero = 0;
      for (uint64_t r = 0; r < s.rows; ++r) {
        F::decode_row(v, r, row.data());
        for (uint64_t c = 0; c < s.cols; ++c) {
          nonzero += row[c] != 0.0f;
          const float y = Y[c * s.rows + r];
          ASSERT_EQ(bits_zero_blind(y), bits_zero_blind(row[c]))  // e2m1 has -0
              << F::name << " " << cpu_arch_name(arch) << " " << s.rows << "x" << s.cols << " r=" << r << " c=" << c
              << " seed " << seed;
        }
      }
      EXPECT_GT(nonzero, s.rows * s.cols / 2) << "random weights should decode mostly non-zero";
    }
  }
}

// FP8 with f32 tile scales (the DeepSeek-V3 `weight_scale_inv` layout, scale_encoding::f32): arbitrary, not
// power-of-two scales, ragged shapes (rows across a 128-row tile, columns not a multiple of 32), every arch against
// the float64 reference of the same view.
template <class F>
void check_f32_scales() {
  thread_pool pool(2);
  for (cpu_arch arch : runnable_archs()) {
    const cpu_kernel_table& k = cpu_kernels_for(arch);
    for (const shape& s : {shape{130, 200, 3}, shape{257, 1024, 1}, shape{5, 33, 2}, shape{64, 4096, 5}, shape{130, 4200, 1}}) {
      const uint64_t seed = test::fresh_seed();
      const auto wf = test::random_weights(s.rows * s.cols, seed);
      const encoded_matrix e = F::encode(wf.data(), s.rows, s.cols);
      std::vector<float> sf(e.scale.size());
      const auto jitter = test::random_weights(sf.size(), seed + 2, 1.0f);
      for (size_t i = 0; i < sf.size(); ++i) sf[i] = ue8m0::decode(e.scale[i]) * (1.0f + 0.4f * std::fabs(jitter[i]));
      std::vector<uint8_t> sb(sf.size() * 4);
      std::memcpy(sb.data(), sf.data(), sb.size());
      const matrix_view v{e.data.data(), e.data.size(), sb.data(), sb.size(), scale_encoding::f32, s.rows, s.cols};
      const auto X = test::random_weights(s.n * s.cols, seed + 1, 1.0f);
      const std::vector<double> want = ref::gemm(F::id, v, X.data(), s.n);
      std::vector<float> Y(s.n * s.rows, NAN), row(s.cols);
      gemm(pool, k, F::id, v, X.data(), s.n, Y.data());
      for (uint64_t r = 0; r < s.rows; ++r) {
        F::decode_row(v, r, row.data());
        for (uint64_t t = 0; t < s.n; ++t) {
          double mag = 0;
          for (uint64_t c = 0; c < s.cols; ++c) mag += std::fabs(double(row[c]) * X[t * s.cols + c]);
          ASSERT_LE(std::fabs(double(Y[t * s.rows + r]) - want[t * s.rows + r]), kAbsSumRel * mag + 1e-30)
              << F::name << " f32 scales " << cpu_arch_name(arch) << " " << s.rows << "x" << s.cols << " r=" << r
              << " t=" << t << " seed " << seed;
        }
      }
    }
  }
}

TEST(GemmScales, Fp8WithF32ScalesMatchesFloat64Reference) {
  check_f32_scales<fmt_fp8_b128>();
  check_f32_scales<fmt_fp8_b32>();
}

TEST(GemmScales, OneHotTokensGiveDecodedWeightsExactly) {
  check_one_hot_exact<fmt_q4tp>();
  check_one_hot_exact<fmt_q2tp>();
  check_one_hot_exact<fmt_mxfp4>();
  check_one_hot_exact<fmt_fp8_b128>();
  check_one_hot_exact<fmt_fp8_b32>();
}

// Every E4M3 code through every arch's strict f32 kernel: row r holds code r (the NaN codes 0x7F / 0xFF, which the
// kernels read as ±480, replaced by 0) at three columns — early, mid-row, in the last group — among random codes,
// and token t's only non-zero activation is 1 at the t-th of them, so y[t, r] is the decoded weight exactly (one
// product; the tile scales are powers of two). 96 columns run one row per pass, 4160 four rows per pass (the
// AVX-512 kernel) across two FP8 tile columns.
template <class F>
void check_fp8_every_code() {
  thread_pool pool(2);
  for (cpu_arch arch : runnable_archs()) {
    const cpu_kernel_table& k = cpu_kernels_for(arch);
    for (const uint64_t cols : {96ull, 4160ull}) {
      const uint64_t rows = 256, n = 3, hot[3] = {5, cols / 2 + 7, cols - 3}, seed = test::fresh_seed();
      const auto wf = test::random_weights(rows * cols, seed);
      encoded_matrix e = F::encode(wf.data(), rows, cols);
      for (uint64_t r = 0; r < rows; ++r)
        for (uint64_t h : hot) e.data[r * cols + h] = uint8_t((r & 0x7F) == 0x7F ? 0 : r);
      const matrix_view v{e.data.data(), e.data.size(), e.scale.data(), e.scale.size(), scale_encoding::e8m0, rows,
                          cols};
      std::vector<float> X(n * cols, 0.0f), Y(n * rows, NAN), row(cols);
      for (uint64_t t = 0; t < n; ++t) X[t * cols + hot[t]] = 1.0f;
      gemm(pool, k, F::id, v, X.data(), n, Y.data());
      for (uint64_t r = 0; r < rows; ++r) {
        F::decode_row(v, r, row.data());
        for (uint64_t t = 0; t < n; ++t) {
          const float want = row[hot[t]], y = Y[t * rows + r];
          ASSERT_EQ(bits_zero_blind(y), bits_zero_blind(want))
              << F::name << " " << cpu_arch_name(arch) << " " << cols << " columns, code 0x" << std::hex
              << unsigned(e.data[r * cols + hot[t]]) << std::dec << " token " << t << " seed " << seed;
        }
      }
    }
  }
}

TEST(GemmScales, Fp8EveryCodeExact) {
  check_fp8_every_code<fmt_fp8_b128>();
  check_fp8_every_code<fmt_fp8_b32>();
}

TEST(ThreadPool, StaticPartitionCoversEveryItemOnce) {
  for (unsigned threads : {1u, 2u, 3u, 7u}) {
    thread_pool pool(threads);
    for (uint64_t n : {1ull, 5ull, 8ull, 63ull, 1000ull}) {
      std::vector<int> hits(n, 0);
      for (int rep = 0; rep < 50; ++rep)
        pool.run(n, [&](uint64_t b, uint64_t e, unsigned) {
          for (uint64_t i = b; i < e; ++i) ++hits[i];
        }, 8);
      for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i], 50) << "threads " << threads << " n " << n;
    }
  }
}

}  // namespace

// The int8-activation GEMM path against the float64 reference: its error comes from rounding X to 8 bits per
// 32 values (bounded below), and it must match the strict path's selection of rows/tokens exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "cmfx/kernels/cpu_kernels.hpp"
#include "cmfx/kernels/gemm_avx512_fp8_a8.hpp"
#include "cmfx/ref/gemm_ref.hpp"
#include "support/hex.hpp"
#include "support/metrics.hpp"

using namespace cmfx;

namespace {

// Rounding x to int8 per 32 (step <= absmax/127) gives an output NMSE near 1e-5 on Gaussian data; the bound
// leaves room for outlier-heavy blocks.
// Only over >= 64 outputs: a single dot can cancel to a tiny value, so each output is also held to the bound the
// 8-bit rounding of x cannot exceed: |x − x̃| <= absmax_b / 254 in block b (act_q8.hpp: sx = absmax/127, round to
// nearest), so |Δy| <= Σ_b absmax_b / 254 · Σ_{c in b} |w_c| — with kBoundSlack for the division x · (1/sx) and
// the f32 sums, plus kSumSlack · Σ|w·x| for the accumulation order. (A Cauchy-Schwarz bound of 0.5 % · ||w||·||x||,
// used before, is not a bound: one 32-value block failed it by 20 %.)
constexpr double kNmseI8 = 2e-4;
constexpr double kBoundSlack = 1.01;
constexpr double kSumSlack = 1e-5;

template <class F>
void check_i8(uint64_t rows, uint64_t cols, uint64_t n, cpu_arch arch = cpu_arch::avx2, bool f32_scales = false,
              bool extremes = false, uint64_t zero_every = 0, gemm_rows_i8_fn kernel = nullptr) {
  if (!cpu_supports(arch))
    GTEST_SKIP() << "this CPU has no " << cpu_arch_name(arch) << ": its int8 kernels cannot run here";
  const cpu_kernel_table& k = cpu_kernels_for(arch);
  // kernel: one outside the table (natural activation layout), else the table's
  const gemm_rows_i8_fn fn = kernel ? kernel : k.gemm_i8[size_t(F::id)];
  const act_layout layout = kernel ? act_layout::natural : k.i8_layout[size_t(F::id)];
  ASSERT_NE(fn, nullptr) << F::name << " has no int8 kernel";
  const uint64_t seed = test::fresh_seed();
  auto wf = test::random_weights(rows * cols, seed);
  if (zero_every)  // every zero_every-th group of 32 all zero (q2tp: code 0, the exact zero rung)
    for (uint64_t i = 0; i < rows * cols; ++i)
      if ((i / 32) % zero_every == 0) wf[i] = 0.0f;
  encoded_matrix e = F::encode(wf.data(), rows, cols);
  scale_encoding enc = e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0;
  if (f32_scales && !e.scale.empty()) {  // the same scales as an f32 tensor (the DeepSeek-V3 layout)
    std::vector<uint8_t> f(e.scale.size() * 4);
    for (size_t i = 0; i < e.scale.size(); ++i) {
      const float x = e8m0_to_f32(e.scale[i]);
      std::memcpy(f.data() + 4 * i, &x, 4);
    }
    e.scale = std::move(f);
    enc = scale_encoding::f32;
  }
  if constexpr (F::id == format::q8_row) {
    if (extremes) {  // the int8 ends, which an encoder rarely writes: -128 (|w| = 128 as u8) and 127
      for (uint64_t i = 0; i < rows * cols; ++i) {
        if (i % 7 == 3) e.data[i] = 0x80;
        else if (i % 11 == 5) e.data[i] = 0x7F;
      }
    }
  }
  const matrix_view v{e.data.data(), e.data.size(), e.scale.empty() ? nullptr : e.scale.data(), e.scale.size(), enc,
                      rows, cols};
  const auto X = test::random_weights(n * cols, seed + 7, 1.0f);
  const auto want = ref::gemm(F::id, v, X.data(), n);
  std::vector<float> Y(n * rows, NAN);
  thread_pool pool(2);
  act_q8 scratch;
  k.quantize_act(X.data(), n, cols, layout, scratch);  // then the kernel over the pool, as gemm() calls it
  pool.run_rows(rows, [&](uint64_t r0, uint64_t r1, unsigned) { fn(v, scratch, Y.data(), rows, r0, r1); }, gemm_row_grain);
  const auto st = test::compare(Y.data(), want.data(), Y.size());
  std::printf("[ gemm-i8 ] %-7s %-6s %5llux%-5llu n=%-2llu nmse %.2e max-abs %.2e (ref max %.2e)\n",
              arch == cpu_arch::avx512_gfni ? "a512gf" : arch == cpu_arch::avx512 ? "avx512" : "avx2", std::string(F::name).c_str(),
              (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)n, st.nmse, st.max_abs, st.ref_max);
  EXPECT_EQ(st.nonfinite, 0u);
  if (Y.size() >= 64) {
    EXPECT_LE(st.nmse, kNmseI8) << F::name << " seed " << seed;
  }
  std::vector<float> row(cols);
  for (uint64_t r = 0; r < rows; ++r) {
    F::decode_row(v, r, row.data());
    for (uint64_t t = 0; t < n; ++t) {
      const float* x = X.data() + t * cols;
      double bound = 0, wx = 0;
      for (uint64_t b0 = 0; b0 < cols; b0 += 32) {
        double amax = 0, wabs = 0;
        for (uint64_t c = b0; c < std::min<uint64_t>(cols, b0 + 32); ++c) {
          amax = std::max(amax, std::fabs(double(x[c])));
          wabs += std::fabs(double(row[c]));
          wx += std::fabs(double(row[c]) * x[c]);
        }
        bound += amax / 254.0 * wabs;
      }
      ASSERT_LE(std::fabs(Y[t * rows + r] - want[t * rows + r]), kBoundSlack * bound + kSumSlack * wx)
          << F::name << " r=" << r << " t=" << t << " seed " << seed;
    }
  }
}

// act_q8's inline rounding is std::nearbyint's (round half to even) over the range it is used on: every multiple
// of 1/8 in [-130, 130] (the ties x.5 included) and random values.
TEST(ActQ8, RoundHalfEvenMatchesNearbyint) {
  for (int i = -1040; i <= 1040; ++i) {
    const float v = float(i) / 8.0f;
    ASSERT_EQ(round_half_even(v), std::nearbyint(v)) << v;
  }
  std::mt19937 g(7);
  std::uniform_real_distribution<float> u(-130.0f, 130.0f);
  for (int i = 0; i < 100000; ++i) {
    const float v = u(g);
    ASSERT_EQ(round_half_even(v), std::nearbyint(v)) << v;
  }
}

// q4tp on AVX2: blocks of 8 groups (nibble lanes of two groups per load), then single groups (608 columns = 2 · 8
// + 3 groups, 2080 = 8 · 8 + 1)
TEST(GemmI8, Q4tp) {
  for (auto [r, c, n] : {std::tuple{1ull, 32ull, 1ull}, {7ull, 96ull, 3ull}, {130ull, 4096ull, 1ull}, {64ull, 1024ull, 9ull},
                         {9ull, 608ull, 3ull}, {5ull, 512ull, 12ull}, {33ull, 2080ull, 5ull}})
    check_i8<fmt_q4tp>(r, c, n);
}
// q2tp on AVX2: blocks of 8 groups (crumb lanes), then single groups (608 columns = 2 · 8 + 3 groups)
TEST(GemmI8, Q2tp) {
  for (auto [r, c, n] : {std::tuple{1ull, 32ull, 1ull}, {7ull, 96ull, 3ull}, {130ull, 4096ull, 1ull}, {64ull, 1024ull, 9ull},
                         {9ull, 608ull, 3ull}, {5ull, 512ull, 12ull}, {33ull, 2080ull, 5ull}})
    check_i8<fmt_q2tp>(r, c, n);
}
// q2tp's zero rung (code 0: the whole group is 0, whatever its crumbs): every third group, and in 2080 columns
// (65 groups) every fifth, all zero — in whole blocks of 8 and in the single groups, on every arch this CPU has.
// The AVX2 kernel's scale lookup (lut_geometric) masks code 0 off; the decoded rows must hold those zeros.
TEST(GemmI8, Q2tpZeroRung) {
  for (cpu_arch arch : {cpu_arch::avx2, cpu_arch::avx512, cpu_arch::avx512_gfni}) {
    if (!cpu_supports(arch)) continue;
    for (auto [r, c, n, z] : {std::tuple{9ull, 608ull, 3ull, 3ull}, {33ull, 2080ull, 1ull, 5ull}, {4ull, 1024ull, 2ull, 3ull}})
      check_i8<fmt_q2tp>(r, c, n, arch, false, false, z);
  }
  const uint64_t rows = 2, cols = 256;
  auto wf = test::random_weights(rows * cols, 5);
  for (uint64_t i = 0; i < 32; ++i) wf[i] = 0.0f;
  const encoded_matrix e = fmt_q2tp::encode(wf.data(), rows, cols);
  const matrix_view v{e.data.data(), e.data.size(), nullptr, 0, scale_encoding::none, rows, cols};
  std::vector<float> row(cols);
  fmt_q2tp::decode_row(v, 0, row.data());
  for (uint64_t i = 0; i < 32; ++i) ASSERT_EQ(row[i], 0.0f) << "an all-zero group must decode to zeros (code 0)";
}
// MXFP4 on AVX2: the same blocks as q4tp, the e2m1 values through a vpshufb table
TEST(GemmI8, Mxfp4) {
  for (auto [r, c, n] : {std::tuple{1ull, 32ull, 1ull}, {7ull, 96ull, 3ull}, {130ull, 4096ull, 1ull}, {64ull, 1024ull, 9ull},
                         {9ull, 608ull, 3ull}, {33ull, 2080ull, 5ull}})
    check_i8<fmt_mxfp4>(r, c, n);
  for (auto [r, c, n] : {std::tuple{9ull, 608ull, 3ull}, {4ull, 256ull, 2ull}})  // the scales as an f32 tensor
    check_i8<fmt_mxfp4>(r, c, n, cpu_arch::avx2, true);
}
// q8_row on AVX2: blocks of 8 groups (one group per load, a vphaddd tree), then single groups; the row scale last
// (608 columns = 2 · 8 + 3 groups, 2080 = 8 · 8 + 1, 8192 the shape whose f32 path left L1)
TEST(GemmI8, Q8Row) {
  for (auto [r, c, n] : {std::tuple{1ull, 32ull, 1ull}, {7ull, 96ull, 3ull}, {130ull, 4096ull, 1ull}, {64ull, 1024ull, 9ull},
                         {9ull, 608ull, 3ull}, {5ull, 512ull, 12ull}, {33ull, 2080ull, 5ull}, {10ull, 8192ull, 2ull}})
    check_i8<fmt_q8_row>(r, c, n);
  check_i8<fmt_q8_row>(9, 608, 3, cpu_arch::avx2, false, true);
}

// The AVX-512 VNNI kernels (two groups per vpdpbusd; odd group counts take the AVX2 dot for the last group):
// the same bounds, shapes with even and odd group counts.
// q4tp: blocks of 16 groups (four groups per load), a half block of 8, then single groups.
TEST(GemmI8Avx512, Q4tp) {
  for (auto [r, c, n] : {std::tuple{1ull, 32ull, 1ull}, {7ull, 96ull, 3ull}, {130ull, 4096ull, 1ull}, {64ull, 1024ull, 9ull}, {33ull, 2080ull, 5ull},
                         {9ull, 608ull, 3ull}, {5ull, 512ull, 12ull}, {3ull, 256ull, 2ull}, {17ull, 2304ull, 1ull},
                         {11ull, 800ull, 5ull}, {6ull, 480ull, 3ull}})
    check_i8<fmt_q4tp>(r, c, n, cpu_arch::avx512);
}
// q2tp: blocks of 16 groups, a half block of 8, then single groups (608 columns = 16 + 3 groups; 256 = a half
// block alone; 2304 = V4.1's down, 4 blocks + a half; 800 = 16 + 8 + 1; 480 = 8 + 7).
TEST(GemmI8Avx512, Q2tp) {
  for (auto [r, c, n] : {std::tuple{1ull, 32ull, 1ull}, {7ull, 96ull, 3ull}, {130ull, 4096ull, 1ull}, {64ull, 1024ull, 9ull}, {33ull, 2080ull, 5ull},
                         {9ull, 608ull, 3ull}, {5ull, 512ull, 12ull}, {3ull, 256ull, 2ull}, {17ull, 2304ull, 1ull},
                         {11ull, 800ull, 5ull}, {6ull, 480ull, 3ull}})
    for (cpu_arch arch : {cpu_arch::avx512, cpu_arch::avx512_gfni})
      if (cpu_supports(arch) || arch == cpu_arch::avx512) check_i8<fmt_q2tp>(r, c, n, arch);  // (avx512 missing: skips)
  if (!cpu_supports(cpu_arch::avx512_gfni)) std::printf("[ gemm-i8 ] this CPU has no GFNI: its q2tp kernel not tested\n");
}
// The GFNI table's other int8 kernels are the same code compiled again: one shape each.
TEST(GemmI8Avx512Gfni, Q4tpAndMxfp4) {
  check_i8<fmt_q4tp>(11, 800, 5, cpu_arch::avx512_gfni);
  check_i8<fmt_mxfp4>(11, 800, 5, cpu_arch::avx512_gfni);
}
TEST(GemmI8Avx512, Mxfp4) {  // as q4tp; e8m0 scales, and f32 ones (masked loads of a half block's eight)
  for (auto [r, c, n] : {std::tuple{1ull, 32ull, 1ull}, {7ull, 96ull, 3ull}, {130ull, 4096ull, 1ull}, {64ull, 1024ull, 9ull}, {33ull, 2080ull, 5ull},
                         {9ull, 608ull, 3ull}, {5ull, 512ull, 12ull}, {3ull, 256ull, 2ull}, {17ull, 2304ull, 1ull},
                         {11ull, 800ull, 5ull}, {6ull, 480ull, 3ull}})
    check_i8<fmt_mxfp4>(r, c, n, cpu_arch::avx512);
  for (auto [r, c, n] : {std::tuple{17ull, 2304ull, 1ull}, {11ull, 800ull, 5ull}, {6ull, 480ull, 3ull}, {9ull, 608ull, 3ull}})
    check_i8<fmt_mxfp4>(r, c, n, cpu_arch::avx512, true);
}

// q8_row: blocks of 16 groups (two per load, values flipped to w + 128 for vpdpbusd, the offset 128 · Σxq taken
// off the exact dot), a half block of 8, then single groups (800 = 16 + 8 + 1; 480 = 8 + 7; 2304 = 4 blocks + a half).
TEST(GemmI8Avx512, Q8Row) {
  for (auto [r, c, n] : {std::tuple{1ull, 32ull, 1ull}, {7ull, 96ull, 3ull}, {130ull, 4096ull, 1ull}, {64ull, 1024ull, 9ull}, {33ull, 2080ull, 5ull},
                         {9ull, 608ull, 3ull}, {5ull, 512ull, 12ull}, {3ull, 256ull, 2ull}, {17ull, 2304ull, 1ull},
                         {11ull, 800ull, 5ull}, {6ull, 480ull, 3ull}, {10ull, 8192ull, 2ull}})
    check_i8<fmt_q8_row>(r, c, n, cpu_arch::avx512);
  check_i8<fmt_q8_row>(11, 800, 5, cpu_arch::avx512, false, true);
  check_i8<fmt_q8_row>(11, 800, 5, cpu_arch::avx512_gfni);
}

// FP8 with int8 activations (gemm_avx512_fp8_a8.hpp: E4M3 and the int8 values both exact in bf16, vdpbf16ps):
// the int8 bounds above at shapes with even and odd group counts (a lone last group: 96, 480, 608, 800, 2080),
// many tokens (4-token tiles and their rest), tile rows cut by the row ranges (130, 257 rows), e8m0 and f32 tile
// scales, 128 × 128 and 32 × 32 tiles; only on CPUs with AVX-512 BF16 and VBMI. The kernel is not in the dispatch
// table (docs/PERF.md "Forty-third session": slower than the f32 kernel from DRAM on dev), so it is called directly.
template <class F>
constexpr gemm_rows_i8_fn fp8_a8 = &cmfx::kernels::avx512::gemm_rows_i8_fp8<F>;
bool fp8_a8_here() {
  if (cpu_supports(cpu_arch::avx512) && cmfx::kernels::avx512::cpu_has_fp8_a8()) return true;
  std::printf("[ gemm-i8 ] this CPU has no AVX-512 BF16 + VBMI: the FP8 int8-activation kernel is not tested\n");
  return false;
}
TEST(GemmI8Avx512Bf16, Fp8) {
  if (!fp8_a8_here()) GTEST_SKIP() << "no AVX-512 BF16 + VBMI on this CPU";
  for (cpu_arch arch : {cpu_arch::avx512}) {
    for (auto [r, c, n] : {std::tuple{1ull, 32ull, 1ull}, {7ull, 96ull, 3ull}, {130ull, 4096ull, 1ull}, {64ull, 1024ull, 9ull},
                           {33ull, 2080ull, 5ull}, {9ull, 608ull, 3ull}, {5ull, 512ull, 12ull}, {257ull, 256ull, 2ull},
                           {17ull, 2304ull, 1ull}, {11ull, 800ull, 5ull}, {6ull, 480ull, 3ull}, {10ull, 8192ull, 2ull}})
      check_i8<fmt_fp8_b128>(r, c, n, arch, false, false, 0, fp8_a8<fmt_fp8_b128>);
    check_i8<fmt_fp8_b128>(17, 2304, 3, arch, true, false, 0, fp8_a8<fmt_fp8_b128>);
    check_i8<fmt_fp8_b32>(33, 800, 5, arch, false, false, 0, fp8_a8<fmt_fp8_b32>);
    check_i8<fmt_fp8_b32>(65, 2080, 2, arch, true, false, 0, fp8_a8<fmt_fp8_b32>);
  }
}
// Every E4M3 code decoded exactly: row r holds code r (NaN codes 0x7F / 0xFF excepted) at three columns — in the
// first register of a 64-column pair (5), in the second (47), in a lone last group (70 of 96 columns) — and
// token t's only non-zero activation is 127 at the t-th of them, so that the int8 rounding is exact (sx = 1) and
// y[t, r] = 127 · value(r) · tile scale, one product, exactly. The other columns hold random codes.
TEST(GemmI8Avx512Bf16, Fp8EveryCodeExact) {
  if (!fp8_a8_here()) GTEST_SKIP() << "no AVX-512 BF16 + VBMI on this CPU";
  const uint64_t rows = 256, cols = 96, n = 3, hot[3] = {5, 47, 70}, seed = test::fresh_seed();
  const auto wf = test::random_weights(rows * cols, seed);
  encoded_matrix e = fmt_fp8_b128::encode(wf.data(), rows, cols);
  for (uint64_t r = 0; r < rows; ++r)
    for (uint64_t h : hot) e.data[r * cols + h] = uint8_t((r & 0x7F) == 0x7F ? 0 : r);
  const matrix_view v{e.data.data(), e.data.size(), e.scale.data(), e.scale.size(), scale_encoding::e8m0, rows, cols};
  std::vector<float> X(n * cols, 0.0f);
  for (uint64_t t = 0; t < n; ++t) X[t * cols + hot[t]] = 127.0f;
  {
    std::vector<float> Y(n * rows, NAN);
    act_q8 scratch;
    quantize_act_q8(X.data(), n, cols, act_layout::natural, scratch);
    thread_pool pool(2);
    pool.run_rows(rows, [&](uint64_t r0, uint64_t r1, unsigned) { fp8_a8<fmt_fp8_b128>(v, scratch, Y.data(), rows, r0, r1); },
                  gemm_row_grain);
    for (uint64_t t = 0; t < n; ++t)
      for (uint64_t r = 0; r < rows; ++r) {
        const uint8_t code = (r & 0x7F) == 0x7F ? 0 : uint8_t(r);
        const float want = 127.0f * e4m3::decode(code) * e8m0_to_f32(e.scale[(r / 128) * 1]);
        ASSERT_EQ(Y[t * rows + r], want) << "code 0x" << std::hex << unsigned(code) << std::dec << " token " << t
                                         << " seed " << seed;
      }
  }
}
// The kernels derive a per-thread rearrangement of the activations once per quantisation (act_q8::generation)
// and reuse it over every range of rows one thread is handed. One scratch quantised twice (same shape, new values)
// must give, range by range, bit for bit what a fresh scratch gives; a hand-edited scratch (generation 0) is
// rearranged again. A cache keyed wrongly returns the first input's products for the second.
template <class F>
void check_i8_reuse(cpu_arch arch, gemm_rows_i8_fn kernel = nullptr) {
  if (!cpu_supports(arch)) GTEST_SKIP() << "this CPU has no " << cpu_arch_name(arch);
  const auto fn = kernel ? kernel : cpu_kernels_for(arch).gemm_i8[size_t(F::id)];
  const act_layout layout = kernel ? act_layout::natural : cpu_kernels_for(arch).i8_layout[size_t(F::id)];
  ASSERT_NE(fn, nullptr);
  const uint64_t rows = 37, cols = 800, n = 3, seed = test::fresh_seed();
  const auto wf = test::random_weights(rows * cols, seed);
  const encoded_matrix e = F::encode(wf.data(), rows, cols);
  const matrix_view v{e.data.data(), e.data.size(), e.scale.empty() ? nullptr : e.scale.data(), e.scale.size(),
                      e.scale.empty() ? scale_encoding::none : scale_encoding::e8m0, rows, cols};
  auto ranges = [&](const act_q8& a) {  // rows in ranges of 1, 2, 3, ... on this thread
    std::vector<float> Y(n * rows, NAN);
    for (uint64_t r0 = 0, len = 1; r0 < rows; r0 += len, ++len) fn(v, a, Y.data(), rows, r0, std::min(rows, r0 + len));
    return Y;
  };
  act_q8 reused;
  std::vector<float> last;
  for (uint64_t round = 0; round < 3; ++round) {
    const auto X = test::random_weights(n * cols, seed + 11 + round, 1.0f);
    act_q8 fresh;
    quantize_act_q8(X.data(), n, cols, layout, fresh);
    quantize_act_q8(X.data(), n, cols, layout, reused);
    ASSERT_NE(reused.generation, 0u);
    const auto want = ranges(fresh), got = ranges(reused);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << F::name << " round " << round << " seed " << seed;
    last = want;
  }
  // edited by hand, generation 0 (unknown contents): every value and block sum negated, which negates every
  // exact integer dot and so every output exactly (round to nearest is symmetric)
  ranges(reused);  // this thread now holds the unedited values' rearrangement
  for (uint64_t i = 0; i < n * cols; ++i) reused.q[i] = int8_t(-reused.q[i]);
  for (uint64_t i = 0; i < n * reused.blocks; ++i) reused.bsum[i] = -reused.bsum[i];
  reused.generation = 0;
  const auto edited = ranges(reused);
  for (uint64_t i = 0; i < edited.size(); ++i) ASSERT_EQ(edited[i], -last[i]) << F::name << " output " << i << " seed " << seed;
}
TEST(GemmI8, ScratchReusedAcrossQuantisations) {
  check_i8_reuse<fmt_q4tp>(cpu_arch::avx2);
  check_i8_reuse<fmt_q2tp>(cpu_arch::avx2);
  check_i8_reuse<fmt_mxfp4>(cpu_arch::avx2);
  check_i8_reuse<fmt_q8_row>(cpu_arch::avx2);
}
TEST(GemmI8Avx512, ScratchReusedAcrossQuantisations) {
  check_i8_reuse<fmt_q4tp>(cpu_arch::avx512);
  check_i8_reuse<fmt_q2tp>(cpu_arch::avx512);
  check_i8_reuse<fmt_mxfp4>(cpu_arch::avx512);
  check_i8_reuse<fmt_q8_row>(cpu_arch::avx512);
  if (cmfx::kernels::avx512::cpu_has_fp8_a8()) check_i8_reuse<fmt_fp8_b128>(cpu_arch::avx512, fp8_a8<fmt_fp8_b128>);
}

}  // namespace

#pragma once
/// @file gemm_avx512_fp8.hpp
/// @brief AVX-512 strict-f32 GEMM rows for FP8 E4M3 with tile scales (fp8_b128, fp8_b32): the decode of
///        gemm_avx2.hpp's dec_fp8 (E4M3 → f16 bits, whose value is the E4M3 value times 2^-8 for every code,
///        subnormals included; 2^8 folded into the scale) on 32 weights per step — one zero extension to 16-bit
///        lanes, a shift and an add that moves the sign from bit 14 to bit 15, two vcvtph2ps — instead of eight
///        128-bit conversions. Per 32-element group the products are summed in f32 over 16 lanes and then scaled
///        once (acc += s_g · Σ v·x, the order of the exact path; the lane split differs from the AVX2 kernel's
///        8 lanes, so the two round differently within the f32 bounds of tests/kernels/gemm_test.cpp).
///        The NaN codes (0x7F, 0xFF) become ±480, as in dec_fp8; checkpoints hold no NaN weights.
/// Include only from a translation unit compiled with -mavx2 -mfma -mf16c: the functions carry a target
/// attribute (see gemm_avx512_i8.hpp for why not TU-wide flags). Selected with the rest of the AVX-512 table
/// (cpu_supports(avx512): F, BW, VL and VNNI), although it needs only F and BW.
#include <immintrin.h>

#include <vector>

#include "cmfx/kernels/gemm_avx2.hpp"

#define CMFX_AVX512BW_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace cmfx::kernels::avx512 {

template <class F>
inline constexpr bool is_fp8_block = F::id == format::fp8_b128 || F::id == format::fp8_b32;

/// 32 E4M3 bytes → elements 0..15 in lo, 16..31 in hi, each times 2^-8.
CMFX_AVX512BW_TARGET inline void fp8_decode32(const uint8_t* q, __m512& lo, __m512& hi) noexcept {
  const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  const __m512i t = _mm512_slli_epi16(w, 7);  // exponent|mantissa in bits 7..13, the sign in bit 14
  const __m512i h = _mm512_add_epi16(t, _mm512_and_si512(t, _mm512_set1_epi16(0x4000)));  // sign → bit 15
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

/// NR consecutive rows (q: the first, rows `cols` bytes apart; their groups share the scales s[g] = the group's
/// scale × 2^8: the rows lie in one tile row) × NT tokens over `groups` 32-element groups: every activation load
/// serves NR rows (one row per pass read 4 bytes of x from L1/L2 per weight byte, and a row of 8192 columns with
/// its 32 KiB of x did not stay in L1). out[i · NT + t].
template <int NT, int NR>
CMFX_AVX512BW_TARGET void fp8_rows_tile(const uint8_t* q, uint64_t cols, const float* s, uint64_t groups,
                                        const float* X, uint64_t ldx, float* out) noexcept {
  // every loop over i and t fully unrolled, so that the arrays live in registers
  __m512 acc[NR][NT];
#pragma GCC unroll 4
  for (int i = 0; i < NR; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (uint64_t g = 0; g < groups; ++g) {
    __m512 lo[NR], hi[NR];
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) fp8_decode32(q + uint64_t(i) * cols + avx2::kgroup * g, lo[i], hi[i]);
    const __m512 sg = _mm512_set1_ps(s[g]);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const float* x = X + uint64_t(t) * ldx + g * avx2::kgroup;
      const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
#pragma GCC unroll 4
      for (int i = 0; i < NR; ++i)
        acc[i][t] = _mm512_fmadd_ps(_mm512_fmadd_ps(hi[i], x1, _mm512_mul_ps(lo[i], x0)), sg, acc[i][t]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < NR; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) out[i * NT + t] = _mm512_reduce_add_ps(acc[i][t]);
}

/// Rows per pass for NT tokens (accumulators NR · NT ≤ 8, decoded rows 2 · NR registers).
constexpr uint64_t fp8_rows_per_pass(uint64_t nt) { return nt <= 2 ? 4 : 2; }

/// Rows [r0, r1) of Y[t, r] = Σ_c W[r, c] · X[t, c] for FP8 with Tile × Tile scales; a ragged row tail
/// (cols % 32) by the trait's element decode, as gemm_avx2.hpp.
template <class F>
  requires is_fp8_block<F>
CMFX_AVX512BW_TARGET void gemm_rows_fp8(const matrix_view& w, const float* X, uint64_t n, uint64_t ldx, float* Y,
                                        uint64_t ldy, uint64_t r0, uint64_t r1) {
  constexpr uint64_t T = F::block_elems, kg = avx2::kgroup;
  const uint64_t groups = w.cols / kg, tail0 = groups * kg, tpr = (w.cols + T - 1) / T;
  std::vector<float> s(groups + 1);
  uint64_t s_tile_row = ~0ull;
  float y[4 * avx2::token_tile];
  for (uint64_t r = r0; r < r1;) {
    const uint64_t sbase = (r / T) * tpr;
    if (r / T != s_tile_row) {  // the group scales of this tile row (shared by its rows)
      for (uint64_t g = 0; g < groups; ++g) s[g] = 256.0f * detail::scale_at(w, sbase + (kg * g) / T);
      s_tile_row = r / T;
    }
    const uint64_t row_end = std::min(r1, (r / T + 1) * T);  // rows of a pass stay in one tile row
    const uint8_t* q = w.data + r * w.cols;
    // rows of this pass, the same for every token tile (4 rows only where no tile has more than 2 tokens)
    const uint64_t want = fp8_rows_per_pass(std::min(n, avx2::token_tile)), avail = row_end - r;
    const uint64_t nr = avail >= want ? want : avail >= 2 ? 2 : 1;
    for (uint64_t t0 = 0; t0 < n; t0 += avx2::token_tile) {
      const uint64_t nt = std::min(avx2::token_tile, n - t0);
      avx2::with_tile(nt, [&](auto NT) {
        const float* Xt = X + t0 * ldx;
        if (nr == 4) {  // only where every tile has ≤ 2 tokens (fp8_rows_per_pass)
          if constexpr (NT() <= 2) fp8_rows_tile<NT(), 4>(q, w.cols, s.data(), groups, Xt, ldx, y);
        } else if (nr == 2) {
          fp8_rows_tile<NT(), 2>(q, w.cols, s.data(), groups, Xt, ldx, y);
        } else {
          fp8_rows_tile<NT(), 1>(q, w.cols, s.data(), groups, Xt, ldx, y);
        }
      });
      for (uint64_t i = 0; i < nr; ++i)
        for (uint64_t t = 0; t < nt; ++t) {
          const float* x = X + (t0 + t) * ldx;
          const uint8_t* qi = q + i * w.cols;
          float v = y[i * nt + t];
          for (uint64_t c = tail0; c < w.cols; ++c)
            v += e4m3::decode(qi[c]) * detail::scale_at(w, sbase + c / T) * x[c];
          Y[(t0 + t) * ldy + r + i] = v;
        }
    }
    r += nr;
  }
}

}  // namespace cmfx::kernels::avx512

#pragma once
/// @file gemm_avx512_8bit.hpp
/// @brief AVX-512 strict-f32 GEMM rows for the 8-bit weight formats, 32 weights per step and four rows per pass
///        (every activation load serves four rows: one row per pass left a row of 8192 columns, whose 32 KiB of x
///        did not stay in L1, at the AVX2 kernel's speed).
///        FP8 E4M3 with tile scales (fp8_b128, fp8_b32): E4M3 → f16 bits, whose value is the E4M3 value times 2^-8
///        for every code, subnormals included (2^8 folded into the scale), by one sign extension to 16-bit lanes,
///        a shift and an and that clears bit 14 (the sign's copy), and two vcvtph2ps — the same bits as
///        gemm_avx2.hpp's dec_fp8, which gets them by in-lane unpacks. The NaN codes (0x7F, 0xFF) become ±480, as
///        in dec_fp8; checkpoints hold no NaN weights.
///        q8_row: int8 sign-extended and converted, the row's f16 scale applied to the row's sum (as dec_dense).
///        Per FP8 tile (the 4 groups of a 128-column tile, 1 of a 32-column one) the products are summed in f32
///        over 16 lanes and then scaled once (acc += s · Σ v·x); q8_row sums the whole row. The exact path scales
///        per 32-element group and the AVX2 kernel sums over 8 lanes, so the three round differently within the
///        f32 bounds of tests/kernels/gemm_test.cpp.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "cmfx/kernels/gemm_avx2.hpp"
#include "cmfx/kernels/prefetch.hpp"

#define CMFX_AVX512BW_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace cmfx::kernels::avx512 {

template <class F>
inline constexpr bool is_fp8_block = F::id == format::fp8_b128 || F::id == format::fp8_b32;
/// The formats of this kernel.
template <class F>
inline constexpr bool is_8bit_rows = is_fp8_block<F> || F::id == format::q8_row;

/// 32 E4M3 bytes → elements 0..15 in lo, 16..31 in hi, each times 2^-8.
CMFX_AVX512BW_TARGET inline void fp8_decode32(const uint8_t* q, __m512& lo, __m512& hi) noexcept {
  // sign-extended, the sign fills bits 7..15; shifted left by 7: exponent|mantissa in bits 7..13, the sign in bits
  // 14 and 15; bit 14 cleared (one op fewer than zero-extending and moving the sign by an add)
  const __m512i w = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
  const __m512i h = _mm512_and_si512(_mm512_slli_epi16(w, 7), _mm512_set1_epi16(short(0xBFFF)));
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

/// 32 int8 weights (q8_row) → elements 0..15 in lo, 16..31 in hi.
CMFX_AVX512BW_TARGET inline void q8_decode32(const uint8_t* q, __m512& lo, __m512& hi) noexcept {
  lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))));
  hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16))));
}

template <bool Fp8>
CMFX_AVX512BW_TARGET inline void decode32(const uint8_t* q, __m512& lo, __m512& hi) noexcept {
  if constexpr (Fp8)
    fp8_decode32(q, lo, hi);
  else
    q8_decode32(q, lo, hi);
}

/// NR consecutive rows (q: the first, rows `cols` bytes apart; their groups share the scales s[g]: FP8's tile scale
/// × 2^8 — the rows lie in one tile row — or 1 for q8_row) × NT tokens over `groups` 32-element groups: every
/// activation load serves NR rows. out[i · NT + t]. GS groups share one scale (FP8 block 128: 4, block 32: 1;
/// q8_row: 0, every group, so no scale is applied here): their products are summed in f32 over 16 lanes and then
/// scaled once, acc += s · Σ v·x — one multiplication per GS groups instead of per group (fifty-ninth session:
/// the kernel was compute-bound on the Intel dev host, 13.7 GB/s from cache against a 15.7 GB/s read).
template <bool Fp8, int NT, int NR, uint64_t GS>
CMFX_AVX512BW_TARGET void rows_tile_8bit(const uint8_t* q, uint64_t cols, const float* s, uint64_t groups,
                                        const float* X, uint64_t ldx, float* out) noexcept {
  // every loop over i and t fully unrolled, so that the arrays live in registers
  __m512 acc[NR][NT];
#pragma GCC unroll 4
  for (int i = 0; i < NR; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  const uint64_t span = GS == 0 ? groups : GS;
  for (uint64_t g0 = 0; g0 < groups; g0 += span) {
    const uint64_t g1 = std::min(groups, g0 + span);
    __m512 part[NR][NT];
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) part[i][t] = GS == 0 ? acc[i][t] : _mm512_setzero_ps();
    for (uint64_t g = g0; g < g1; ++g) {
      __m512 lo[NR], hi[NR];
#pragma GCC unroll 4
      for (int i = 0; i < NR; ++i) decode32<Fp8>(q + uint64_t(i) * cols + avx2::kgroup * g, lo[i], hi[i]);
      if ((g & 1) == 0)  // one line per row every other group, 1 KiB ahead (prefetch.hpp)
#pragma GCC unroll 4
        for (int i = 0; i < NR; ++i) prefetch_ahead(q + uint64_t(i) * cols + avx2::kgroup * g);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        const float* x = X + uint64_t(t) * ldx + g * avx2::kgroup;
        const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
#pragma GCC unroll 4
        for (int i = 0; i < NR; ++i) part[i][t] = _mm512_fmadd_ps(hi[i], x1, _mm512_fmadd_ps(lo[i], x0, part[i][t]));
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i)
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t)
        acc[i][t] = GS == 0 ? part[i][t] : _mm512_fmadd_ps(part[i][t], _mm512_set1_ps(s[g0]), acc[i][t]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < NR; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) out[i * NT + t] = _mm512_reduce_add_ps(acc[i][t]);
}

/// Rows per pass for NT tokens of `cols` columns (accumulators NR · NT ≤ 8, decoded rows 2 · NR registers): one where
/// a token's activations fit L1 (≤ 4096 columns: FP8 1024x4096 measured 17 GB/s on one row, 15 on four, dev), else
/// four for ≤ 2 tokens, two for more.
/// (Column tiles of 4096 with one row per pass, so that a tile's activations stay in L1, were 1.7-1.8x slower at
/// 4096x8192 for one token on dev, FP8 and q8_row: each row's half is a separate 4 KiB stream.)
constexpr uint64_t rows_per_pass_8bit(uint64_t nt, uint64_t cols) { return cols <= 4096 ? 1 : nt <= 2 ? 4 : 2; }

/// The ragged tail of row r (columns from tail0: cols % 32 of them) by the trait's element decode, added to v, then
/// the row scale (q8_row; FP8's tile scales are applied per element here and per group before).
template <class F>
CMFX_AVX512BW_TARGET inline float row_end_8bit(const matrix_view& w, uint64_t r, uint64_t tail0, const float* x, float v) {
  constexpr uint64_t T = F::block_rows;
  const uint8_t* qi = w.data + r * w.cols;
  for (uint64_t c = tail0; c < w.cols; ++c) {
    if constexpr (is_fp8_block<F>)
      v += e4m3::decode(qi[c]) * detail::scale_at(w, (r / T) * ((w.cols + T - 1) / T) + c / T) * x[c];
    else
      v += float(int8_t(qi[c])) * x[c];
  }
  return is_fp8_block<F> ? v : v * load_f16(w.data + w.rows * w.cols + 2 * r);
}

/// Rows [r0, r1) of Y[t, r] = Σ_c W[r, c] · X[t, c] for FP8 with Tile × Tile scales or q8_row; a ragged row tail
/// (cols % 32) by the trait's element decode, as gemm_avx2.hpp, then the row scale (q8_row).
template <class F>
  requires is_8bit_rows<F>
CMFX_AVX512BW_TARGET void gemm_rows_8bit(const matrix_view& w, const float* X, uint64_t n, uint64_t ldx, float* Y,
                                         uint64_t ldy, uint64_t r0, uint64_t r1) {
  constexpr bool fp8 = is_fp8_block<F>;
  // q8_row with up to 4096 columns: the AVX2 kernel, one row per pass (its activations stay in L1; measured faster
  // there on dev: 1024x4096 27 GB/s against 13–17 here, 4096x8192 11–15 against 18.5).
  if constexpr (!fp8)
    if (w.cols <= 4096) return avx2::gemm_rows<F>(w, X, n, ldx, Y, ldy, r0, r1);
  constexpr uint64_t T = F::block_rows, kg = avx2::kgroup;  // q8_row: block_rows 1 (no tile), see row_end
  constexpr uint64_t gs = fp8 ? T / kg : 0;  // groups per scale (q8_row: its row scale comes last, row_end_8bit)
  static_assert(!fp8 || (T % kg == 0 && gs >= 1), "an FP8 tile holds whole groups");
  const uint64_t groups = w.cols / kg, tail0 = groups * kg, tpr = (w.cols + T - 1) / T;
  // FP8's group scales of the current tile row, in a per-thread buffer that only grows (no allocation per call);
  // q8_row reads none (gs = 0: its row scale comes last)
  thread_local std::vector<float> s;
  if (s.size() < groups + 1) s.resize(groups + 1);
  uint64_t s_tile_row = ~0ull;
  float y[4 * avx2::token_tile];
  for (uint64_t r = r0; r < r1;) {
    const uint64_t sbase = (r / T) * tpr;
    if (fp8 && r / T != s_tile_row) {  // the group scales of this tile row (shared by its rows)
      for (uint64_t g = 0; g < groups; ++g) s[g] = 256.0f * detail::scale_at(w, sbase + (kg * g) / T);
      s_tile_row = r / T;
    }
    const uint64_t row_end = fp8 ? std::min(r1, (r / T + 1) * T) : r1;  // FP8: a pass stays in one tile row
    const uint8_t* q = w.data + r * w.cols;
    // rows of this pass, the same for every token tile (4 rows only where no tile has more than 2 tokens)
    const uint64_t want = rows_per_pass_8bit(std::min(n, avx2::token_tile), w.cols), avail = row_end - r;
    const uint64_t nr = avail >= want ? want : avail >= 2 ? 2 : 1;
    for (uint64_t t0 = 0; t0 < n; t0 += avx2::token_tile) {
      const uint64_t nt = std::min(avx2::token_tile, n - t0);
      avx2::with_tile(nt, [&](auto NT) {
        const float* Xt = X + t0 * ldx;
        if (nr == 4) {  // only where every tile has ≤ 2 tokens (rows_per_pass_8bit)
          if constexpr (NT() <= 2) rows_tile_8bit<fp8, NT(), 4, gs>(q, w.cols, s.data(), groups, Xt, ldx, y);
        } else if (nr == 2) {
          rows_tile_8bit<fp8, NT(), 2, gs>(q, w.cols, s.data(), groups, Xt, ldx, y);
        } else {
          rows_tile_8bit<fp8, NT(), 1, gs>(q, w.cols, s.data(), groups, Xt, ldx, y);
        }
      });
      for (uint64_t i = 0; i < nr; ++i)
        for (uint64_t t = 0; t < nt; ++t)
          Y[(t0 + t) * ldy + r + i] = row_end_8bit<F>(w, r + i, tail0, X + (t0 + t) * ldx, y[i * nt + t]);
    }
    r += nr;
  }
}

}  // namespace cmfx::kernels::avx512

#pragma once
/// @file gemm_avx512_i8.hpp
/// @brief AVX-512 VNNI integer-dot GEMM for q4tp, q2tp and MXFP4 with int8 activations (act_q8.hpp): the same
///        arithmetic as gemm_avx2_i8.hpp — exact int32 group dots, then y += s_g · sx_tg · dot_g − offset — with
///        two 32-element groups per 512-bit register and one vpdpbusd (u8 × s8, 4 products per int32 lane) per
///        pair of groups instead of vpmaddubsw + vpmaddwd per group. Per-row set-up (ladders, codes, scales) and
///        the offset correction are gemm_avx2_i8.hpp's.
/// Include only from a translation unit compiled with -mavx2 -mfma -mf16c. The AVX-512 functions below carry a
/// target attribute instead of TU-wide -mavx512* flags: every inline function this TU shares with the AVX2 one
/// (ladders, row set-up, format decoders) is then compiled with the same flags in both, so the linker's choice
/// of one copy can never put AVX-512 instructions on a path an AVX2-only CPU runs.
#include <immintrin.h>

#include <cstring>

#include "cmfx/kernels/gemm_avx2_i8.hpp"

#define CMFX_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace cmfx::kernels::avx512 {

using avx2::has_i8_kernel;
using avx2::i8_layout;

/// Groups g and g + 1 of a row as 64 u8 weight bytes in the activation layout of two consecutive blocks, and
/// (MXFP4) the sign mask of the signed values (vpdpbusd takes u8 weights: signs move to the activations).
template <class F>
CMFX_AVX512_TARGET inline __m512i pair_u8(const uint8_t* values, uint64_t g, __mmask64& neg) noexcept {
  neg = 0;
  if constexpr (F::id == format::q2tp) {
    // 16 bytes (8 per group) → qwords [g, g, g, g, g+1, g+1, g+1, g+1] → shifted by 0, 2, 4, 6: the four planes
    const __m512i b = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 0, 0, 0, 1, 1, 1, 1),
                                               _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values + 8 * g))));
    return _mm512_and_si512(_mm512_srlv_epi64(b, _mm512_setr_epi64(0, 2, 4, 6, 0, 2, 4, 6)), _mm512_set1_epi8(0x03));
  } else {
    // 32 bytes (16 per group) → 128-bit lanes [g, g, g+1, g+1] → low nibbles, high nibbles of each group
    const __m512i b = _mm512_shuffle_i64x2(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + 16 * g))),
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + 16 * g))),
        _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i nib = _mm512_and_si512(
        _mm512_srlv_epi32(b, _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4)), _mm512_set1_epi8(0x0F));
    if constexpr (F::id == format::mxfp4) {
      const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
      const __m512i v = _mm512_shuffle_epi8(lut, nib);  // 2·e2m1, signed
      neg = _mm512_movepi8_mask(v);
      return _mm512_abs_epi8(v);
    } else {
      return nib;
    }
  }
}

template <class F, int NT>
CMFX_AVX512_TARGET inline void row_tile_vnni(const avx2::i8_row<F>& d, uint64_t groups, const act_q8& a, uint64_t t0, float* sc,
                        float out[NT]) noexcept {
  float corr[NT];
  for (int t = 0; t < NT; ++t) {
    const uint64_t tb = (t0 + uint64_t(t)) * a.blocks;
    corr[t] = avx2::combine_scales(d.scales.data(), a.scale.data() + tb, a.bsum.data() + tb, groups,
                                   avx2::i8_offset<F>, sc + uint64_t(t) * groups);
  }
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  uint64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    __mmask64 neg;
    const __m512i w = pair_u8<F>(d.values, g, neg);
    for (int t = 0; t < NT; ++t) {
      __m512i xq = _mm512_loadu_si512(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g);
      if constexpr (F::id == format::mxfp4) xq = _mm512_mask_sub_epi8(xq, neg, _mm512_setzero_si512(), xq);
      const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, xq);
      const float* s = sc + uint64_t(t) * groups + g;
      const __m512 sv = _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(s[0]), _mm512_set1_ps(s[1]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sv, acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
  if (g < groups)  // an odd last group: the AVX2 dot
    for (int t = 0; t < NT; ++t) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g));
      out[t] += avx2::hsum(_mm256_mul_ps(_mm256_cvtepi32_ps(d.dot(g, xq)), _mm256_set1_ps(sc[uint64_t(t) * groups + g])));
    }
  for (int t = 0; t < NT; ++t) out[t] -= corr[t];
}

template <class F>
void gemm_rows_i8(const matrix_view& w, const act_q8& a, float* Y, uint64_t ldy, uint64_t r0, uint64_t r1) {
  avx2::i8_row<F> d(w);
  const uint64_t groups = w.cols / 32, n = a.n;
  std::vector<float> sc(avx2::token_tile * groups);  // per call, not per row
  for (uint64_t r = r0; r < r1; ++r) {
    d.begin_row(r);
    for (uint64_t t0 = 0; t0 < n; t0 += avx2::token_tile) {
      const uint64_t nt = std::min(avx2::token_tile, n - t0);
      float y[avx2::token_tile];
      avx2::with_tile(nt, [&](auto NT) { row_tile_vnni<F, NT()>(d, groups, a, t0, sc.data(), y); });
      for (uint64_t t = 0; t < nt; ++t) Y[(t0 + t) * ldy + r] = y[t];
    }
  }
}

}  // namespace cmfx::kernels::avx512

#pragma once
/// @file act_q8_avx2.hpp
/// @brief quantize_act_q8 (act_q8.hpp) with AVX2, 32 values per step: the same IEEE operations in the same order
///        per value — absmax, sx = absmax / 127, inv = 1 / sx (two divisions per block, no reciprocal estimate),
///        round-half-even(x · inv) clamped to ±127 — so the bytes, scales and sums are those of the scalar
///        function for every finite input (tests/kernels/act_q8_test.cpp). The scalar one took ~2 ns per value on
///        dev (7.9 µs for 4 096 columns, 16 µs for 8 192) on the calling thread before every int8 matvec's fork: up
///        to a sixth of a 16-thread matvec's time on the H200 host.
/// Include only from a translation unit compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include "cmfx/kernels/act_q8.hpp"

namespace cmfx::kernels::avx2 {

/// The 32 int8 values of a block in natural order (as permuted by the packs: see below) → the layout's order.
inline __m256i act_to_layout(__m256i natural, act_layout layout) noexcept {
  switch (layout) {
    case act_layout::natural: return natural;
    case act_layout::nibble: {  // per 128-bit half: its 8 even elements, then its 8 odd ones; then the halves' evens first
      const __m256i pick = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,  //
                                            0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
      return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(natural, pick), 0xD8);  // qwords 0 2 1 3
    }
    case act_layout::crumb: {  // per half: elements ≡ 0, 1, 2, 3 (mod 4), four each; then plane k of both halves
      const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,  //
                                            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
      return _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(natural, pick), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    }
  }
  return natural;
}

/// The absmax of 32 values: max(|x|, m) keeps m where x is NaN, as std::max(m, |x|) does.
inline float act_absmax32(const float* x) noexcept {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), m);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

/// One block: q = clamp(rhe(x · inv), ±127) in the layout's order at q, their sum returned.
inline int32_t act_block_q8(const float* x, float inv, act_layout layout, int8_t* q) noexcept {
  const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f), vi = _mm256_set1_ps(inv);
  __m256i v[4];
  __m256i s = _mm256_setzero_si256();
  for (int k = 0; k < 4; ++k) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vi), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    v[k] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi));
    s = _mm256_add_epi32(s, v[k]);
  }
  // int32 → int8 (no saturation: |q| <= 127); the packs leave dwords of elements {0-3, 8-11, 16-19, 24-27 | 4-7, …}
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
  const __m256i natural = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), act_to_layout(natural, layout));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s4);
}

/// act_q8.hpp's quantize_act_q8, bit for bit on finite inputs. Eight blocks at a time share one pair of vector
/// divisions (sx = absmax / 127, inv = 1 / sx: IEEE divisions, as the scalar ones).
inline void quantize_act_q8(const float* X, uint64_t n, uint64_t cols, act_layout layout, act_q8& out) {
  out.generation = next_act_generation();
  out.layout = layout;
  out.n = n;
  out.cols = cols;
  out.blocks = cols / act_block;
  if (out.q.size() < n * cols) out.q.resize(n * cols);
  if (out.scale.size() < n * out.blocks) out.scale.resize(n * out.blocks);
  if (out.bsum.size() < n * out.blocks) out.bsum.resize(n * out.blocks);
  const uint64_t B = out.blocks;
  for (uint64_t t = 0; t < n; ++t) {
    const float* xt = X + t * cols;
    int8_t* qt = out.q.data() + t * cols;
    float* st = out.scale.data() + t * B;
    int32_t* bt = out.bsum.data() + t * B;
    uint64_t b = 0;
    for (; b + 8 <= B; b += 8) {
      alignas(32) float am[8], inv[8];
      for (int j = 0; j < 8; ++j) am[j] = act_absmax32(xt + (b + uint64_t(j)) * act_block);
      const __m256 a = _mm256_load_ps(am);
      const __m256 sx = _mm256_blendv_ps(_mm256_set1_ps(1.0f), _mm256_div_ps(a, _mm256_set1_ps(127.0f)),
                                         _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_GT_OQ));
      _mm256_storeu_ps(st + b, sx);
      _mm256_store_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), sx));
      for (int j = 0; j < 8; ++j) {
        const uint64_t o = (b + uint64_t(j)) * act_block;
        bt[b + uint64_t(j)] = act_block_q8(xt + o, inv[j], layout, qt + o);
      }
    }
    for (; b < B; ++b) {
      const float amax = act_absmax32(xt + b * act_block);
      const float sx = amax > 0.0f ? amax / 127.0f : 1.0f;
      st[b] = sx;
      bt[b] = act_block_q8(xt + b * act_block, 1.0f / sx, layout, qt + b * act_block);
    }
  }
}

}  // namespace cmfx::kernels::avx2

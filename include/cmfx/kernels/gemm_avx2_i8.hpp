#pragma once
/// @file gemm_avx2_i8.hpp
/// @brief AVX2 integer-dot GEMM for the 4-bit and 2-bit formats: weights stay integers (q4tp nibbles,
///        q2tp crumbs, MXFP4 2*e2m1), activations are int8 per 32 (act_q8.hpp), and vpmaddubsw + vpmaddwd
///        form the 32-element dot in exact int32. Per group: y += s_g * sx_tg * (dot_g - offset_g), with
///        offset = 8*sum(xq) for q4tp (nib - 8), 1.5*sum(xq) for q2tp (c - 1.5), 0 for MXFP4 (signed LUT,
///        scaled by 1/2). The strict f32 path (gemm_avx2.hpp) stays the parity reference.
/// Include only from a translation unit compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <cstring>

#include "cmfx/kernels/act_q8.hpp"
#include "cmfx/kernels/gemm_avx2.hpp"

namespace cmfx::kernels::avx2 {

/// Which formats have an integer-dot kernel, and the activation layout each needs.
template <class F>
constexpr bool has_i8_kernel = F::id == format::q4tp || F::id == format::q2tp || F::id == format::mxfp4;
template <class F>
constexpr act_layout i8_layout = F::id == format::q2tp ? act_layout::crumb : act_layout::nibble;

/// 16 packed nibble bytes -> [16 low nibbles | 16 high nibbles] as u8 (pairs with act_layout::nibble).
inline __m256i nibbles_u8(const uint8_t* p) noexcept {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_and_si256(_mm256_srlv_epi32(b, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0F));
}
/// 8 q2tp bytes -> the four 2-bit planes, 8 bytes each (pairs with act_layout::crumb).
inline __m256i crumbs_u8(const uint8_t* p) noexcept {
  int64_t v;
  std::memcpy(&v, p, 8);
  const __m256i b = _mm256_set1_epi64x(v);
  return _mm256_and_si256(_mm256_srlv_epi64(b, _mm256_setr_epi64x(0, 2, 4, 6)), _mm256_set1_epi8(0x03));
}

/// Per-row setup and per-group weights as (u8 magnitudes, s8 signs applied to x) for maddubs.
template <class F>
struct i8_row {
  const matrix_view& w;
  ladder::planes p;
  std::vector<float> scales;  // per-group weight scale of the current row
  std::vector<uint8_t> codes;
  const uint8_t* values = nullptr;
  explicit i8_row(const matrix_view& wv)
      : w(wv), p(wv.rows, wv.cols, F::id == format::q2tp ? 8 : 16), scales(wv.cols / 32), codes(wv.cols / 32) {}
  float ladders[8][ladder::rungs];
  uint64_t block0 = ~uint64_t(0);
  void begin_row(uint64_t r) {
    if constexpr (F::id == format::mxfp4) {
      values = w.data + r * (w.cols / 2);
      const uint64_t spr = w.cols / 32;
      for (uint64_t g = 0; g < spr; ++g)
        scales[g] = 0.5f * (w.scale_enc == scale_encoding::f32 ? detail::scale_at(w, r * spr + g)
                                                               : e8m0_to_f32(w.scale[r * spr + g]));
    } else {
      if (block0 == ~uint64_t(0) || r < block0 || r - block0 >= 8) {
        block0 = r;
        build_ladders8(w.data + p.params, r, std::min<uint64_t>(8, w.rows - r), ladders);
      }
      const float* t = ladders[r - block0];
      ladder::get_codes(w.data + p.codes + r * p.stride, p.gpr, codes.data());
      for (uint64_t g = 0; g < p.gpr; ++g) {
        const uint32_t c = codes[g];
        scales[g] = F::id == format::q4tp ? t[c] : (c == 0 ? 0.0f : t[c - 1]);
      }
      values = w.data + r * p.gpr * (F::id == format::q4tp ? 16 : 8);
    }
  }
  /// int32 lanes whose sum is sum_j w_j * xq_j over the group.
  __m256i dot(uint64_t g, __m256i xq) const noexcept {
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (F::id == format::q4tp) {
      return _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles_u8(values + 16 * g), xq), ones);
    } else if constexpr (F::id == format::q2tp) {
      return _mm256_madd_epi16(_mm256_maddubs_epi16(crumbs_u8(values + 8 * g), xq), ones);
    } else {
      const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6,
                                           8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
      const __m256i wv = _mm256_shuffle_epi8(lut, nibbles_u8(values + 16 * g));
      return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xq, wv)), ones);
    }
  }
  /// What to subtract per int32 lane (an eighth of the group's offset), in float.
  static float lane_offset(int32_t bsum) noexcept {
    if constexpr (F::id == format::q4tp) return float(bsum);            // 8*bsum / 8 lanes
    if constexpr (F::id == format::q2tp) return 0.1875f * float(bsum);  // 1.5*bsum / 8 lanes
    return 0.0f;
  }
};

/// Offset per group of q4tp (nib - 8) and q2tp (c - 1.5) in units of sum(xq); 0 for MXFP4 (signed values).
template <class F>
constexpr float i8_offset = F::id == format::q4tp ? 8.0f : (F::id == format::q2tp ? 1.5f : 0.0f);

/// Per row and token: sc[g] = s_g * sx_tg (so the group loop broadcasts one float from memory), and the row's
/// total offset correction sum_g sc[g] * offset * bsum_tg, computed 8 groups at a time.
inline float combine_scales(const float* s, const float* sx, const int32_t* bsum, uint64_t groups, float offset,
                            float* sc) noexcept {
  __m256 corr = _mm256_setzero_ps();
  uint64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + g), _mm256_loadu_ps(sx + g));
    _mm256_storeu_ps(sc + g, v);
    corr = _mm256_fmadd_ps(v, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsum + g))), corr);
  }
  float c = hsum(corr);
  for (; g < groups; ++g) {
    sc[g] = s[g] * sx[g];
    c += sc[g] * float(bsum[g]);
  }
  return c * offset;
}

template <class F, int NT>
inline void row_tile_i8(const i8_row<F>& d, uint64_t groups, const act_q8& a, uint64_t t0, float* sc,
                        float out[NT]) noexcept {
  float corr[NT];
  for (int t = 0; t < NT; ++t) {
    const uint64_t tb = (t0 + uint64_t(t)) * a.blocks;
    corr[t] = combine_scales(d.scales.data(), a.scale.data() + tb, a.bsum.data() + tb, groups, i8_offset<F>,
                             sc + uint64_t(t) * groups);
  }
  __m256 acc[2][NT];
  for (int t = 0; t < NT; ++t) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
  auto step = [&](uint64_t g, __m256* acc_g) {
    for (int t = 0; t < NT; ++t) {
      const __m256i xq =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g));
      acc_g[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d.dot(g, xq)), _mm256_broadcast_ss(sc + uint64_t(t) * groups + g),
                                 acc_g[t]);
    }
  };
  uint64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    step(g, acc[0]);
    step(g + 1, acc[1]);
  }
  if (g < groups) step(g, acc[0]);
  for (int t = 0; t < NT; ++t) out[t] = hsum(_mm256_add_ps(acc[0][t], acc[1][t])) - corr[t];
}

template <class F>
void gemm_rows_i8(const matrix_view& w, const act_q8& a, float* Y, uint64_t ldy, uint64_t r0, uint64_t r1) {
  i8_row<F> d(w);
  const uint64_t groups = w.cols / 32, n = a.n;
  std::vector<float> sc(token_tile * groups);  // per call, not per row
  for (uint64_t r = r0; r < r1; ++r) {
    d.begin_row(r);
    for (uint64_t t0 = 0; t0 < n; t0 += token_tile) {
      const uint64_t nt = std::min(token_tile, n - t0);
      float y[token_tile];
      with_tile(nt, [&](auto NT) { row_tile_i8<F, NT()>(d, groups, a, t0, sc.data(), y); });
      for (uint64_t t = 0; t < nt; ++t) Y[(t0 + t) * ldy + r] = y[t];
    }
  }
}

}  // namespace cmfx::kernels::avx2

#pragma once
/// @file gemm_avx2_i8.hpp
/// @brief AVX2 integer-dot GEMM for the 4-bit, 2-bit and int8 formats: weights stay integers (q4tp nibbles,
///        q2tp crumbs, MXFP4 2*e2m1, q8_row bytes), activations are int8 per 32 (act_q8.hpp), and vpmaddubsw + vpmaddwd
///        form the 32-element dot in exact int32. Per group: y += s_g * sx_tg * (dot_g - offset_g), with
///        offset = 8*sum(xq) for q4tp (nib - 8), 1.5*sum(xq) for q2tp (c - 1.5), 0 for MXFP4 (signed LUT,
///        scaled by 1/2; q8_row: signed values, its row scale applied to the row's sum), subtracted from the exact
///        integer dot (i8_token_side). The strict f32 path
///        (gemm_avx2.hpp) stays the parity reference.
/// Include only from a translation unit compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "cmfx/kernels/act_q8.hpp"
#include "cmfx/kernels/gemm_avx2.hpp"
#include "cmfx/kernels/prefetch.hpp"

namespace cmfx::kernels::avx2 {

/// Which formats have an integer-dot kernel, and the activation layout each needs.
template <class F>
constexpr bool has_i8_kernel =
    F::id == format::q4tp || F::id == format::q2tp || F::id == format::mxfp4 || F::id == format::q8_row;
template <class F>
constexpr act_layout i8_layout = F::id == format::q2tp   ? act_layout::crumb
                                 : F::id == format::q8_row ? act_layout::natural
                                                           : act_layout::nibble;

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

/// The lane orders the vphaddd trees below leave their eight per-group dots in (lane L holds group group[L]).
inline constexpr lane_order nibble_tree_lanes{{0, 2, 4, 6, 1, 3, 5, 7}};  // row_tile_nibbles
inline constexpr lane_order crumb_tree_lanes{{0, 1, 4, 5, 2, 3, 6, 7}};   // row_tile_crumbs_q2tp

/// The lane index vector of O (for vpermd / vpermps: lane L takes element O.group[L]).
template <lane_order O>
inline __m256i lane_index() noexcept {
  return _mm256_setr_epi32(O.group[0], O.group[1], O.group[2], O.group[3], O.group[4], O.group[5], O.group[6],
                           O.group[7]);
}

/// e8m0 bytes k of eight groups -> 0.5 * 2^(k - 127) (MXFP4's scale times the 1/2 of the 2*e2m1 LUT) in lane
/// order O: k << 23, with k = 0 the subnormal 2^-127 and k = 255 NaN as e8m0_to_f32, then one exact halving.
template <lane_order O = natural_lanes>
inline __m256 mxfp4_scales8(const uint8_t* k8) noexcept {
  __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(k8));
  if constexpr (O.group != natural_lanes.group)
    b = _mm_shuffle_epi8(b, _mm_setr_epi8(char(O.group[0]), char(O.group[1]), char(O.group[2]), char(O.group[3]),
                                          char(O.group[4]), char(O.group[5]), char(O.group[6]), char(O.group[7]), -1,
                                          -1, -1, -1, -1, -1, -1, -1));
  const __m256i k = _mm256_cvtepu8_epi32(b);
  __m256i bits = _mm256_slli_epi32(k, 23);
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(k, _mm256_setzero_si256()));
  bits = _mm256_blendv_epi8(bits, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(k, _mm256_set1_epi32(0xFF)));
  return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0.5f));
}

/// Per-row setup and per-group weights as (u8 magnitudes, s8 signs applied to x) for maddubs. Weight scales are
/// not expanded per row: scales8(g) / scale1(g) compute them where the per-token pass needs them.
template <class F>
struct i8_row {
  static constexpr bool is_ladder = F::id != format::mxfp4;
  const matrix_view& w;
  ladder_scales<F::id == format::q2tp ? 2 : 4> ls;
  std::vector<float> scales;  // MXFP4 with f32 scales only: the current row's scales
  const uint8_t* values = nullptr;
  const uint8_t* e8m0 = nullptr;  // MXFP4 with e8m0 scales: the current row's scale bytes
  explicit i8_row(const matrix_view& wv)
      : w(wv), ls(wv), scales(!is_ladder && wv.scale_enc == scale_encoding::f32 ? wv.cols / 32 : 0) {}
  void begin_row(uint64_t r) noexcept {
    if constexpr (is_ladder) {
      ls.begin_row(r);
      values = w.data + r * ls.p.gpr * (F::id == format::q4tp ? 16 : 8);
    } else {
      values = w.data + r * (w.cols / 2);
      const uint64_t spr = w.cols / 32;
      e8m0 = w.scale + r * spr;
      if (w.scale_enc == scale_encoding::f32)
        for (uint64_t g = 0; g < spr; ++g) scales[g] = 0.5f * detail::scale_at(w, r * spr + g);
    }
  }
  /// The scale lookup state of the current row, held in registers over the per-token pass (the ladder's
  /// geometric factors, lut_geometric; nothing for MXFP4).
  struct no_lut {};
  using lut_t = std::conditional_t<is_ladder, lut_geometric<F::id == format::q2tp>, no_lut>;
  lut_t lut() const noexcept {
    if constexpr (is_ladder) return lut_t(ls.table, ls.ratio);
    else return no_lut{};
  }
  /// Weight scales of groups g .. g + 7 (g % 8 == 0, g + 8 <= groups) in lane order O.
  template <lane_order O = natural_lanes>
  __m256 scales8([[maybe_unused]] const lut_t& l, uint64_t g) const noexcept {
    if constexpr (is_ladder) {
      return ls.template scales8<O>(l, g);
    } else {
      if (scales.empty()) return mxfp4_scales8<O>(e8m0 + g);
      const __m256 v = _mm256_loadu_ps(scales.data() + g);
      if constexpr (O.group == natural_lanes.group) return v;
      else return _mm256_permutevar8x32_ps(v, lane_index<O>());
    }
  }
  float scale1(uint64_t g) const noexcept {
    if constexpr (is_ladder) return ls.scale1(g);
    else return scales.empty() ? 0.5f * e8m0_to_f32(e8m0[g]) : scales[g];
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
};

/// Offset per group of q4tp (nib - 8) and q2tp (c - 1.5) in units of sum(xq); 0 for MXFP4 (signed values).
template <class F>
constexpr float i8_offset = F::id == format::q4tp ? 8.0f : (F::id == format::q2tp ? 1.5f : 0.0f);

/// Per call, for tokens [0, a.n) ([n, groups] each): wsx = sx / m and boff = m · offset · bsum, so that a group's
/// term is s_g · wsx_g · (m · dot_g − boff_g) with an exact integer in the parentheses (m = 2 for q2tp, whose
/// offset is 1.5; offset 8 for q4tp, MXFP4's shift 12 in the AVX-512 blocks). The offset then never appears as a
/// float sum that cancels against the products'. Within each whole block of 8 groups the entries are stored in
/// lane order O (the kernel's vphaddd tree's order; the groups past the last whole block in natural order).
/// Used by the kernels here and the AVX-512 kernels (natural order).
struct i8_token_side {
  aligned_vector<float> wsx;
  aligned_vector<int32_t> boff;
  template <lane_order O = natural_lanes>
  void prepare(const act_q8& a, int m, int m_offset) {
    const uint64_t k = a.n * a.blocks, whole = a.blocks / 8 * 8;
    if (wsx.size() < k) wsx.resize(k), boff.resize(k);
    const float inv = 1.0f / float(m);  // 1 or 0.5: exact
    for (uint64_t t = 0; t < a.n; ++t)
      for (uint64_t g = 0; g < a.blocks; ++g) {
        const uint64_t src = t * a.blocks + (g < whole ? g / 8 * 8 + O.group[g % 8] : g);
        wsx[t * a.blocks + g] = a.scale[src] * inv, boff[t * a.blocks + g] = m_offset * a.bsum[src];
      }
  }
};

/// The sum of the eight int32 lanes of v.
inline int32_t hsum_i32(__m256i v) noexcept {
  const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i q = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtsi128_si32(_mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(2, 3, 0, 1))));
}

/// The activations of the nibble-lane kernel (row_tile_nibbles): per token, per pair of groups (2p, 2p + 1) of the
/// whole blocks of 8 groups, 64 bytes [A lo | B lo | A hi | B hi] — the 16 elements of group A (2p) that pair with
/// its low nibbles (act_layout::nibble puts them first), those of group B, then the high-nibble halves — as a
/// 32-byte load of the two groups' value bytes splits into a low and a high nibble plane. Groups past the last
/// whole block are not rearranged.
inline void nibble_pair_acts(const act_q8& a, aligned_vector<int8_t>& xt) {
  const uint64_t blocks = a.blocks / 8, per_token = blocks * 256;
  if (xt.size() < a.n * per_token) xt.resize(a.n * per_token);
  for (uint64_t t = 0; t < a.n; ++t)
    for (uint64_t p = 0; p < blocks * 4; ++p)
      for (uint32_t half = 0; half < 2; ++half)      // low-nibble elements, then high
        for (uint32_t i = 0; i < 2; ++i)             // group A, then B
          std::memcpy(xt.data() + t * per_token + p * 64 + half * 32 + i * 16,
                      a.q.data() + t * a.cols + (2 * p + i) * 32 + 16 * half, 16);
}

/// q4tp and MXFP4 in blocks of 8 groups, every int32 lane inside one group: a 32-byte load holds two groups'
/// value bytes; its low and high nibbles (q4tp: the codes; MXFP4: 2·e2m1 through a vpshufb table, its sign moved
/// onto the activations) pair through vpmaddubsw with activations rearranged once per call (nibble_pair_acts), the
/// two planes' int16 sums add up (≤ 2 · 3810, no saturation), one vpmaddwd leaves int32 lanes 0–3 with group A and
/// 4–7 with group B; per 8 groups three vphaddd give one int32 dot per group in lane order nibble_tree_lanes, then
/// the group terms s_g · wsx_g · (dot_g − boff_g) (i8_token_side with m = 1: q4tp's offset 8 · Σxq, MXFP4's 0)
/// with the 8 weight scales looked up in the loop, the scales and the token side produced in that lane order
/// (a vpermd back to group order cost 1.0 of 7.8 ns per block on dev's Zen 3) — no per-row scale pass, no stored
/// products. Per 8 groups: 4 loads, 2 prefetches (2 KiB ahead, prefetch.hpp), 4 shifts, 8 ands (MXFP4: 8 vpshufb
/// more), the scale lookup, and per token 8 vpmaddubsw (MXFP4: + 8 vpsignb) + 4 adds + 4 vpmaddwd + 3 vphaddd, a
/// subtraction, a multiply, a conversion and an fma. The last groups (fewer than 8) one at a time.
template <class F, int NT>
inline void row_tile_nibbles(const i8_row<F>& d, uint64_t groups, const act_q8& a, const int8_t* xt,
                             const i8_token_side& ts, uint64_t t0, float out[NT]) noexcept {
  static_assert(F::id == format::q4tp || F::id == format::mxfp4);
  const auto lut = d.lut();
  const uint64_t per_token = groups / 8 * 256;
  const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  const __m256i e2m1 = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8,
                                        12, 0, -1, -2, -3, -4, -6, -8, -12);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  uint64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    __m256i w[4][2];  // per pair of groups: the low and the high nibble plane (MXFP4: as signed 2·e2m1)
    prefetch_ahead<avx2_prefetch_distance>(d.values + 16 * g, 2);  // the block's 128 value bytes (prefetch.hpp)
    for (int p = 0; p < 4; ++p) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d.values + 16 * (g + 2 * uint64_t(p))));
      w[p][0] = _mm256_and_si256(v, low);
      w[p][1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
      if constexpr (F::id == format::mxfp4) {
        w[p][0] = _mm256_shuffle_epi8(e2m1, w[p][0]);
        w[p][1] = _mm256_shuffle_epi8(e2m1, w[p][1]);
      }
    }
    const __m256 s = d.template scales8<nibble_tree_lanes>(lut, g);
    const uint64_t xo = g / 8 * 256;
    for (int t = 0; t < NT; ++t) {
      const int8_t* x = xt + (t0 + uint64_t(t)) * per_token + xo;
      __m256i dp[4];
      for (int p = 0; p < 4; ++p) {
        const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * p));
        const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 64 * p + 32));
        __m256i s16;
        if constexpr (F::id == format::q4tp) {
          s16 = _mm256_add_epi16(_mm256_maddubs_epi16(w[p][0], x0), _mm256_maddubs_epi16(w[p][1], x1));
        } else {
          s16 = _mm256_add_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w[p][0]), _mm256_sign_epi8(x0, w[p][0])),
                                 _mm256_maddubs_epi16(_mm256_abs_epi8(w[p][1]), _mm256_sign_epi8(x1, w[p][1])));
        }
        dp[p] = _mm256_madd_epi16(s16, ones);
      }
      const __m256i dot = _mm256_hadd_epi32(_mm256_hadd_epi32(dp[0], dp[1]), _mm256_hadd_epi32(dp[2], dp[3]));
      const uint64_t o = (t0 + uint64_t(t)) * a.blocks + g;
      const __m256i v = _mm256_sub_epi32(dot, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ts.boff.data() + o)));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(s, _mm256_loadu_ps(ts.wsx.data() + o)), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
  for (; g < groups; ++g) {
    const float s = d.scale1(g);
    for (int t = 0; t < NT; ++t) {
      const uint64_t o = (t0 + uint64_t(t)) * a.blocks + g;
      const __m256i xq =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g));
      out[t] += s * ts.wsx[o] * float(hsum_i32(d.dot(g, xq)) - ts.boff[o]);
    }
  }
}

/// q2tp's activations for the crumb-lane kernels (row_tile_crumbs_q2tp here with G = 4, its AVX-512 twin with G =
/// 8): per token, per block of 2G groups, per half h (G groups), per crumb k, G · 8 bytes whose bytes 8i .. 8i + 7
/// are the crumb-layout elements 8k .. 8k + 7 of the half's group i — they pair with crumb k ((byte >> 2k) & 3) of
/// that group's 8 value bytes as a load of G groups holds them. Groups past the last whole block are not
/// rearranged (the kernels take them one by one).
template <uint32_t G>
inline void q2tp_crumb_acts(const act_q8& a, aligned_vector<int8_t>& xt) {
  const uint64_t blocks = a.blocks / (2 * G), per_token = blocks * 64 * G;
  if (xt.size() < a.n * per_token) xt.resize(a.n * per_token);
  for (uint64_t t = 0; t < a.n; ++t)
    for (uint64_t b = 0; b < blocks; ++b)
      for (uint32_t h = 0; h < 2; ++h)
        for (uint32_t k = 0; k < 4; ++k)
          for (uint32_t i = 0; i < G; ++i)
            std::memcpy(xt.data() + t * per_token + b * 64 * G + h * 32 * G + k * 8 * G + i * 8,
                        a.q.data() + t * a.cols + (2 * G * b + G * h + i) * 32 + 8 * k, 8);
}

/// q2tp in blocks of 8 groups, every int32 lane inside one group: a 32-byte load holds four groups' value bytes as
/// stored; crumb k of every byte is (w >> 2k) & 3, vpmaddubsw pairs it with activations rearranged once per call
/// (q2tp_crumb_acts<4>), the four crumbs' int16 sums add up (≤ 4 · 762, no saturation) and one vpmaddwd leaves
/// int32 lane L with half of group L / 2; per 8 groups one vphaddd gives one int32 dot per group in lane order
/// crumb_tree_lanes, then the group terms s_g · wsx_g · (2 · dot_g − 3 · bsum_g) (i8_token_side, m = 2) with the 8
/// weight scales looked up in the loop, the scales and the token side produced in that lane order (no vpermd) —
/// no per-row scale pass, no stored products. Per 8 groups: 2 loads, 6 shifts, 8 ands, the scale lookup, and per
/// token 8 vpmaddubsw + 6 adds + 2 vpmaddwd + a vphaddd, a shift, a subtraction, a multiply, a conversion and an
/// fma. The last groups (fewer than 8) one at a time.
template <int NT>
inline void row_tile_crumbs_q2tp(const i8_row<fmt_q2tp>& d, uint64_t groups, const act_q8& a, const int8_t* xt,
                                 const i8_token_side& ts, uint64_t t0, float out[NT]) noexcept {
  const auto lut = d.lut();
  const uint64_t per_token = groups / 8 * 256;
  const __m256i three = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  uint64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    __m256i c[2][4];
    for (int h = 0; h < 2; ++h) {
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d.values + 8 * (g + 4 * uint64_t(h))));
      c[h][0] = _mm256_and_si256(w, three);
      c[h][1] = _mm256_and_si256(_mm256_srli_epi16(w, 2), three);
      c[h][2] = _mm256_and_si256(_mm256_srli_epi16(w, 4), three);
      c[h][3] = _mm256_and_si256(_mm256_srli_epi16(w, 6), three);
    }
    const __m256 s = d.template scales8<crumb_tree_lanes>(lut, g);
    const uint64_t xo = g / 8 * 256;
    for (int t = 0; t < NT; ++t) {
      const int8_t* x = xt + (t0 + uint64_t(t)) * per_token + xo;
      __m256i dh[2];
      for (int h = 0; h < 2; ++h) {
        auto prod = [&](int k) {  // crumb k's int16 pair sums
          return _mm256_maddubs_epi16(c[h][k], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 128 * h + 32 * k)));
        };
        const __m256i s16 = _mm256_add_epi16(_mm256_add_epi16(prod(0), prod(1)), _mm256_add_epi16(prod(2), prod(3)));
        dh[h] = _mm256_madd_epi16(s16, ones);
      }
      const uint64_t o = (t0 + uint64_t(t)) * a.blocks + g;
      const __m256i dot = _mm256_hadd_epi32(dh[0], dh[1]);
      const __m256i v = _mm256_sub_epi32(_mm256_slli_epi32(dot, 1),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ts.boff.data() + o)));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(s, _mm256_loadu_ps(ts.wsx.data() + o)), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
  for (; g < groups; ++g) {
    const float s = d.scale1(g);
    for (int t = 0; t < NT; ++t) {
      const uint64_t o = (t0 + uint64_t(t)) * a.blocks + g;
      const __m256i xq =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g));
      out[t] += s * ts.wsx[o] * float(2 * hsum_i32(d.dot(g, xq)) - ts.boff[o]);
    }
  }
}

/// The int32 lanes whose sum is the signed dot of 32 int8 weights and 32 int8 activations (natural layout):
/// vpmaddubsw takes |w| as u8 (|-128| = 128 fits) against x with w's sign (vpsignb; x is in [-127, 127]), so a
/// pair sums to at most 2 · 128 · 127 < 2^15 (no saturation), and vpmaddwd leaves eight int32 lanes.
inline __m256i q8_dot32(__m256i w, __m256i x) noexcept {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w)), _mm256_set1_epi16(1));
}

/// q8_row with int8 activations, blocks of 8 groups (256 weight bytes, 8 loads): per token 8 q8_dot32, a vphaddd
/// tree (6) and one 128-bit-half exchange leave one exact int32 dot per group in lane order, then the group terms
/// sx_g · dot_g (no offset: the values are signed); the row scale multiplies the row's sum once. The last groups
/// (fewer than 8) one at a time. (The f32 path converts every weight to float and, at 8 192 columns, loses its 32 KiB
/// of activations from L1 between rows: docs/PERF.md "CPU matvec: cmfx vs ggml".)
template <int NT>
inline void row_tile_q8(const int8_t* wr, uint64_t groups, const act_q8& a, uint64_t t0, float rs, float out[NT]) noexcept {
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  uint64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    __m256i w[8];
    for (int p = 0; p < 8; ++p) w[p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + 32 * (g + uint64_t(p))));
    for (int t = 0; t < NT; ++t) {
      const int8_t* x = a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g;
      __m256i d[8];
      for (int p = 0; p < 8; ++p) d[p] = q8_dot32(w[p], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 32 * p)));
      // each 128-bit half: groups 0..3 (h0) and 4..7 (h1) of its four lanes per group, then the halves added
      const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(d[0], d[1]), _mm256_hadd_epi32(d[2], d[3]));
      const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(d[4], d[5]), _mm256_hadd_epi32(d[6], d[7]));
      const __m256i dot = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20), _mm256_permute2x128_si256(h0, h1, 0x31));
      const float* sx = a.scale.data() + (t0 + uint64_t(t)) * a.blocks + g;
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_loadu_ps(sx), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = hsum(acc[t]);
  for (; g < groups; ++g) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + 32 * g));
    for (int t = 0; t < NT; ++t) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g));
      out[t] += a.scale[(t0 + uint64_t(t)) * a.blocks + g] * float(hsum_i32(q8_dot32(w, x)));
    }
  }
  for (int t = 0; t < NT; ++t) out[t] *= rs;
}

/// The values of row r of a q8_row matrix and its f16 row scale (q8.hpp: [i8 R·C][f16 × R]).
inline const int8_t* q8_row_values(const matrix_view& w, uint64_t r) noexcept {
  return reinterpret_cast<const int8_t*>(w.data) + r * w.cols;
}
inline float q8_row_scale(const matrix_view& w, uint64_t r) noexcept { return load_f16(w.data + w.rows * w.cols + 2 * r); }

/// Rows [r0, r1) of Y = X · W^T for q8_row with int8 activations in the natural layout (act_q8.hpp).
inline void gemm_rows_i8_q8(const matrix_view& w, const act_q8& a, float* Y, uint64_t ldy, uint64_t r0, uint64_t r1) {
  const uint64_t groups = w.cols / 32, n = a.n;
  for (uint64_t r = r0; r < r1; ++r) {
    const int8_t* wr = q8_row_values(w, r);
    const float rs = q8_row_scale(w, r);
    for (uint64_t t0 = 0; t0 < n; t0 += token_tile) {
      const uint64_t nt = std::min(token_tile, n - t0);
      float y[token_tile];
      with_tile(nt, [&](auto NT) { row_tile_q8<NT()>(wr, groups, a, t0, rs, y); });
      for (uint64_t t = 0; t < nt; ++t) Y[(t0 + t) * ldy + r] = y[t];
    }
  }
}

/// Rows [r0, r1) of Y = X · W^T with int8 activations: q2tp through row_tile_crumbs_q2tp, q4tp and MXFP4 through
/// row_tile_nibbles.
template <class F>
void gemm_rows_i8(const matrix_view& w, const act_q8& a, float* Y, uint64_t ldy, uint64_t r0, uint64_t r1) {
  i8_row<F> d(w);
  const uint64_t groups = w.cols / 32, n = a.n;
  // Per thread, grown once, and derived once per quantisation of the activations (act_q8::generation), not per
  // call: a row tail or a chunked MoE calls this for many ranges of rows of one product.
  thread_local aligned_vector<int8_t> xt;
  thread_local i8_token_side ts;
  thread_local uint64_t prepared = 0;
  if (act_stale(a, prepared)) {
    if constexpr (F::id == format::q2tp) {
      q2tp_crumb_acts<4>(a, xt);
      ts.template prepare<crumb_tree_lanes>(a, 2, 3);
    } else {
      nibble_pair_acts(a, xt);
      ts.template prepare<nibble_tree_lanes>(a, 1, F::id == format::q4tp ? 8 : 0);
    }
    prepared = a.generation;
  }
  for (uint64_t r = r0; r < r1; ++r) {
    d.begin_row(r);
    for (uint64_t t0 = 0; t0 < n; t0 += token_tile) {
      const uint64_t nt = std::min(token_tile, n - t0);
      float y[token_tile];
      if constexpr (F::id == format::q2tp)
        with_tile(nt, [&](auto NT) { row_tile_crumbs_q2tp<NT()>(d, groups, a, xt.data(), ts, t0, y); });
      else
        with_tile(nt, [&](auto NT) { row_tile_nibbles<F, NT()>(d, groups, a, xt.data(), ts, t0, y); });
      for (uint64_t t = 0; t < nt; ++t) Y[(t0 + t) * ldy + r] = y[t];
    }
  }
}

}  // namespace cmfx::kernels::avx2

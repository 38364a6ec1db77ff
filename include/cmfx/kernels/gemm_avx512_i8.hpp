#pragma once
/// @file gemm_avx512_i8.hpp
/// @brief AVX-512 VNNI integer-dot GEMM for q4tp, q2tp, MXFP4 and q8_row with int8 activations (act_q8.hpp): exact int32
///        group dots with vpdpbusd (u8 weights × s8 activations, 4 products per int32 lane), blocks of 16 groups
///        with every int32 lane inside one group (row_tile_crumbs_q2tp, row_tile_nibbles), a row's last 8 groups
///        as half a block and any fewer one at a time (add_last_groups). The weights' integer offset (q2tp 1.5,
///        q4tp 8, MXFP4's shift 12) is taken from the exact dot before the conversion: a group adds
///        s_g · wsx_g · (m · dot_g − boff_g), the token factors wsx = sx / m and boff = m · offset · bsum prepared
///        once per call (i8_token_side; m = 2 for q2tp's half-integer offset, else 1), the 16 weight scales s_g
///        looked up in the loop (one vpermt2ps over the row's ladder; MXFP4 from its e8m0 bytes). Per-row set-up
///        (ladders) is gemm_avx2_i8.hpp's.
/// Include only from a translation unit compiled with -mavx2 -mfma -mf16c. The AVX-512 functions below carry a
/// target attribute instead of TU-wide -mavx512* flags: every inline function this TU shares with the AVX2 one
/// (ladders, row set-up, format decoders) is then compiled with the same flags in both, so the linker's choice
/// of one copy can never put AVX-512 instructions on a path an AVX2-only CPU runs.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "cmfx/kernels/gemm_avx2_i8.hpp"
#include "cmfx/kernels/prefetch.hpp"

#if defined(CMFX_AVX512_GFNI)  // src/cpu/kernels_avx512_gfni.cpp: its own namespace, so no inline function of the
                               // plain AVX-512 TU's can be replaced by one compiled for GFNI (or the reverse)
#define CMFX_AVX512_I8_NS avx512_gfni
#define CMFX_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c,gfni")))
#else
#define CMFX_AVX512_I8_NS avx512
#define CMFX_AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))
#endif

namespace cmfx::kernels::CMFX_AVX512_I8_NS {

using avx2::has_i8_kernel;
using avx2::i8_layout;
using avx2::i8_token_side;

/// Codes g .. g + 15 of a ladder row as sixteen int32 lanes (p: the 10 bytes of the 16 codes, g % 8 == 0). With
/// `more` (more codes of the row follow: 16 bytes from p are inside the row) a plain 16-byte load, else a masked
/// load of `bytes` bytes (10, or 5 for the last eight codes of a row) that reads nothing past them (masked byte
/// loads cost a fifth of the q2tp kernel's time on dev when used for every chunk); lanes whose bytes were not
/// loaded hold code 0. Each 128-bit lane holds all 10 bytes, so one vpshufb gives every int32 lane the two bytes
/// of its code; then shift and mask (ladder_codes8 for 16 codes).
CMFX_AVX512_TARGET inline __m512i ladder_codes16(const uint8_t* p, bool more, unsigned bytes = 10) noexcept {
  static_assert(ladder::code_bits == 5, "the byte picks below are those of 5-bit codes");
  constexpr auto pick = [](int k) {  // bytes 5k/8 and 5k/8 + 1 into an int32 lane, its upper two bytes zeroed
    const int byte = 5 * k / 8;
    return int(0xFFFF0000u | uint32_t(byte + 1) << 8 | uint32_t(byte));
  };
  const __m512i idx = _mm512_setr_epi32(pick(0), pick(1), pick(2), pick(3), pick(4), pick(5), pick(6), pick(7), pick(8),
                                        pick(9), pick(10), pick(11), pick(12), pick(13), pick(14), pick(15));
  const __m512i sh = _mm512_setr_epi32(0, 5, 2, 7, 4, 1, 6, 3, 0, 5, 2, 7, 4, 1, 6, 3);
  const __m128i c = more ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                         : _mm_maskz_loadu_epi8(__mmask16((1u << bytes) - 1), p);
  const __m512i b = _mm512_broadcast_i32x4(c);
  return _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi8(b, idx), sh), _mm512_set1_epi32(int(ladder::rungs - 1)));
}

/// e8m0 bytes of `n` groups (16, or 8 for a half block: the other lanes load as code 0) -> 0.5 * 2^(k - 127)
/// (avx2::mxfp4_scales8 for 16 groups).
CMFX_AVX512_TARGET inline __m512 mxfp4_scales16(const uint8_t* k16, unsigned n = 16) noexcept {
  const __m128i b = n == 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(k16))
                            : _mm_maskz_loadu_epi8(__mmask16((1u << n) - 1), k16);
  const __m512i k = _mm512_cvtepu8_epi32(b);
  __m512i bits = _mm512_slli_epi32(k, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(k, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(0xFF)), _mm512_set1_epi32(0x7FC00000));
  return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0.5f));
}

/// Weight scales of groups g .. g + 15 of the current row (half: g .. g + 7, lanes 8..15 finite, their terms masked
/// off): the ladder's 32-entry table in two registers and one vpermt2ps over 16 codes; MXFP4's f32 scales or e8m0
/// bytes. more: 16 bytes of codes from g's are inside the row (ladder_codes16).
template <class F>
CMFX_AVX512_TARGET inline __m512 scales16(const avx2::i8_row<F>& d, __m512 tlo, __m512 thi, uint64_t g, bool more,
                                          bool half) noexcept {
  if constexpr (avx2::i8_row<F>::is_ladder) {
    return _mm512_permutex2var_ps(tlo, ladder_codes16(d.ls.codes + g / 8 * ladder::code_bits, more, half ? 5 : 10), thi);
  } else {
    if (!d.scales.empty()) return _mm512_maskz_loadu_ps(half ? __mmask16(0x00FF) : __mmask16(0xFFFF), d.scales.data() + g);
    return mxfp4_scales16(d.e8m0 + g, half ? 8 : 16);
  }
}

/// Lane i of the result = lanes 2i + 2i+1 of (x | y): a group's lanes summed in pairs (row_tile_nibbles: four lanes →
/// two → one over two calls; row_tile_crumbs_q2tp: two → one).
CMFX_AVX512_TARGET inline __m512i fold(__m512i x, __m512i y) noexcept {
  const __m512i ia = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i ib = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return _mm512_add_epi32(_mm512_permutex2var_epi32(x, ia, y), _mm512_permutex2var_epi32(x, ib, y));
}

/// acc + one group term per lane, s · wsx · ((dot << Shift) − boff), for the groups at o of the token side; m
/// masks the lanes of a half block (their token factors load as 0).
template <int Shift>
CMFX_AVX512_TARGET inline __m512 i8_terms(__m512 acc, __m512i dot, __m512 s, const i8_token_side& ts, uint64_t o,
                                          __mmask16 m) noexcept {
  const __m512i v = _mm512_sub_epi32(Shift ? _mm512_slli_epi32(dot, Shift) : dot, _mm512_maskz_loadu_epi32(m, ts.boff.data() + o));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, ts.wsx.data() + o)), acc);
}

/// Groups [g, groups) of the row (fewer than eight) one at a time with the AVX2 dot, added to out: the term
/// s · wsx · (m · dot − m · offset · bsum) — MXFP4's values unshifted here, so no offset (its boff holds the
/// blocks' shift).
template <class F, int NT>
CMFX_AVX512_TARGET inline void add_last_groups(const avx2::i8_row<F>& d, const act_q8& a, const i8_token_side& ts,
                                               uint64_t t0, uint64_t g, uint64_t groups, float out[NT]) noexcept {
  constexpr int m = F::id == format::q2tp ? 2 : 1;
  for (; g < groups; ++g) {
    const float s = d.scale1(g);
    for (int t = 0; t < NT; ++t) {
      const uint64_t o = (t0 + uint64_t(t)) * a.blocks + g;
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g));
      const int32_t dot = avx2::hsum_i32(d.dot(g, xq));
      const int32_t off = F::id == format::mxfp4 ? 0 : ts.boff[o];
      out[t] += s * ts.wsx[o] * float(m * dot - off);
    }
  }
}

// ---- q2tp: eight groups per 512-bit load, every int32 lane inside one group
// A 64-byte load holds eight groups' value bytes as stored; crumb k of every byte is (w >> 2k) & 3 (a shift and an
// and, or one vgf2p8affineqb; k = 0 an and), and vpdpbusd pairs it with activations rearranged once per call
// (q2tp_crumb_acts16), so int32 lane L holds a partial dot of group L / 2; per 16 groups one fold (2 vpermt2d +
// add) leaves one int32 dot per group, then i8_terms with m = 2. Per 16 groups: 2 loads, 6 shifts and 8 ands (or
// 2 ands and 6 affines), the codes' 4 ops and a vpermt2ps, and per token 8 vpdpbusd, 5 integer ops, a multiply, a
// conversion and an fma. Before (the nineteenth to twenty-second sessions) a per-row pass stored s_g · sx_g and
// summed the offset apart, and a row's last eight groups went two per register: on dev's Zen 4 that cost ~35 ns
// per row, half the time of a 2304-column row from cache. (An earlier VBMI kernel that gathered byte j of 16
// groups per vpermt2b and split its crumbs with vpmultishiftqb was 1.3-1.5x slower still: docs/PERF.md
// "Nineteenth session".)

/// The activations of tokens [0, a.n) for the q2tp kernel: per token, per eight groups (a half block), per crumb
/// plane k, per group of the eight its 8 bytes of plane k (act_q8's crumb layout: bytes 8k .. 8k + 7 of the
/// group). Groups past the last whole eight are not rearranged. Returns the bytes per token.
inline uint64_t q2tp_crumb_acts16(const act_q8& a, aligned_vector<int8_t>& xt) {
  const uint64_t halves = a.blocks / 8, per_token = halves * 256;
  if (xt.size() < a.n * per_token) xt.resize(a.n * per_token);
  for (uint64_t t = 0; t < a.n; ++t)
    for (uint64_t h = 0; h < halves; ++h)
      for (uint32_t k = 0; k < 4; ++k)
        for (uint32_t i = 0; i < 8; ++i)
          std::memcpy(xt.data() + t * per_token + h * 256 + k * 64 + i * 8,
                      a.q.data() + t * a.cols + (8 * h + i) * 32 + 8 * k, 8);
  return per_token;
}

/// With GFNI, crumb k = one vgf2p8affineqb: output bits 0 and 1 of every byte are its input bits 2k and 2k + 1
/// (matrix byte 7 - i selects the input bits of output bit i), every other output bit 0 — instead of a shift and
/// an and (on dev's Zen 4, 64 × 5120 from cache: 7.2 → 5.8–6.6 µs).
CMFX_AVX512_TARGET inline void q2tp_planes(const uint8_t* v, __m512i c[4]) noexcept {
  const __m512i three = _mm512_set1_epi8(3);
  const __m512i w = _mm512_loadu_si512(v);
  c[0] = _mm512_and_si512(w, three);
#if defined(CMFX_AVX512_GFNI)
  constexpr auto crumb = [](int k) { return (long long)(uint64_t(1u << (2 * k)) << 56 | uint64_t(1u << (2 * k + 1)) << 48); };
  c[1] = _mm512_gf2p8affine_epi64_epi8(w, _mm512_set1_epi64(crumb(1)), 0);
  c[2] = _mm512_gf2p8affine_epi64_epi8(w, _mm512_set1_epi64(crumb(2)), 0);
  c[3] = _mm512_gf2p8affine_epi64_epi8(w, _mm512_set1_epi64(crumb(3)), 0);
#else
  c[1] = _mm512_and_si512(_mm512_srli_epi16(w, 2), three);
  c[2] = _mm512_and_si512(_mm512_srli_epi16(w, 4), three);
  c[3] = _mm512_and_si512(_mm512_srli_epi16(w, 6), three);
#endif
}

/// Lanes 2i, 2i + 1 hold the partial dots of group i of the eight (xh: the half block's 256 rearranged bytes).
/// Two chains of two vpdpbusd: the four of a half are not one latency chain.
CMFX_AVX512_TARGET inline __m512i q2tp_half_dot(const __m512i c[4], const int8_t* xh) noexcept {
  const __m512i e0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c[0], _mm512_loadu_si512(xh)), c[1],
                                         _mm512_loadu_si512(xh + 64));
  const __m512i e1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), c[2], _mm512_loadu_si512(xh + 128)),
                                         c[3], _mm512_loadu_si512(xh + 192));
  return _mm512_add_epi32(e0, e1);
}

template <int NT>
CMFX_AVX512_TARGET inline void row_tile_crumbs_q2tp(const avx2::i8_row<fmt_q2tp>& d, uint64_t groups, const act_q8& a,
                                                    const int8_t* xt, uint64_t per_token, const i8_token_side& ts,
                                                    uint64_t t0, float out[NT]) noexcept {
  const __m512 tlo = _mm512_loadu_ps(d.ls.table), thi = _mm512_loadu_ps(d.ls.table + 16);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  uint64_t g = 0;
  for (; g + 16 <= groups; g += 16) {
    prefetch_ahead<avx512_i8_prefetch_distance>(d.values + 8 * g, 2);  // the block's 128 value bytes (prefetch.hpp)
    __m512i c[2][4];
    q2tp_planes(d.values + 8 * g, c[0]);
    q2tp_planes(d.values + 8 * (g + 8), c[1]);
    const __m512 s = scales16(d, tlo, thi, g, g + 32 <= groups, false);
    for (int t = 0; t < NT; ++t) {
      const int8_t* x = xt + (t0 + uint64_t(t)) * per_token + g * 32;
      acc[t] = i8_terms<1>(acc[t], fold(q2tp_half_dot(c[0], x), q2tp_half_dot(c[1], x + 256)), s, ts,
                           (t0 + uint64_t(t)) * a.blocks + g, __mmask16(0xFFFF));
    }
  }
  if (g + 8 <= groups) {  // a half block: lanes 8..15 of the dot are 0, their token factors masked to 0
    __m512i c[4];
    q2tp_planes(d.values + 8 * g, c);
    const __m512 s = scales16(d, tlo, thi, g, false, true);
    for (int t = 0; t < NT; ++t)
      acc[t] = i8_terms<1>(acc[t], fold(q2tp_half_dot(c, xt + (t0 + uint64_t(t)) * per_token + g * 32), _mm512_setzero_si512()),
                           s, ts, (t0 + uint64_t(t)) * a.blocks + g, __mmask16(0x00FF));
    g += 8;
  }
  for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
  add_last_groups<fmt_q2tp, NT>(d, a, ts, t0, g, groups, out);
}

// ---- q4tp and MXFP4: four groups per 512-bit load, every int32 lane inside one group
// A 64-byte load holds four groups' nibbles as they are stored; its low nibbles (the even elements) and high
// nibbles (the odd ones) go into two vpdpbusd against activations rearranged once per call (nibble_lanes_acts), so
// int32 lane L holds a partial dot of group L / 4; per 16 groups a transpose-add of four such vectors (6 vpermt2d,
// 3 adds) leaves one int32 per group, then i8_terms with m = 1 (q4tp: offset 8). MXFP4's codes become
// 2·e2m1 + 12 (u8, one vpshufb per vector; vpdpbusd takes unsigned weights), whose shift is its offset 12 here;
// its last groups, unshifted, have none.

/// The activations of tokens [0, n) for row_tile_nibbles: per token, per eight groups (a half block), per chunk c
/// of four groups, 64 bytes of even elements (the first 16 bytes of each group's nibble-layout block, act_q8.hpp)
/// then 64 bytes of odd ones. Groups past the last whole eight are not rearranged. Returns the bytes per token.
inline uint64_t nibble_lanes_acts(const act_q8& a, aligned_vector<int8_t>& xt) {
  const uint64_t halves = a.blocks / 8, per_token = halves * 256;
  if (xt.size() < a.n * per_token) xt.resize(a.n * per_token);
  for (uint64_t t = 0; t < a.n; ++t)
    for (uint64_t h = 0; h < halves; ++h)
      for (uint32_t c = 0; c < 2; ++c)
        for (uint32_t q = 0; q < 4; ++q) {
          const int8_t* src = a.q.data() + t * a.cols + (8 * h + 4 * c + q) * 32;
          int8_t* o = xt.data() + t * per_token + h * 256 + c * 128 + q * 16;
          std::memcpy(o, src, 16);
          std::memcpy(o + 64, src + 16, 16);
        }
  return per_token;
}

/// The low and high nibbles of four groups' 64 value bytes at v, as u8 vpdpbusd weights (MXFP4: 2·e2m1 + 12).
template <class F>
CMFX_AVX512_TARGET inline void nibble_planes(const uint8_t* v, __m512i& lo, __m512i& hi) noexcept {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i w = _mm512_loadu_si512(v);
  lo = _mm512_and_si512(w, m4);
  hi = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
  if constexpr (F::id == format::mxfp4) {
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    lo = _mm512_shuffle_epi8(lut, lo), hi = _mm512_shuffle_epi8(lut, hi);
  }
}

/// The four lanes per group of four groups (x: their 128 rearranged activation bytes).
CMFX_AVX512_TARGET inline __m512i nibble_dot(__m512i lo, __m512i hi, const int8_t* x) noexcept {
  return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(x)), hi,
                             _mm512_loadu_si512(x + 64));
}

template <class F, int NT>
CMFX_AVX512_TARGET inline void row_tile_nibbles(const avx2::i8_row<F>& d, uint64_t groups, const act_q8& a,
                                                const int8_t* xt, uint64_t per_token, const i8_token_side& ts,
                                                uint64_t t0, float out[NT]) noexcept {
  __m512 tlo = _mm512_setzero_ps(), thi = _mm512_setzero_ps();
  if constexpr (avx2::i8_row<F>::is_ladder) tlo = _mm512_loadu_ps(d.ls.table), thi = _mm512_loadu_ps(d.ls.table + 16);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  uint64_t g = 0;
  for (; g + 16 <= groups; g += 16) {
    prefetch_ahead<avx512_i8_prefetch_distance>(d.values + 16 * g, 4);  // the block's 256 value bytes (prefetch.hpp)
    __m512i lo[4], hi[4];
    for (int c = 0; c < 4; ++c) nibble_planes<F>(d.values + 16 * (g + 4 * uint64_t(c)), lo[c], hi[c]);
    const __m512 s = scales16(d, tlo, thi, g, g + 32 <= groups, false);
    for (int t = 0; t < NT; ++t) {
      const int8_t* x = xt + (t0 + uint64_t(t)) * per_token + g * 32;
      __m512i dc[4];
      for (int c = 0; c < 4; ++c) dc[c] = nibble_dot(lo[c], hi[c], x + 128 * c);
      acc[t] = i8_terms<0>(acc[t], fold(fold(dc[0], dc[1]), fold(dc[2], dc[3])), s, ts, (t0 + uint64_t(t)) * a.blocks + g,
                           __mmask16(0xFFFF));
    }
  }
  if (g + 8 <= groups) {  // a half block: lanes 8..15 of the dot are 0, their token factors masked to 0
    __m512i lo[2], hi[2];
    for (int c = 0; c < 2; ++c) nibble_planes<F>(d.values + 16 * (g + 4 * uint64_t(c)), lo[c], hi[c]);
    const __m512 s = scales16(d, tlo, thi, g, false, true);
    for (int t = 0; t < NT; ++t) {
      const int8_t* x = xt + (t0 + uint64_t(t)) * per_token + g * 32;
      const __m512i dot = fold(fold(nibble_dot(lo[0], hi[0], x), nibble_dot(lo[1], hi[1], x + 128)), _mm512_setzero_si512());
      acc[t] = i8_terms<0>(acc[t], dot, s, ts, (t0 + uint64_t(t)) * a.blocks + g, __mmask16(0x00FF));
    }
    g += 8;
  }
  for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
  add_last_groups<F, NT>(d, a, ts, t0, g, groups, out);
}

// ---- q8_row: two groups per 512-bit load, every int32 lane inside one group
// vpdpbusd takes unsigned weights, so each value byte is flipped to w + 128 (one xor); int32 lane L of a load's dot
// holds four products of group L / 8, three folds of eight such vectors leave one int32 per group, and the offset
// 128 · Σxq comes off the exact dot (i8_terms, m = 1, boff = 128 · bsum). Activations in the natural layout, no
// rearrangement. Per 16 groups: 8 loads and 8 xors, and per token 8 vpdpbusd, 7 folds (2 vpermt2d + an add each)
// and the group terms; the row scale multiplies the row's sum once.

/// The exact dots of the groups at wr (u8: w + 128 already) against x, eight vectors of two groups each, folded to
/// one int32 per group: 16 groups, or with `half` 8 (lanes 8..15 zero).
CMFX_AVX512_TARGET inline __m512i q8_dots(const __m512i* u, const int8_t* x, bool half) noexcept {
  __m512i d[8];
  const int v = half ? 4 : 8;
  for (int j = 0; j < v; ++j) d[j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[j], _mm512_loadu_si512(x + 64 * j));
  if (half) return fold(fold(fold(d[0], d[1]), fold(d[2], d[3])), _mm512_setzero_si512());
  return fold(fold(fold(d[0], d[1]), fold(d[2], d[3])), fold(fold(d[4], d[5]), fold(d[6], d[7])));
}

/// acc[t] + the group terms of tokens t0 .. t0 + NT − 1 over 16 groups from g of the row's bytes wb, or with `half`
/// over 8 (the token factors of lanes 8..15 masked to 0).
template <int NT>
CMFX_AVX512_TARGET inline void q8_block(const uint8_t* wb, uint64_t g, bool half, const act_q8& a, const i8_token_side& ts,
                                        uint64_t t0, __m512 acc[NT]) noexcept {
  prefetch_ahead<avx512_i8_prefetch_distance>(wb + 32 * g, half ? 4 : 8);  // the block's value bytes (prefetch.hpp)
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  __m512i u[8];
  for (int j = 0; j < (half ? 4 : 8); ++j) u[j] = _mm512_xor_si512(_mm512_loadu_si512(wb + 32 * g + 64 * j), flip);
  for (int t = 0; t < NT; ++t)
    acc[t] = i8_terms<0>(acc[t], q8_dots(u, a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g, half), _mm512_set1_ps(1.0f),
                         ts, (t0 + uint64_t(t)) * a.blocks + g, half ? __mmask16(0x00FF) : __mmask16(0xFFFF));
}

template <int NT>
CMFX_AVX512_TARGET inline void row_tile_q8(const int8_t* wr, uint64_t groups, const act_q8& a, const i8_token_side& ts,
                                           uint64_t t0, float rs, float out[NT]) noexcept {
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  const auto* wb = reinterpret_cast<const uint8_t*>(wr);
  uint64_t g = 0;
  for (; g + 16 <= groups; g += 16) q8_block<NT>(wb, g, false, a, ts, t0, acc);
  if (g + 8 <= groups) q8_block<NT>(wb, g, true, a, ts, t0, acc), g += 8;
  for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
  for (; g < groups; ++g) {  // fewer than 8 left: one at a time, signed (no offset), as the AVX2 kernel
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + 32 * g));
    for (int t = 0; t < NT; ++t) {
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g));
      out[t] += a.scale[(t0 + uint64_t(t)) * a.blocks + g] * float(avx2::hsum_i32(avx2::q8_dot32(w, x)));
    }
  }
  for (int t = 0; t < NT; ++t) out[t] *= rs;
}

/// Rows [r0, r1) of Y = X · W^T for q8_row with int8 activations in the natural layout.
CMFX_AVX512_TARGET inline void gemm_rows_i8_q8(const matrix_view& w, const act_q8& a, float* Y, uint64_t ldy, uint64_t r0,
                                               uint64_t r1) {
  const uint64_t groups = w.cols / 32, n = a.n;
  thread_local i8_token_side ts;  // per thread, grown once, derived once per quantisation (act_q8::generation)
  thread_local uint64_t prepared = 0;
  if (act_stale(a, prepared)) {
    ts.prepare(a, 1, 128);
    prepared = a.generation;
  }
  for (uint64_t r = r0; r < r1; ++r) {
    const int8_t* wr = avx2::q8_row_values(w, r);
    const float rs = avx2::q8_row_scale(w, r);
    for (uint64_t t0 = 0; t0 < n; t0 += avx2::token_tile) {
      const uint64_t nt = std::min(avx2::token_tile, n - t0);
      float y[avx2::token_tile];
      avx2::with_tile(nt, [&](auto NT) { CMFX_AVX512_I8_NS::row_tile_q8<NT()>(wr, groups, a, ts, t0, rs, y); });
      for (uint64_t t = 0; t < nt; ++t) Y[(t0 + t) * ldy + r] = y[t];
    }
  }
}

/// Rows [r0, r1) of Y = X · W^T with int8 activations: q2tp through row_tile_crumbs_q2tp, q4tp and MXFP4 through
/// row_tile_nibbles.
template <class F>
void gemm_rows_i8(const matrix_view& w, const act_q8& a, float* Y, uint64_t ldy, uint64_t r0, uint64_t r1) {
  avx2::i8_row<F> d(w);
  const uint64_t groups = w.cols / 32, n = a.n;
  // Per thread, grown once, and derived once per quantisation of the activations (act_q8::generation), not per
  // call: a row tail or a chunked MoE calls this for many ranges of rows of one product.
  thread_local aligned_vector<int8_t> xt;
  thread_local i8_token_side ts;
  thread_local uint64_t prepared = 0, per_token = 0;
  if (act_stale(a, prepared)) {
    if constexpr (F::id == format::q2tp) {
      per_token = q2tp_crumb_acts16(a, xt);
      ts.prepare(a, 2, 3);
    } else {
      per_token = nibble_lanes_acts(a, xt);
      ts.prepare(a, 1, F::id == format::mxfp4 ? 12 : int(avx2::i8_offset<F>));
    }
    prepared = a.generation;
  }
  for (uint64_t r = r0; r < r1; ++r) {
    d.begin_row(r);
    for (uint64_t t0 = 0; t0 < n; t0 += avx2::token_tile) {
      const uint64_t nt = std::min(avx2::token_tile, n - t0);
      float y[avx2::token_tile];
      if constexpr (F::id == format::q2tp)
        avx2::with_tile(nt, [&](auto NT) {  // (qualified: avx2 has a twin, found by argument lookup)
          CMFX_AVX512_I8_NS::row_tile_crumbs_q2tp<NT()>(d, groups, a, xt.data(), per_token, ts, t0, y);
        });
      else
        avx2::with_tile(nt, [&](auto NT) { row_tile_nibbles<F, NT()>(d, groups, a, xt.data(), per_token, ts, t0, y); });
      for (uint64_t t = 0; t < nt; ++t) Y[(t0 + t) * ldy + r] = y[t];
    }
  }
}

}  // namespace cmfx::kernels::CMFX_AVX512_I8_NS

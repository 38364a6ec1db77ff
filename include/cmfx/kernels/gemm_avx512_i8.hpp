#pragma once
/// @file gemm_avx512_i8.hpp
/// @brief AVX-512 VNNI integer-dot GEMM for q4tp, q2tp and MXFP4 with int8 activations (act_q8.hpp): the same
///        arithmetic as gemm_avx2_i8.hpp — exact int32 group dots, then y += s_g · sx_tg · dot_g − offset — with
///        vpdpbusd (u8 × s8, 4 products per int32 lane) instead of vpmaddubsw + vpmaddwd: blocks of 16 groups with
///        every int32 lane inside one group (row_tile_crumbs_q2tp, row_tile_lanes), a row's last groups two per
///        register (vnni_pair) and an odd one. Per-row set-up (ladders) is gemm_avx2_i8.hpp's; the per-token scale
///        pass looks up 16 codes per vpermt2ps.
/// Include only from a translation unit compiled with -mavx2 -mfma -mf16c. The AVX-512 functions below carry a
/// target attribute instead of TU-wide -mavx512* flags: every inline function this TU shares with the AVX2 one
/// (ladders, row set-up, format decoders) is then compiled with the same flags in both, so the linker's choice
/// of one copy can never put AVX-512 instructions on a path an AVX2-only CPU runs.
#include <immintrin.h>

#include <array>
#include <cstring>

#include "cmfx/kernels/gemm_avx2_i8.hpp"

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

/// e8m0 bytes of sixteen groups -> 0.5 * 2^(k - 127) (avx2::mxfp4_scales8 for 16 groups).
CMFX_AVX512_TARGET inline __m512 mxfp4_scales16(const uint8_t* k16) noexcept {
  const __m512i k = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k16)));
  __m512i bits = _mm512_slli_epi32(k, 23);
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(k, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
  bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(k, _mm512_set1_epi32(0xFF)), _mm512_set1_epi32(0x7FC00000));
  return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0.5f));
}

/// avx2::token_scales with the weight scales looked up 16 groups at a time: the ladder's 32-entry table in two
/// registers and one vpermt2ps per 16 codes.
/// offset: the value offset of the integer weights (avx2::i8_offset; row_tile_lanes' MXFP4 shifts its values by 12).
template <class F, int NT>
CMFX_AVX512_TARGET inline void token_scales16(const avx2::i8_row<F>& d, uint64_t groups, const act_q8& a, uint64_t t0,
                                            float* sc, float corr[NT], float offset = avx2::i8_offset<F>) noexcept {
  const float* sx[NT];
  const int32_t* bs[NT];
  __m512 c[NT];
  for (int t = 0; t < NT; ++t) {
    sx[t] = a.scale.data() + (t0 + uint64_t(t)) * a.blocks;
    bs[t] = a.bsum.data() + (t0 + uint64_t(t)) * a.blocks;
    c[t] = _mm512_setzero_ps();
  }
  __m512 tlo = _mm512_setzero_ps(), thi = _mm512_setzero_ps();
  if constexpr (avx2::i8_row<F>::is_ladder) {
    tlo = _mm512_loadu_ps(d.ls.table);
    thi = _mm512_loadu_ps(d.ls.table + 16);
  }
  const bool f32_scales = !avx2::i8_row<F>::is_ladder && !d.scales.empty();
  uint64_t g = 0;
  for (; g + 16 <= groups; g += 16) {
    __m512 s;
    if constexpr (avx2::i8_row<F>::is_ladder)
      s = _mm512_permutex2var_ps(tlo, ladder_codes16(d.ls.codes + g / 8 * ladder::code_bits, g + 32 <= groups), thi);
    else
      s = f32_scales ? _mm512_loadu_ps(d.scales.data() + g) : mxfp4_scales16(d.e8m0 + g);
    for (int t = 0; t < NT; ++t) {
      const __m512 v = _mm512_mul_ps(s, _mm512_loadu_ps(sx[t] + g));
      _mm512_storeu_ps(sc + uint64_t(t) * groups + g, v);
      c[t] = _mm512_fmadd_ps(v, _mm512_cvtepi32_ps(_mm512_loadu_si512(bs[t] + g)), c[t]);
    }
  }
  for (int t = 0; t < NT; ++t) corr[t] = _mm512_reduce_add_ps(c[t]);
  if (g + 8 <= groups) {
    const __m256 s = d.scales8(d.lut(), g);
    for (int t = 0; t < NT; ++t) {
      const __m256 v = _mm256_mul_ps(s, _mm256_loadu_ps(sx[t] + g));
      _mm256_storeu_ps(sc + uint64_t(t) * groups + g, v);
      corr[t] += avx2::hsum(_mm256_mul_ps(v, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bs[t] + g)))));
    }
    g += 8;
  }
  for (; g < groups; ++g) {
    const float s = d.scale1(g);
    for (int t = 0; t < NT; ++t) {
      const float v = s * sx[t][g];
      sc[uint64_t(t) * groups + g] = v;
      corr[t] += v * float(bs[t][g]);
    }
  }
  for (int t = 0; t < NT; ++t) corr[t] *= offset;
}

/// Groups g and g + 1 of the row for NT tokens: acc_g[t] += (s_g · sx_tg | s_g+1 · sx_t,g+1) · dot (low | high
/// eight lanes), with sc = token_scales16's products.
template <class F, int NT>
CMFX_AVX512_TARGET inline void vnni_pair(const avx2::i8_row<F>& d, uint64_t groups, const act_q8& a, uint64_t t0,
                                         const float* sc, uint64_t g, __m512* acc_g) noexcept {
  __mmask64 neg;
  const __m512i w = pair_u8<F>(d.values, g, neg);
  for (int t = 0; t < NT; ++t) {
    __m512i xq = _mm512_loadu_si512(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g);
    if constexpr (F::id == format::mxfp4) xq = _mm512_mask_sub_epi8(xq, neg, _mm512_setzero_si512(), xq);
    const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, xq);
    const float* s = sc + uint64_t(t) * groups + g;
    const __m512 sv = _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(s[0]), _mm512_set1_ps(s[1]));
    acc_g[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), sv, acc_g[t]);
  }
}

/// An odd last group g of a row for NT tokens (the AVX2 dot): out[t] += s_g · sx_tg · dot.
template <class F, int NT>
CMFX_AVX512_TARGET inline void add_odd_group(const avx2::i8_row<F>& d, uint64_t groups, const act_q8& a, uint64_t t0,
                                             const float* sc, uint64_t g, float out[NT]) noexcept {
  for (int t = 0; t < NT; ++t) {
    const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g));
    out[t] += avx2::hsum(_mm256_mul_ps(_mm256_cvtepi32_ps(d.dot(g, xq)), _mm256_set1_ps(sc[uint64_t(t) * groups + g])));
  }
}

/// The end of a row of the sixteen-group kernels: the groups from g on (fewer than 16) — pairs (vnni_pair), then an
/// odd one — added to out, then the row's offset correction subtracted.
template <class F, int NT>
CMFX_AVX512_TARGET inline void finish_row(const avx2::i8_row<F>& d, uint64_t groups, const act_q8& a, uint64_t t0,
                                          const float* sc, uint64_t g, const float corr[NT], float out[NT]) noexcept {
  if (g + 2 <= groups) {
    __m512 accp[NT];
    for (int t = 0; t < NT; ++t) accp[t] = _mm512_setzero_ps();
    for (; g + 2 <= groups; g += 2) vnni_pair<F, NT>(d, groups, a, t0, sc, g, accp);
    for (int t = 0; t < NT; ++t) out[t] += _mm512_reduce_add_ps(accp[t]);
  }
  if (g < groups) add_odd_group<F, NT>(d, groups, a, t0, sc, g, out);
  for (int t = 0; t < NT; ++t) out[t] -= corr[t];
}

// ---- q2tp: eight groups per 512-bit load, every int32 lane inside one group
// A 64-byte load holds eight groups' value bytes as stored; crumb k of every byte is (w >> 2k) & 3 (one shift and
// one and; k = 0 needs no shift), and vpdpbusd pairs it with activations rearranged once per call
// (q2tp_crumb_acts16), so int32 lane L holds a partial dot of group L / 2; per 16 groups one fold (2 vpermt2d +
// add) leaves one int32 dot per group. The offset 1.5 is folded into that exact integer: a group adds
// s_g · (sx_g / 2) · (2 · dot_g − 3 · bsum_g), with sx / 2 and 3 · bsum prepared once per call (q2tp_token_side),
// the 16 weight scales s_g looked up in the loop (one vpermt2ps over the row's ladder). So a row costs no scale
// pass, no stored products and no separate offset sum — on dev's Zen 4 those, with a row's last eight groups in
// pairs, took ~35 ns per row, half the time of a 2304-column row from cache. Per 16 groups: 2 loads, 6 shifts,
// 8 ands, the codes' 4 ops and a vpermt2ps, and per token 8 vpdpbusd, 5 integer ops, a multiply, a conversion
// and an fma. A row's last eight groups (cols % 512 = 256, V4.1's 2304) take one half of the block (4 vpdpbusd,
// masked token loads); fewer than eight remaining groups go one at a time (avx2 dots). (It replaced a VBMI kernel
// that gathered byte j of 16 groups per vpermt2b and split its crumbs with vpmultishiftqb — 1.3-1.5x slower on
// the dev Zen 4 and the H200 host's Xeon: docs/PERF.md "Nineteenth session".) Same int32 dots as the pair
// kernel, so the same error bound; the float sums in another order.

/// Lane i of the result = lanes 2i + 2i+1 of (x | y): a group's lanes summed in pairs (row_tile_lanes: four lanes →
/// two → one over two calls; row_tile_crumbs_q2tp: two → one).
CMFX_AVX512_TARGET inline __m512i fold(__m512i x, __m512i y) noexcept {
  const __m512i ia = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i ib = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  return _mm512_add_epi32(_mm512_permutex2var_epi32(x, ia, y), _mm512_permutex2var_epi32(x, ib, y));
}

/// The activations of tokens [0, a.n) for the q2tp kernel: per token, per eight groups (a half block), per crumb
/// plane k, per group of the eight its 8 bytes of plane k (act_q8's crumb layout: bytes 8k .. 8k + 7 of the
/// group). Groups past the last whole eight are not rearranged. Returns the bytes per token.
inline uint64_t q2tp_crumb_acts16(const act_q8& a, std::vector<int8_t>& xt) {
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

/// Per call: wsx = sx / 2 and b3 = 3 · bsum of every group of tokens [0, a.n) ([n, groups] each).
struct q2tp_token_side {
  std::vector<float> wsx;
  std::vector<int32_t> b3;
  void prepare(const act_q8& a) {
    const uint64_t m = a.n * a.blocks;
    if (wsx.size() < m) wsx.resize(m), b3.resize(m);
    for (uint64_t i = 0; i < m; ++i) wsx[i] = 0.5f * a.scale[i], b3[i] = 3 * a.bsum[i];
  }
};

/// The four crumb planes of eight groups' value bytes (64 bytes at v).
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

/// acc + one group term per lane, s · wsx · (2 · dot − 3 · bsum), for the groups at o of the token side; m masks
/// the lanes of a half block (their token factors load as 0).
CMFX_AVX512_TARGET inline __m512 q2tp_terms(__m512 acc, __m512i dot, __m512 s, const q2tp_token_side& ts, uint64_t o,
                                            __mmask16 m) noexcept {
  const __m512i v = _mm512_sub_epi32(_mm512_slli_epi32(dot, 1), _mm512_maskz_loadu_epi32(m, ts.b3.data() + o));
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, ts.wsx.data() + o)), acc);
}

template <int NT>
CMFX_AVX512_TARGET inline void row_tile_crumbs_q2tp(const avx2::i8_row<fmt_q2tp>& d, uint64_t groups, const act_q8& a,
                                                    const int8_t* xt, uint64_t per_token, const q2tp_token_side& ts,
                                                    uint64_t t0, float out[NT]) noexcept {
  const __m512 tlo = _mm512_loadu_ps(d.ls.table), thi = _mm512_loadu_ps(d.ls.table + 16);
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  uint64_t g = 0;
  for (; g + 16 <= groups; g += 16) {
    __m512i c[2][4];
    q2tp_planes(d.values + 8 * g, c[0]);
    q2tp_planes(d.values + 8 * (g + 8), c[1]);
    const __m512 s = _mm512_permutex2var_ps(tlo, ladder_codes16(d.ls.codes + g / 8 * ladder::code_bits, g + 32 <= groups), thi);
    for (int t = 0; t < NT; ++t) {
      const int8_t* x = xt + (t0 + uint64_t(t)) * per_token + g * 32;
      acc[t] = q2tp_terms(acc[t], fold(q2tp_half_dot(c[0], x), q2tp_half_dot(c[1], x + 256)), s, ts,
                          (t0 + uint64_t(t)) * a.blocks + g, __mmask16(0xFFFF));
    }
  }
  if (g + 8 <= groups) {  // a half block: lanes 8..15 of the dot are 0, their token factors masked to 0
    __m512i c[4];
    q2tp_planes(d.values + 8 * g, c);
    const __m512 s = _mm512_permutex2var_ps(tlo, ladder_codes16(d.ls.codes + g / 8 * ladder::code_bits, false, 5), thi);
    for (int t = 0; t < NT; ++t)
      acc[t] = q2tp_terms(acc[t], fold(q2tp_half_dot(c, xt + (t0 + uint64_t(t)) * per_token + g * 32), _mm512_setzero_si512()),
                          s, ts, (t0 + uint64_t(t)) * a.blocks + g, __mmask16(0x00FF));
    g += 8;
  }
  for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
  for (; g < groups; ++g) {  // fewer than eight left: one group at a time
    const float s = d.scale1(g);
    for (int t = 0; t < NT; ++t) {
      const uint64_t o = (t0 + uint64_t(t)) * a.blocks + g;
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + (t0 + uint64_t(t)) * a.cols + 32 * g));
      const __m256i dv = d.dot(g, xq);
      const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(dv), _mm256_extracti128_si256(dv, 1));
      const __m128i q = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
      const int32_t dot = _mm_cvtsi128_si32(_mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(2, 3, 0, 1))));
      out[t] += s * ts.wsx[o] * float(2 * dot - ts.b3[o]);
    }
  }
}

// ---- q4tp and MXFP4: four groups per 512-bit load, every int32 lane inside one group
// The pair kernel spends per 64 weights a 256-bit load, a lane shuffle, a shift, a mask and, per token, a dot, two
// scale broadcasts, a blend, a conversion and an fma. Here a 64-byte load holds four groups' nibbles as they are
// stored; its low nibbles (the even elements) and high nibbles (the odd ones) go into two vpdpbusd against
// activations rearranged once per call (nibble_lanes_acts), so int32 lane L holds a partial dot of group L / 4; per
// 16 groups a transpose-add of four such vectors (6 vpermt2d, 3 adds) leaves one int32 per group, then one
// conversion and one fma with the 16 contiguous scales sc[g .. g+15]. MXFP4's codes become 2·e2m1 + 12 (u8, one
// vpshufb per vector; vpdpbusd takes unsigned weights) and the row's correction subtracts 12 · Σ sc · Σxq, as the
// ladders' offsets do. Same int32 dots as the pair kernel up to that exact offset, so the same error bound; the
// float sums in another order.

/// The activations of tokens [0, n) for row_tile_lanes: per token, per block of 16 groups, per chunk c of
/// four groups, 64 bytes of even elements (the first 16 bytes of each group's nibble-layout block, act_q8.hpp) then
/// 64 bytes of odd ones. Groups past the last whole block are not rearranged (the pair kernel reads them).
inline void nibble_lanes_acts(const act_q8& a, std::vector<int8_t>& xt) {
  const uint64_t blocks16 = a.blocks / 16, per_token = blocks16 * 512;
  if (xt.size() < a.n * per_token) xt.resize(a.n * per_token);
  for (uint64_t t = 0; t < a.n; ++t)
    for (uint64_t b = 0; b < blocks16; ++b)
      for (uint32_t c = 0; c < 4; ++c)
        for (uint32_t q = 0; q < 4; ++q) {
          const int8_t* src = a.q.data() + t * a.cols + (16 * b + 4 * c + q) * 32;
          int8_t* o = xt.data() + t * per_token + b * 512 + c * 128 + q * 16;
          std::memcpy(o, src, 16);
          std::memcpy(o + 64, src + 16, 16);
        }
}

template <class F, int NT>
CMFX_AVX512_TARGET inline void row_tile_lanes(const avx2::i8_row<F>& d, uint64_t groups, const act_q8& a,
                                              const int8_t* xt, uint64_t t0, float* sc, float out[NT]) noexcept {
  constexpr bool mx = F::id == format::mxfp4;
  constexpr float mx_shift = 12.0f;  // 2·e2m1 ∈ [−12, 12] → [0, 24]
  // MXFP4: the shift's correction covers the blocks of 16 groups only (the pair kernel takes the rest unshifted)
  float corr[NT];
  token_scales16<F, NT>(d, groups, a, t0, sc, corr, mx ? 0.0f : avx2::i8_offset<F>);
  __m512 cv[NT];
  for (int t = 0; t < NT; ++t) cv[t] = _mm512_setzero_ps();
  const uint64_t per_token = groups / 16 * 512;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
  __m512 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm512_setzero_ps();
  uint64_t g = 0;
  for (; g + 16 <= groups; g += 16) {
    __m512i lo[4], hi[4];
    for (int c = 0; c < 4; ++c) {
      const __m512i w = _mm512_loadu_si512(d.values + 16 * (g + 4 * uint64_t(c)));
      lo[c] = _mm512_and_si512(w, m4);
      hi[c] = _mm512_and_si512(_mm512_srli_epi16(w, 4), m4);
      if constexpr (mx) lo[c] = _mm512_shuffle_epi8(lut, lo[c]), hi[c] = _mm512_shuffle_epi8(lut, hi[c]);
    }
    const uint64_t xo = g / 16 * 512;
    for (int t = 0; t < NT; ++t) {
      const int8_t* x = xt + (t0 + uint64_t(t)) * per_token + xo;
      __m512i dc[4];
      for (int c = 0; c < 4; ++c)
        dc[c] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[c], _mm512_loadu_si512(x + 128 * c)),
                                    hi[c], _mm512_loadu_si512(x + 128 * c + 64));
      const __m512i r = fold(fold(dc[0], dc[1]), fold(dc[2], dc[3]));
      const __m512 s = _mm512_loadu_ps(sc + uint64_t(t) * groups + g);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(r), s, acc[t]);
      if constexpr (mx)
        cv[t] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(_mm512_loadu_si512(a.bsum.data() + (t0 + uint64_t(t)) * a.blocks + g)), cv[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t] = _mm512_reduce_add_ps(acc[t]);
  if constexpr (mx)
    for (int t = 0; t < NT; ++t) corr[t] = mx_shift * _mm512_reduce_add_ps(cv[t]);
  finish_row<F, NT>(d, groups, a, t0, sc, g, corr, out);  // (no offset for MXFP4 in the pair kernel)
}

/// Rows [r0, r1) of Y = X · W^T with int8 activations: blocks of 16 groups — q2tp through row_tile_crumbs_q2tp,
/// q4tp and MXFP4 through row_tile_lanes — and a row's last groups in pairs and an odd one (finish_row).
template <class F>
void gemm_rows_i8(const matrix_view& w, const act_q8& a, float* Y, uint64_t ldy, uint64_t r0, uint64_t r1) {
  avx2::i8_row<F> d(w);
  const uint64_t groups = w.cols / 32, n = a.n;
  // Per call, not per row; per thread, grown once (a chunked MoE calls this per chunk of rows).
  thread_local std::vector<float> sc;
  thread_local std::vector<int8_t> xt;
  thread_local q2tp_token_side ts;
  uint64_t per_token = 0;
  if constexpr (F::id == format::q2tp) {
    per_token = q2tp_crumb_acts16(a, xt);
    ts.prepare(a);
  } else {
    if (sc.size() < avx2::token_tile * groups) sc.resize(avx2::token_tile * groups);
    nibble_lanes_acts(a, xt);
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
        avx2::with_tile(nt, [&](auto NT) { row_tile_lanes<F, NT()>(d, groups, a, xt.data(), t0, sc.data(), y); });
      for (uint64_t t = 0; t < nt; ++t) Y[(t0 + t) * ldy + r] = y[t];
    }
  }
}

}  // namespace cmfx::kernels::CMFX_AVX512_I8_NS

#pragma once
/// @file gemm_avx2.hpp
/// @brief AVX2+FMA+F16C small-batch GEMM / matvec, strict f32 path: Y[t, r] = sum_c W[r, c] * X[t, c].
///
/// Every format is read as groups of 32 consecutive elements of a row with one scale per group; a decoder
/// turns a group into four __m256 of unscaled values (the group scale is applied once per group), so each
/// group is decoded once and reused by every token of the batch. Per group the partial dot is accumulated in
/// f32 and then scaled (acc += s_g * sum_j v_j x_j), the order of the reference's exact path
/// (cmf-format.md §3.1). Ragged row tails (cols % 32) fall back to the trait's element decode.
/// Include only from a translation unit compiled with -mavx2 -mfma -mf16c.
#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "gemm_avx2.hpp needs -mavx2 -mfma -mf16c"
#endif
#include <immintrin.h>

#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include "cmfx/formats/format_list.hpp"
#include "cmfx/kernels/gemm_generic.hpp"
#include "cmfx/kernels/token_tile.hpp"

namespace cmfx::kernels::avx2 {

inline constexpr uint32_t kgroup = 32;

inline float hsum(__m256 v) noexcept {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// 32 signed bytes (element order) -> 4 x 8 floats.
inline void i8x32_to_f32(__m128i lo16, __m128i hi16, __m256 v[4]) noexcept {
  v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo16));
  v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo16, 8)));
  v[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi16));
  v[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi16, 8)));
}

/// 16 bytes of packed nibbles (byte k = element 2k low, 2k+1 high) -> 32 bytes in element order.
inline void unpack_nibbles(const uint8_t* p, __m128i* lo16, __m128i* hi16) noexcept {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i l = _mm_and_si128(b, m), h = _mm_and_si128(_mm_srli_epi16(b, 4), m);
  *lo16 = _mm_unpacklo_epi8(l, h);
  *hi16 = _mm_unpackhi_epi8(l, h);
}

// ---- decoders: begin_row(r), group(g, v) -> scale, row_scale(), elem(r, c) for tails ----

/// Ladders of 8 consecutive rows at once, one row per SIMD lane: t[0] = exp2f(lo) and ratio = exp2f(step) by
/// table lookup (bit-identical to exp2f), then the 31-step repeated product in f32 — the same IEEE multiplies
/// per lane as ladder::build, so the same bits, for an eighth of the latency chain per row.
/// out[l][c] = the weight scale of code c in row r0 + l, for l < nrows: rung c, or with code0_zero (q2tp)
/// 0 for code 0 and rung c - 1 otherwise — a direct 32-entry lookup table either way.
/// ratios (optional): ratio[l] = exp2f(step) of row r0 + l (the geometric lookup of the int8 kernels, lut_geometric).
inline void build_ladders8(const uint8_t* params, uint64_t r0, uint64_t nrows, bool code0_zero,
                           float out[8][ladder::rungs], float* ratios = nullptr) noexcept {
  const float* e2 = ladder::exp2f_of_f16();
  alignas(32) float lo[8] = {}, ra[8] = {};
  for (uint64_t l = 0; l < nrows; ++l) {
    const uint8_t* pp = params + ladder::param_bytes * (r0 + l);
    lo[l] = e2[load_u16(pp)];
    ra[l] = e2[load_u16(pp + 2)];
  }
  if (ratios) std::memcpy(ratios, ra, sizeof ra);
  // col[c][l]: entry c of row l's table; the rows are turned into table rows 8x8 at a time by an in-register
  // transpose (unpack, shuffle, permute2f128).
  alignas(32) float col[ladder::rungs][8];
  const uint32_t c0 = code0_zero ? 1 : 0;
  if (code0_zero) _mm256_store_ps(col[0], _mm256_setzero_ps());
  __m256 t = _mm256_load_ps(lo);
  const __m256 ratio = _mm256_load_ps(ra);
  _mm256_store_ps(col[c0], t);
  for (uint32_t c = c0 + 1; c < ladder::rungs; ++c) {
    t = _mm256_mul_ps(t, ratio);
    _mm256_store_ps(col[c], t);
  }
  for (uint32_t cb = 0; cb < ladder::rungs; cb += 8) {
    __m256 v[8], u[8];
    for (int k = 0; k < 8; ++k) v[k] = _mm256_load_ps(col[cb + uint32_t(k)]);
    for (int k = 0; k < 8; k += 2) {
      u[k] = _mm256_unpacklo_ps(v[k], v[k + 1]);
      u[k + 1] = _mm256_unpackhi_ps(v[k], v[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
      v[k] = _mm256_shuffle_ps(u[k], u[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
      v[k + 1] = _mm256_shuffle_ps(u[k], u[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
      v[k + 2] = _mm256_shuffle_ps(u[k + 1], u[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
      v[k + 3] = _mm256_shuffle_ps(u[k + 1], u[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    // v[0..3] hold rows {0,4}, {1,5}, {2,6}, {3,7} (low/high 128-bit halves) of row-block 0..3, v[4..7] of 4..7
    for (int k = 0; k < 4; ++k) {
      const __m256 a = _mm256_permute2f128_ps(v[k], v[k + 4], 0x20), b = _mm256_permute2f128_ps(v[k], v[k + 4], 0x31);
      if (uint64_t(k) < nrows) _mm256_storeu_ps(out[k] + cb, a);
      if (uint64_t(k) + 4 < nrows) _mm256_storeu_ps(out[k + 4] + cb, b);
    }
  }
}

/// The group each of eight int32 lanes holds: natural (lane L = group L of a block of eight), or the order a
/// kernel's vphaddd tree leaves its per-group dots in, so that the per-group factors can be produced in that order
/// and the tree's result needs no lane permute (gemm_avx2_i8.hpp).
struct lane_order {
  std::array<uint8_t, 8> group;
};
inline constexpr lane_order natural_lanes{{0, 1, 2, 3, 4, 5, 6, 7}};

/// Codes g .. g + 7 of a ladder row as eight int32 lanes, lane L holding the code of group g + O.group[L]; p
/// points at the 5 bytes of the 8 codes (byte 5g/8, g % 8 == 0). Each lane picks the two bytes that hold its code
/// (one vpshufb), then shifts and masks.
template <lane_order O = natural_lanes>
inline __m256i ladder_codes8(const uint8_t* p) noexcept {
  static_assert(ladder::code_bits == 5, "the byte picks below are those of 5-bit codes");
  uint32_t lo;
  std::memcpy(&lo, p, 4);  // two loads composed in registers (a 5-byte memcpy stalls on store forwarding)
  const uint64_t w40 = uint64_t(lo) | (uint64_t(p[4]) << 32);
  const __m256i b = _mm256_broadcastsi128_si256(_mm_cvtsi64_si128(int64_t(w40)));
  // code k: bits 5k .. 5k + 4 = byte 5k/8 (and the next), shift 5k % 8
  constexpr auto byte = [](int lane, int i) { return char(5 * O.group[lane] / 8 + i); };
  constexpr auto shift = [](int lane) { return 5 * O.group[lane] % 8; };
  const __m256i pick = _mm256_setr_epi8(byte(0, 0), byte(0, 1), -1, -1, byte(1, 0), byte(1, 1), -1, -1,  //
                                        byte(2, 0), byte(2, 1), -1, -1, byte(3, 0), byte(3, 1), -1, -1,  //
                                        byte(4, 0), byte(4, 1), -1, -1, byte(5, 0), byte(5, 1), -1, -1,  //
                                        byte(6, 0), byte(6, 1), -1, -1, byte(7, 0), byte(7, 1), -1, -1);
  const __m256i sh = _mm256_setr_epi32(shift(0), shift(1), shift(2), shift(3), shift(4), shift(5), shift(6), shift(7));
  return _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi8(b, pick), sh),
                          _mm256_set1_epi32(int(ladder::rungs - 1)));
}

/// A row's 32-entry scale table in four registers, and the lookup of eight codes: vpermps in each quarter, then
/// two blends on code bits 3 and 4 (moved to the sign bit, which vblendvps reads).
struct lut32 {
  __m256 q[4];
  explicit lut32(const float* t) noexcept {
    for (int k = 0; k < 4; ++k) q[k] = _mm256_loadu_ps(t + 8 * k);
  }
  __m256 operator()(__m256i c) const noexcept {
    const __m256 b3 = _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)), b4 = _mm256_castsi256_ps(_mm256_slli_epi32(c, 27));
    const __m256 lo = _mm256_blendv_ps(_mm256_permutevar8x32_ps(q[0], c), _mm256_permutevar8x32_ps(q[1], c), b3);
    const __m256 hi = _mm256_blendv_ps(_mm256_permutevar8x32_ps(q[2], c), _mm256_permutevar8x32_ps(q[3], c), b3);
    return _mm256_blendv_ps(lo, hi, b4);
  }
};

/// The int8 kernels' scale lookup (gemm_avx2_i8.hpp). A ladder row is geometric — rung j = t0 · r^j — so the
/// scale of code c = 8h + l is taken as A[l] · B[h], A the scales of codes 0..7 and B[h] = r^(8h) (in both 128-bit
/// halves): one vpermps, one in-lane vpermilps and a multiply instead of lut32's four vpermps and three blends.
/// vpermps was the busiest port of the int8 q2tp block on Zen 3 (llvm-mca -mcpu=znver3: 8 of 16 cycles on FP1).
/// Within a few ulp of the table, not bit-identical to it (r^(8h) by squaring and one more rounding instead of the
/// 31-step product); the strict f32 path keeps lut32 and the trait's exact scales, and the int8 path's own error
/// (activations in int8 per 32) is far larger. Zero0 (q2tp): code 0 is the exact zero rung (masked off), code c
/// is rung c − 1, so A[0] = rung −1 = t0 / r and codes 8, 16, 24 come out as rungs 7, 15, 23. Limit: r^24
/// overflows f32 for a step above 128/24 in log2 per rung (group scales of one row spanning 2^165), where the table
/// may still be finite; no encoder writes such a row, the strict path would still be exact.
template <bool Zero0>
struct lut_geometric {
  __m256 a, b;
  lut_geometric(const float* t, float r) noexcept {
    a = _mm256_loadu_ps(t);
    if constexpr (Zero0) a = _mm256_blend_ps(a, _mm256_set1_ps(t[1] / r), 1);
    const float r2 = r * r, r4 = r2 * r2, r8 = r4 * r4, r16 = r8 * r8, r24 = r16 * r8;
    b = _mm256_setr_ps(1.0f, r8, r16, r24, 1.0f, r8, r16, r24);
  }
  __m256 operator()(__m256i c) const noexcept {
    const __m256 s = _mm256_mul_ps(_mm256_permutevar8x32_ps(a, c), _mm256_permutevar_ps(b, _mm256_srli_epi32(c, 3)));
    if constexpr (!Zero0) return s;
    else return _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(c, _mm256_setzero_si256())), s);
  }
};

/// Per-row weight scales of a ladder tensor (q4tp: t[code]; q2tp: 0 for code 0, else t[code - 1]): the tables
/// of 8 rows at a time (build_ladders8), the current row's codes, and scales 8 groups at a time.
template <uint32_t Bits>
struct ladder_scales {
  const matrix_view& w;
  ladder::planes p;
  alignas(32) float tables[8][ladder::rungs];
  float ratios[8] = {};
  uint64_t block0 = ~uint64_t(0);
  const float* table = nullptr;        // the current row's 32 scales by code
  float ratio = 0.0f;                  // the current row's exp2f(step)
  const uint8_t* codes = nullptr;      // the current row's code bits
  explicit ladder_scales(const matrix_view& wv) : w(wv), p(wv.rows, wv.cols, Bits == 4 ? 16 : 8) {}
  void begin_row(uint64_t r) noexcept {
    if (block0 == ~uint64_t(0) || r < block0 || r - block0 >= 8) {  // a new block of 8 rows
      block0 = r;
      build_ladders8(w.data + p.params, r, std::min<uint64_t>(8, w.rows - r), Bits == 2, tables, ratios);
    }
    table = tables[r - block0];
    ratio = ratios[r - block0];
    codes = w.data + p.codes + r * p.stride;
  }
  /// Scales of groups g .. g + 7 (g % 8 == 0, g + 8 <= gpr) in lane order O, with lut = lut32(table) (exact) or
  /// lut_geometric<Bits == 2>(table, ratio).
  template <lane_order O = natural_lanes, class Lut>
  __m256 scales8(const Lut& lut, uint64_t g) const noexcept {
    return lut(ladder_codes8<O>(codes + g / 8 * ladder::code_bits));
  }
  float scale1(uint64_t g) const noexcept { return table[ladder::get_code(codes, g)]; }
  void fill(float* out) const noexcept {
    const lut32 lut(table);
    uint64_t g = 0;
    for (; g + 8 <= p.gpr; g += 8) _mm256_storeu_ps(out + g, scales8(lut, g));
    for (; g < p.gpr; ++g) out[g] = scale1(g);
  }
};

/// q4tp: (nib - 8) * t[code]; q2tp: (c - 1.5) * s. Per-row scales are expanded once per row, into a per-thread
/// buffer that only grows (no allocation per call; one decoder per thread at a time: gemm_rows).
template <uint32_t Bits>
struct dec_ladder {
  ladder_scales<Bits> ls;
  float* scales;
  const uint8_t* values = nullptr;
  explicit dec_ladder(const matrix_view& wv) : ls(wv), scales(buffer(ls.p.gpr)) {}
  static float* buffer(uint64_t n) {
    thread_local std::vector<float> b;
    if (b.size() < n) b.resize(n);
    return b.data();
  }
  void begin_row(uint64_t r) {
    ls.begin_row(r);
    ls.fill(scales);
    values = ls.w.data + r * ls.p.gpr * (Bits == 4 ? 16 : 8);
  }
  float group(uint64_t g, __m256 v[4]) const noexcept {
    if constexpr (Bits == 4) {
      __m128i lo, hi;
      unpack_nibbles(values + 16 * g, &lo, &hi);
      const __m128i eight = _mm_set1_epi8(8);
      i8x32_to_f32(_mm_sub_epi8(lo, eight), _mm_sub_epi8(hi, eight), v);
    } else {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(values + 8 * g));
      const __m128i ca = _mm_shuffle_epi8(b, _mm_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
      const __m128i cb = _mm_shuffle_epi8(b, _mm_setr_epi8(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7));
      const __m256i sh = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
      const __m256i three = _mm256_set1_epi32(3);
      const __m256 half3 = _mm256_set1_ps(1.5f);
      const __m128i src[4] = {ca, _mm_srli_si128(ca, 8), cb, _mm_srli_si128(cb, 8)};
      for (int k = 0; k < 4; ++k) {
        const __m256i c = _mm256_and_si256(_mm256_srlv_epi32(_mm256_cvtepu8_epi32(src[k]), sh), three);
        v[k] = _mm256_sub_ps(_mm256_cvtepi32_ps(c), half3);
      }
    }
    return scales[g];
  }
  static constexpr float row_scale() noexcept { return 1.0f; }
  float elem(uint64_t, uint64_t) const noexcept { return 0.0f; }  // cols % 32 == 0 always
};

/// MXFP4: e2m1 via a byte LUT of 2*value (exact small integers), times 0.5 * 2^(k-127).
struct dec_mxfp4 {
  const matrix_view& w;
  const uint8_t* q = nullptr;
  uint64_t r = 0;
  explicit dec_mxfp4(const matrix_view& wv) : w(wv) {}
  void begin_row(uint64_t row) {
    r = row;
    q = w.data + row * (w.cols / 2);
  }
  float group(uint64_t g, __m256 v[4]) const noexcept {
    __m128i lo, hi;
    unpack_nibbles(q + 16 * g, &lo, &hi);
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    i8x32_to_f32(_mm_shuffle_epi8(lut, lo), _mm_shuffle_epi8(lut, hi), v);
    const uint64_t i = r * (w.cols / kgroup) + g;
    const float s = w.scale_enc == scale_encoding::f32 ? detail::scale_at(w, i) : e8m0_to_f32(w.scale[i]);
    return 0.5f * s;
  }
  static constexpr float row_scale() noexcept { return 1.0f; }
  float elem(uint64_t, uint64_t) const noexcept { return 0.0f; }
};

/// q4_block / q4t (CMF flat 4-bit, cmf-format.md §2.3): (nib − 8) · s per flat group of 32. Groups run over the
/// flattened tensor, so rows are group-aligned only when cols % 32 == 0: gemm_rows sends other shapes to the
/// portable kernel (aligned_rows_only).
template <bool Tiled>
struct dec_q4flat {
  static constexpr bool aligned_rows_only = true;
  const matrix_view& w;
  uint64_t groups_total, g0 = 0;
  explicit dec_q4flat(const matrix_view& wv) : w(wv), groups_total((wv.rows * wv.cols + kgroup - 1) / kgroup) {}
  void begin_row(uint64_t r) { g0 = r * (w.cols / kgroup); }
  float group(uint64_t g, __m256 v[4]) const noexcept {
    const uint64_t G = g0 + g;
    __m128i lo, hi;
    unpack_nibbles(Tiled ? w.data + 18 * G + 2 : w.data + 16 * G, &lo, &hi);
    const __m128i eight = _mm_set1_epi8(8);
    i8x32_to_f32(_mm_sub_epi8(lo, eight), _mm_sub_epi8(hi, eight), v);
    return Tiled ? load_f16(w.data + 18 * G) : load_f16(w.data + 16 * groups_total + 2 * G);
  }
  static constexpr float row_scale() noexcept { return 1.0f; }
  float elem(uint64_t, uint64_t) const noexcept { return 0.0f; }  // never called: cols % 32 == 0
};

/// FP8 E4M3 with T x T tile scales. E4M3 -> f16 bits by a shift (exponent field widens from 4 to 5 bits,
/// bias 7 -> 15), F16C to f32, times 2^8. Subnormals convert exactly the same way. The NaN code (0x7F)
/// becomes 480, as in cortiq's decoder; DeepSeek checkpoints contain no NaN weights.
template <uint32_t Tile>
struct dec_fp8 {
  const matrix_view& w;
  const uint8_t* q = nullptr;
  uint64_t r = 0, tpr = 0;
  explicit dec_fp8(const matrix_view& wv) : w(wv), tpr((wv.cols + Tile - 1) / Tile) {}
  void begin_row(uint64_t row) {
    r = row;
    q = w.data + row * w.cols;
  }
  // 32 bytes at once: vpunpck{l,h}bw with zero puts each byte in the high half of a 16-bit lane (per 128-bit half:
  // elements 0-7 and 16-23 in lo, 8-15 and 24-31 in hi); an arithmetic shift by one puts exponent|mantissa in
  // bits 7..13 and copies the sign into bits 15 and 14; clearing bit 14 leaves the f16 bits (E4M3 value · 2^-8).
  // Two in-lane unpacks replace two cross-lane zero extensions (measured 23.1 → 21.5 ns per 256 weights on dev).
  float group(uint64_t g, __m256 v[4]) const noexcept {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + kgroup * g));
    const __m256i z = _mm256_setzero_si256(), keep = _mm256_set1_epi16(int16_t(0xBFFF));
    const __m256i lo = _mm256_and_si256(_mm256_srai_epi16(_mm256_unpacklo_epi8(z, b), 1), keep);
    const __m256i hi = _mm256_and_si256(_mm256_srai_epi16(_mm256_unpackhi_epi8(z, b), 1), keep);
    v[0] = _mm256_cvtph_ps(_mm256_castsi256_si128(lo));
    v[1] = _mm256_cvtph_ps(_mm256_castsi256_si128(hi));
    v[2] = _mm256_cvtph_ps(_mm256_extracti128_si256(lo, 1));
    v[3] = _mm256_cvtph_ps(_mm256_extracti128_si256(hi, 1));
    return 256.0f * detail::scale_at(w, (r / Tile) * tpr + (kgroup * g) / Tile);
  }
  static constexpr float row_scale() noexcept { return 1.0f; }
  float elem(uint64_t row, uint64_t c) const noexcept {
    return e4m3::decode(w.data[row * w.cols + c]) * detail::scale_at(w, (row / Tile) * tpr + c / Tile);
  }
};

/// f32 / f16 / bf16 / q8_row / q8_2f: group scale 1 (q8_row: row scale at the end; q8_2f: column scales
/// multiplied in during decode).
template <class F>
struct dec_dense {
  const matrix_view& w;
  const uint8_t* base = nullptr;
  float rs = 1.0f;
  explicit dec_dense(const matrix_view& wv) : w(wv) {}
  void begin_row(uint64_t r) {
    if constexpr (F::id == format::f32) base = w.data + r * w.cols * 4;
    if constexpr (F::id == format::f16 || F::id == format::bf16) base = w.data + r * w.cols * 2;
    if constexpr (F::id == format::q8_row) {
      base = w.data + r * w.cols;
      rs = load_f16(w.data + w.rows * w.cols + 2 * r);
    }
    if constexpr (F::id == format::q8_2f) {
      base = w.data + r * w.cols;
      rs = load_f16(w.data + w.rows * w.cols + 2 * r);
    }
  }
  float group(uint64_t g, __m256 v[4]) const noexcept {
    for (int k = 0; k < 4; ++k) {
      const uint64_t c = kgroup * g + 8 * uint64_t(k);
      if constexpr (F::id == format::f32) v[k] = _mm256_loadu_ps(reinterpret_cast<const float*>(base) + c);
      if constexpr (F::id == format::f16)
        v[k] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base + 2 * c)));
      if constexpr (F::id == format::bf16)
        v[k] = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(base + 2 * c))), 16));
      if constexpr (F::id == format::q8_row || F::id == format::q8_2f)
        v[k] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(base + c))));
      if constexpr (F::id == format::q8_2f) {
        const uint8_t* colp = w.data + w.rows * w.cols + 2 * w.rows;
        v[k] = _mm256_mul_ps(v[k], _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(colp + 2 * c))));
      }
    }
    return 1.0f;
  }
  float row_scale() const noexcept { return rs; }
  float elem(uint64_t, uint64_t c) const noexcept {
    if constexpr (F::id == format::f32) return reinterpret_cast<const float*>(base)[c];
    if constexpr (F::id == format::f16) return load_f16(base + 2 * c);
    if constexpr (F::id == format::bf16) return bf16_to_f32(load_u16(base + 2 * c));
    if constexpr (F::id == format::q8_row) return float(int8_t(base[c]));
    if constexpr (F::id == format::q8_2f)
      return float(int8_t(base[c])) * load_f16(w.data + w.rows * w.cols + 2 * w.rows + 2 * c);
    return 0.0f;
  }
};

template <class F>
struct decoder_for;
template <> struct decoder_for<fmt_q4tp> { using type = dec_ladder<4>; };
template <> struct decoder_for<fmt_q2tp> { using type = dec_ladder<2>; };
template <> struct decoder_for<fmt_mxfp4> { using type = dec_mxfp4; };
template <> struct decoder_for<fmt_fp8_b128> { using type = dec_fp8<128>; };
template <> struct decoder_for<fmt_fp8_b32> { using type = dec_fp8<32>; };
template <> struct decoder_for<fmt_f32> { using type = dec_dense<fmt_f32>; };
template <> struct decoder_for<fmt_f16> { using type = dec_dense<fmt_f16>; };
template <> struct decoder_for<fmt_bf16> { using type = dec_dense<fmt_bf16>; };
template <> struct decoder_for<fmt_q8_row> { using type = dec_dense<fmt_q8_row>; };
template <> struct decoder_for<fmt_q8_2f> { using type = dec_dense<fmt_q8_2f>; };
template <> struct decoder_for<fmt_q4_block> { using type = dec_q4flat<false>; };
template <> struct decoder_for<fmt_q4t> { using type = dec_q4flat<true>; };

template <class F>
concept has_avx2_decoder = requires { typename decoder_for<F>::type; };

/// Tokens processed together per pass over a row. With two accumulator chains per token (even and odd
/// groups) and four decoded vectors this fills 12 of the 16 ymm registers; the counts are template constants
/// so the accumulators stay in registers (a runtime-indexed array spilled them: 3x slower, measured).
inline constexpr uint64_t token_tile = 4;

using kernels::with_tile;  // (token_tile.hpp)

// flatten: the decoder's group() must inline into the token loop; GCC's per-TU inlining budget otherwise
// dropped dec_mxfp4::group to an out-of-line call once this TU grew (matvec-f32/mxfp4 −33 %, measured).
template <int NT, class D>
[[gnu::flatten]] inline void row_tile_f32(const D& d, uint64_t groups, const float* X, uint64_t ldx, float out[NT]) noexcept {
  __m256 acc[2][NT];
  for (int t = 0; t < NT; ++t) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
  auto step = [&](uint64_t g, __m256* a) {
    __m256 v[4];
    const __m256 s = _mm256_set1_ps(d.group(g, v));
    for (int t = 0; t < NT; ++t) {
      const float* x = X + uint64_t(t) * ldx + g * kgroup;
      __m256 ga = _mm256_mul_ps(v[0], _mm256_loadu_ps(x));
      ga = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(x + 8), ga);
      ga = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(x + 16), ga);
      ga = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(x + 24), ga);
      a[t] = _mm256_fmadd_ps(ga, s, a[t]);
    }
  };
  uint64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    step(g, acc[0]);
    step(g + 1, acc[1]);
  }
  if (g < groups) step(g, acc[0]);
  for (int t = 0; t < NT; ++t) out[t] = hsum(_mm256_add_ps(acc[0][t], acc[1][t]));
}

template <class F>
void gemm_rows(const matrix_view& w, const float* X, uint64_t n, uint64_t ldx, float* Y, uint64_t ldy, uint64_t r0,
               uint64_t r1) {
  using D = typename decoder_for<F>::type;
  if constexpr (requires { D::aligned_rows_only; })
    if (w.cols % kgroup != 0) return gemm_rows_generic<F>(w, X, n, ldx, Y, ldy, r0, r1);
  D d(w);
  const uint64_t groups = w.cols / kgroup, tail0 = groups * kgroup;
  for (uint64_t r = r0; r < r1; ++r) {
    d.begin_row(r);
    for (uint64_t t0 = 0; t0 < n; t0 += token_tile) {
      const uint64_t nt = std::min(token_tile, n - t0);
      float y[token_tile];
      with_tile(nt, [&](auto NT) { row_tile_f32<NT()>(d, groups, X + t0 * ldx, ldx, y); });
      for (uint64_t t = 0; t < nt; ++t) {
        const float* x = X + (t0 + t) * ldx;
        float v = y[t];
        for (uint64_t c = tail0; c < w.cols; ++c) v += d.elem(r, c) * x[c];
        Y[(t0 + t) * ldy + r] = v * d.row_scale();
      }
    }
  }
}

}  // namespace cmfx::kernels::avx2

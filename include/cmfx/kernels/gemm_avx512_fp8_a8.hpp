#pragma once
/// @file gemm_avx512_fp8_a8.hpp
/// @brief FP8 E4M3 (fp8_b128, fp8_b32) GEMM rows with int8 activations (act_q8.hpp) on AVX-512 BF16 + VBMI:
///        both sides become bf16 exactly and vdpbf16ps sums 32 products per instruction.
///
/// Why bf16 is exact here: every E4M3 value, subnormals included, has at most 4 significant bits and an exponent
/// in [-9, 8], so it is a normal bf16; an int8 activation (|xq| ≤ 127) has at most 7. Each product of two such
/// values is exact in f32 and at least 2^-9 in magnitude (no denormal, so vdpbf16ps's flush-to-zero never applies);
/// only the f32 sums round. The error of the path is therefore that of every int8-activation path (x rounded to 8
/// bits per 32 values, docs/FORMATS.md); the strict f32 kernel (gemm_avx512_8bit.hpp) stays the parity reference.
///
/// Decode: 64 codes per load; vpermi2b looks up the low and the high byte of |value|'s bf16 bits in two 128-entry
/// tables (the index's bit 7, the sign, is ignored), one vpternlogd puts the sign in, and vpunpck{l,h}bw pair the
/// bytes into words. The unpacks interleave within 128-bit lanes, so a 64-column pair of groups comes out as
/// register a = columns {0-7, 16-23, 32-39, 48-55}, b = {8-15, 24-31, 40-47, 56-63}; the activations are copied
/// once per quantiser call (act_q8::generation) into the same order, per thread. vdpbf16ps adds word pairs into
/// f32 lanes, so lanes 0-7 of both products belong to the pair's first group and lanes 8-15 to its second: one
/// multiply-add by [c_g ×8 | c_{g+1} ×8], c = activation scale × weight tile scale, applies both groups' scales.
/// The NaN codes (0x7F, 0xFF) read as ±480, as in the f32 kernels; checkpoints hold no NaN weights.
///
/// Not in the dispatch table (cpu_kernels.hpp): on the Zen 5 dev it measured 1.5-2.8x faster than the f32 kernel
/// with its rows in cache, but 5-30 % slower streaming them from DRAM at 1-4 tokens (docs/PERF.md "Forty-third
/// session"), where every product of the models runs. Call it directly (tests/kernels/gemm_i8_test.cpp does).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <vector>

#include "cmfx/formats/format_list.hpp"
#include "cmfx/formats/mx.hpp"
#include "cmfx/kernels/act_q8.hpp"
#include "cmfx/kernels/prefetch.hpp"
#include "cmfx/kernels/token_tile.hpp"

#define CMFX_AVX512BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512bf16,avx2,fma,f16c")))

// GCC 12's avx512fintrin.h reads an undefined vector in some intrinsics (-Wuninitialized in the including TU)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace cmfx::kernels::avx512 {

/// Whether this CPU runs gemm_rows_i8_fp8 (AVX-512 BF16 and VBMI besides the avx512 level's F/BW/VL).
inline bool cpu_has_fp8_a8() noexcept {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi");
#else
  return false;
#endif
}

namespace fp8a8 {

/// bf16 bits of |E4M3 code m| for m < 128 (0x7F, NaN, as 480 = the next normal step after 448).
constexpr uint16_t bf16_abs(uint32_t m) {
  const uint32_t e = m >> 3, f = m & 7;
  const float v = e ? float(8 + f) * float(1u << e) / 1024.0f : float(f) / 512.0f;  // (1 + f/8)·2^(e-7) | f·2^-9
  return uint16_t(std::bit_cast<uint32_t>(v) >> 16);  // exact: v has at most 4 significant bits
}
/// The lookup tables: byte k of entry m (k = 0 low, 1 high) at [k][m].
constexpr std::array<std::array<uint8_t, 128>, 2> make_tables() {
  std::array<std::array<uint8_t, 128>, 2> t{};
  for (uint32_t m = 0; m < 128; ++m) {
    t[0][m] = uint8_t(bf16_abs(m) & 0xFF);
    t[1][m] = uint8_t(bf16_abs(m) >> 8);
  }
  return t;
}
alignas(64) inline constexpr std::array<std::array<uint8_t, 128>, 2> tables = make_tables();
static_assert(bf16_abs(0x38) == 0x3F80 && bf16_abs(0x7E) == 0x43E0 && bf16_abs(0x01) == 0x3B00,
              "E4M3 1.0, 448 and 2^-9 in bf16");

struct luts {
  __m512i lo0, lo1, hi0, hi1, sign;
};
CMFX_AVX512BF16_TARGET inline luts load_luts() noexcept {
  return {_mm512_load_si512(tables[0].data()), _mm512_load_si512(tables[0].data() + 64),
          _mm512_load_si512(tables[1].data()), _mm512_load_si512(tables[1].data() + 64), _mm512_set1_epi8(char(0x80))};
}

/// 64 E4M3 codes → bf16 words in the unpack order (file comment).
CMFX_AVX512BF16_TARGET inline void decode64(__m512i q, const luts& t, __m512i& a, __m512i& b) noexcept {
  const __m512i lo = _mm512_permutex2var_epi8(t.lo0, q, t.lo1);
  const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(t.hi0, q, t.hi1), q, t.sign, 0xF8);  // A|(B&C)
  a = _mm512_unpacklo_epi8(lo, hi);
  b = _mm512_unpackhi_epi8(lo, hi);
}

/// Word position of column e (0..63) of a pair in the unpack order: a's words, then b's.
constexpr uint32_t word_of(uint32_t e) { return (e & 8 ? 32 : 0) + (e >> 4) * 8 + (e & 7); }

/// Per thread: the activations of one quantiser call as bf16 words in the unpack order, [n][pairs · 64] (a ragged
/// last group padded with zeros), and the combined scales of one tile row and token tile.
struct thread_state {
  std::vector<uint16_t> x;
  std::vector<float> c;
  uint64_t seen = 0;
};
inline thread_state& state() {
  thread_local thread_state s;
  return s;
}

/// The vpermt2w indices that take natural-order words (columns 0-31 in the first source, 32-63 in the second) to
/// the unpack order: [0] for register a's words, [1] for b's.
constexpr std::array<std::array<uint16_t, 32>, 2> make_word_index() {
  std::array<std::array<uint16_t, 32>, 2> ix{};
  for (uint32_t e = 0; e < 64; ++e) ix[word_of(e) / 32][word_of(e) % 32] = uint16_t(e);
  return ix;
}
alignas(64) inline constexpr std::array<std::array<uint16_t, 32>, 2> word_index = make_word_index();

CMFX_AVX512BF16_TARGET inline __m512 widen(__m128i b) noexcept { return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }

/// Fills s.x from a (when a is not the call s.x came from): 64 int8 activations per step, widened to f32 and
/// narrowed to bf16 (exact), then put in the unpack order; another act_layout element by element.
CMFX_AVX512BF16_TARGET inline void derive(const act_q8& a, uint64_t pairs, thread_state& s) {
  if (!act_stale(a, s.seen) && s.x.size() >= a.n * pairs * 64) return;
  if (s.x.size() < a.n * pairs * 64) s.x.resize(a.n * pairs * 64);
  const bool odd = a.blocks % 2 != 0;
  if (a.layout == act_layout::natural) {
    const __m512i ia = _mm512_load_si512(word_index[0].data()), ib = _mm512_load_si512(word_index[1].data());
    for (uint64_t t = 0; t < a.n; ++t)
      for (uint64_t p = 0; p < pairs; ++p) {
        const int8_t* in = a.q.data() + t * a.cols + 64 * p;
        const __m512i v = _mm512_maskz_loadu_epi8(odd && p + 1 == pairs ? 0xFFFFFFFFull : ~0ull, in);
        const __m512 f[4] = {widen(_mm512_extracti32x4_epi32(v, 0)), widen(_mm512_extracti32x4_epi32(v, 1)),
                             widen(_mm512_extracti32x4_epi32(v, 2)), widen(_mm512_extracti32x4_epi32(v, 3))};
        const __m512i n0 = (__m512i)_mm512_cvtne2ps_pbh(f[1], f[0]), n1 = (__m512i)_mm512_cvtne2ps_pbh(f[3], f[2]);
        uint16_t* out = s.x.data() + (t * pairs + p) * 64;
        _mm512_storeu_si512(out, _mm512_permutex2var_epi16(n0, ia, n1));
        _mm512_storeu_si512(out + 32, _mm512_permutex2var_epi16(n0, ib, n1));
      }
  } else {
    uint32_t pos[act_block];
    for (uint32_t j = 0; j < act_block; ++j) pos[j] = act_position(a.layout, j);
    for (uint64_t t = 0; t < a.n; ++t)
      for (uint64_t p = 0; p < pairs; ++p) {
        uint16_t* out = s.x.data() + (t * pairs + p) * 64;
        for (uint32_t e = 0; e < 64; ++e) {
          const uint64_t g = 2 * p + e / 32;
          const int v = g < a.blocks ? a.q[t * a.cols + g * act_block + pos[e % 32]] : 0;
          out[word_of(e)] = uint16_t(std::bit_cast<uint32_t>(float(v)) >> 16);  // exact (|v| ≤ 127)
        }
      }
  }
  s.seen = a.generation;
}

/// NR consecutive rows (`cols` bytes apart) × NT tokens over `pairs` 64-column pairs, the last one holding only
/// its first group when `odd` (its second half is not read). x: token t's words at x + t · xs; c: token t's
/// combined scales at c + t · cs (16 per pair). out[i · NT + t].
template <int NT, int NR>
CMFX_AVX512BF16_TARGET void rows_tile(const uint8_t* q, uint64_t cols, uint64_t pairs, bool odd, const uint16_t* x,
                                      uint64_t xs, const float* c, uint64_t cs, float* out) noexcept {
  const luts L = load_luts();
  __m512 acc[NR][NT];
#pragma GCC unroll 4
  for (int i = 0; i < NR; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (uint64_t p = 0; p < pairs; ++p) {
    const __mmask64 m = odd && p + 1 == pairs ? 0xFFFFFFFFull : ~0ull;  // a lone last group: its 32 bytes only
    __m512i a[NR], b[NR];
#pragma GCC unroll 4
    for (int i = 0; i < NR; ++i) {
      const uint8_t* qi = q + uint64_t(i) * cols + 64 * p;
      decode64(_mm512_maskz_loadu_epi8(m, qi), L, a[i], b[i]);
      prefetch_ahead(qi);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const uint16_t* xt = x + uint64_t(t) * xs + 64 * p;
      const __m512bh xa = (__m512bh)_mm512_loadu_si512(xt), xb = (__m512bh)_mm512_loadu_si512(xt + 32);
      const __m512 ct = _mm512_loadu_ps(c + uint64_t(t) * cs + 16 * p);
#pragma GCC unroll 4
      for (int i = 0; i < NR; ++i) {
        const __m512 d = _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)a[i], xa), (__m512bh)b[i], xb);
        acc[i][t] = _mm512_fmadd_ps(d, ct, acc[i][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < NR; ++i)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) out[i * NT + t] = _mm512_reduce_add_ps(acc[i][t]);
}


/// Rows per pass: one while a token tile's activation words and scales (3 bytes per column and token) stay well
/// inside L1, else four for ≤ 2 tokens, two for more (accumulators NR · NT ≤ 8).
constexpr uint64_t rows_per_pass(uint64_t nt, uint64_t cols) { return 3 * cols * nt <= 24576 ? 1 : nt <= 2 ? 4 : 2; }

}  // namespace fp8a8

/// Rows [r0, r1) of Y[t · ldy + r] = Σ_c W[r, c] · x̃[t, c] for FP8 with Tile × Tile scales and x̃ the int8
/// activations of `a` (a.cols == w.cols, a multiple of 32). CPUs with cpu_has_fp8_a8() only.
template <class F>
CMFX_AVX512BF16_TARGET void gemm_rows_i8_fp8(const matrix_view& w, const act_q8& a, float* Y, uint64_t ldy,
                                            uint64_t r0, uint64_t r1) {
  constexpr uint64_t T = F::block_rows, kt = 4;  // kt: tokens per tile
  const uint64_t groups = w.cols / act_block, pairs = (groups + 1) / 2, tpr = (w.cols + T - 1) / T;
  const bool odd = groups % 2 != 0;
  fp8a8::thread_state& s = fp8a8::state();
  fp8a8::derive(a, pairs, s);
  if (s.c.size() < kt * pairs * 16) s.c.resize(kt * pairs * 16);
  const uint64_t xs = pairs * 64, cs = pairs * 16;
  float y[4 * kt];
  for (uint64_t r = r0; r < r1;) {
    const uint64_t tile_row = r / T, row_end = std::min(r1, (tile_row + 1) * T);
    for (uint64_t t0 = 0; t0 < a.n; t0 += kt) {
      const uint64_t nt = std::min(kt, a.n - t0);
      for (uint64_t t = 0; t < nt; ++t)  // the combined scales of this tile row and token tile
        for (uint64_t g = 0; g < 2 * pairs; ++g) {
          const float v = g < groups ? a.scale[(t0 + t) * a.blocks + g] *
                                           detail::scale_at(w, tile_row * tpr + (act_block * g) / T)
                                     : 0.0f;
          std::fill_n(s.c.data() + t * cs + 8 * g, 8, v);
        }
      const uint16_t* xt = s.x.data() + t0 * xs;
      const uint64_t want = fp8a8::rows_per_pass(nt, w.cols);
      kernels::with_tile(nt, [&](auto NT) {
        for (uint64_t rr = r; rr < row_end;) {
          const uint64_t left = row_end - rr, nr = left >= want ? want : left >= 2 ? 2 : 1;
          const uint8_t* q = w.data + rr * w.cols;
          if (nr == 4) {
            if constexpr (NT() <= 2) fp8a8::rows_tile<NT(), 4>(q, w.cols, pairs, odd, xt, xs, s.c.data(), cs, y);
          } else if (nr == 2) {
            fp8a8::rows_tile<NT(), 2>(q, w.cols, pairs, odd, xt, xs, s.c.data(), cs, y);
          } else {
            fp8a8::rows_tile<NT(), 1>(q, w.cols, pairs, odd, xt, xs, s.c.data(), cs, y);
          }
          for (uint64_t i = 0; i < nr; ++i)
            for (uint64_t t = 0; t < NT(); ++t) Y[(t0 + t) * ldy + rr + i] = y[i * NT() + t];
          rr += nr;
        }
      });
    }
    r = row_end;
  }
}

}  // namespace cmfx::kernels::avx512

#pragma GCC diagnostic pop

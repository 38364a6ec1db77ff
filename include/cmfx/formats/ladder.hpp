#pragma once
/// @file ladder.hpp
/// @brief CMF ladder formats q4tp (dtype 15) and q2tp (dtype 16) (cmf-format.md §2.1-2.2).
///
/// Payload = three planes, no padding, for an R x C matrix with C % 32 == 0 and gpr = C/32 groups per row:
///   1. values:  R*gpr chunks of `value_bytes` (16 for q4tp, 8 for q2tp); chunk (r,g) at (r*gpr+g)*value_bytes.
///               q4tp byte k = elements 2k (low nibble) and 2k+1; q2tp byte k = elements 4k..4k+3, LSB first.
///   2. params:  at P = R*gpr*value_bytes, per row f16 lo then f16 step (both log2), 4 bytes per row.
///   3. codes:   at P + 4R, row r at r*code_stride, code_stride = ceil(5*gpr/8); code g is bits 5g..5g+4 of
///               the row's LSB-first bit stream.
/// Ladder (f32, geometric): t[0] = exp2f(lo), t[c] = t[c-1] * exp2f(step). This repeated product is the
/// format's definition (quant.rs `q4tp_ladder`); GPU kernels must reproduce it, not exp2(lo + c*step).
/// q4tp: w = (nib - 8) * t[code].  q2tp: w = (c - 1.5) * s, s = 0 for code 0 else t[code - 1].
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cmfx/formats/format.hpp"
#include "cmfx/formats/scale.hpp"

namespace cmfx {

namespace ladder {
inline constexpr uint32_t group_elems = 32;
inline constexpr uint32_t rungs = 32;
inline constexpr uint32_t code_bits = 5;
inline constexpr uint32_t param_bytes = 4;  // f16 lo + f16 step per row
inline constexpr uint32_t max_ulp_bumps = 64;

constexpr uint64_t code_stride(uint64_t gpr) noexcept { return (code_bits * gpr + 7) / 8; }

using table = std::array<float, rungs>;

/// exp2f of every f16 value, computed once with the system exp2f: lookups are bit-identical to calling it.
inline const float* exp2f_of_f16() {
  static const std::vector<float> t = [] {
    std::vector<float> v(65536);
    for (uint32_t h = 0; h < 65536; ++h) v[h] = ::exp2f(f16_to_f32(uint16_t(h)));
    return v;
  }();
  return t.data();
}

inline table build(uint16_t lo_bits, uint16_t step_bits) noexcept {
  table t;
  t[0] = ::exp2f(f16_to_f32(lo_bits));
  const float ratio = ::exp2f(f16_to_f32(step_bits));
  for (uint32_t c = 1; c < rungs; ++c) t[c] = t[c - 1] * ratio;
  return t;
}

inline uint32_t get_code(const uint8_t* row_codes, uint64_t g) noexcept {
  const uint64_t bit = code_bits * g, byte = bit / 8;
  const uint32_t sh = uint32_t(bit % 8);
  uint32_t v = row_codes[byte];
  if (sh > 8 - code_bits) v |= uint32_t(row_codes[byte + 1]) << 8;
  return (v >> sh) & (rungs - 1);
}

inline void put_code(uint8_t* row_codes, uint64_t g, uint32_t code) noexcept {
  const uint64_t bit = code_bits * g, byte = bit / 8;
  const uint32_t sh = uint32_t(bit % 8);
  row_codes[byte] = uint8_t(row_codes[byte] | (code << sh));
  if (sh > 8 - code_bits) row_codes[byte + 1] = uint8_t(row_codes[byte + 1] | (code >> (8 - sh)));
}

/// All gpr codes of a row, 8 codes per 5-byte (40-bit little-endian) word, then the ragged tail.
inline void get_codes(const uint8_t* row_codes, uint64_t gpr, uint8_t* out) noexcept {
  uint64_t g = 0;
  for (; g + 8 <= gpr; g += 8) {
    // Two loads composed in registers: a 5-byte memcpy into a u64 stalls on store forwarding.
    const uint8_t* p = row_codes + g / 8 * 5;
    uint32_t lo;
    std::memcpy(&lo, p, 4);
    const uint64_t w = uint64_t(lo) | (uint64_t(p[4]) << 32);
    for (uint32_t k = 0; k < 8; ++k) out[g + k] = uint8_t((w >> (code_bits * k)) & (rungs - 1));
  }
  for (; g < gpr; ++g) out[g] = uint8_t(get_code(row_codes, g));
}

/// Byte offsets of the three planes of an R x C ladder tensor.
struct planes {
  uint64_t gpr, params, codes, stride;
  constexpr planes(uint64_t rows, uint64_t cols, uint32_t value_bytes) noexcept
      : gpr(cols / group_elems),
        params(rows * (cols / group_elems) * value_bytes),
        codes(rows * (cols / group_elems) * value_bytes + param_bytes * rows),
        stride(code_stride(cols / group_elems)) {}
};
}  // namespace ladder

namespace detail {
template <uint32_t Bits>
struct ladder_base {
  static_assert(Bits == 4 || Bits == 2);
  static constexpr uint32_t value_bytes = ladder::group_elems * Bits / 8;
  static constexpr uint32_t block_elems = ladder::group_elems;
  static constexpr uint32_t block_rows = 1;
  static constexpr uint32_t block_bytes = value_bytes;
  // Layout constants for the GLSL preamble (decode_row implements exactly these).
  static constexpr uint32_t elem_bits = Bits;
  static constexpr float value_offset = Bits == 4 ? 8.0f : 1.5f;  ///< w = (q - value_offset) * s
  static constexpr bool code0_zero = Bits == 2;  ///< q2tp: code 0 means s = 0, code c > 0 uses t[c - 1]
  static constexpr bool low_bits_first = true;   ///< element 0 of a byte in its least significant bits
  static constexpr bool shape_ok(uint64_t r, uint64_t c) noexcept { return r > 0 && c > 0 && c % ladder::group_elems == 0; }
  static constexpr uint64_t data_bytes(uint64_t r, uint64_t c) noexcept {
    const uint64_t gpr = c / ladder::group_elems;
    return r * gpr * value_bytes + ladder::param_bytes * r + r * ladder::code_stride(gpr);
  }
  static constexpr uint64_t scale_bytes(uint64_t, uint64_t) noexcept { return 0; }

  static ladder::table row_ladder(const matrix_view& v, const ladder::planes& p, uint64_t r) noexcept {
    const uint8_t* pp = v.data + p.params + ladder::param_bytes * r;
    return ladder::build(load_u16(pp), load_u16(pp + 2));
  }

  static void decode_row(const matrix_view& v, uint64_t r, float* out) noexcept {
    const ladder::planes p(v.rows, v.cols, value_bytes);
    const ladder::table t = row_ladder(v, p, r);
    const uint8_t* codes = v.data + p.codes + r * p.stride;
    for (uint64_t g = 0; g < p.gpr; ++g) {
      const uint32_t code = ladder::get_code(codes, g);
      const uint8_t* q = v.data + (r * p.gpr + g) * value_bytes;
      float* o = out + g * ladder::group_elems;
      if constexpr (Bits == 4) {
        const float s = t[code];
        for (uint32_t k = 0; k < value_bytes; ++k) {
          o[2 * k] = float(int(q[k] & 15) - 8) * s;
          o[2 * k + 1] = float(int(q[k] >> 4) - 8) * s;
        }
      } else {
        const float s = code == 0 ? 0.0f : t[code - 1];
        for (uint32_t k = 0; k < value_bytes; ++k)
          for (uint32_t j = 0; j < 4; ++j) o[4 * k + j] = (float((q[k] >> (2 * j)) & 3) - 1.5f) * s;
      }
    }
  }
};
}  // namespace detail

struct fmt_q4tp : detail::ladder_base<4> {
  static constexpr std::string_view name = "q4tp";
  static constexpr format id = format::q4tp;
  static constexpr int cmf_dtype = 15;
  static encoded_matrix encode(const float* w, uint64_t rows, uint64_t cols);
};

struct fmt_q2tp : detail::ladder_base<2> {
  static constexpr std::string_view name = "q2tp";
  static constexpr format id = format::q2tp;
  static constexpr int cmf_dtype = 16;
  static encoded_matrix encode(const float* w, uint64_t rows, uint64_t cols);
};

}  // namespace cmfx

#include "cmfx/formats/ladder_encode.hpp"

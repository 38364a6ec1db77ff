#pragma once
/// @file q4.hpp
/// @brief CMF flat 4-bit formats (cmf-format.md §2.3). Both group the flattened tensor in runs of 32
///        (the last group zero-padded); nibble byte k of a group holds element 2k (low) and 2k+1 (high);
///        value = (nib - 8) * s.
///   q4_block (dtype 4): [16 B nibbles x G][f16 s x G]
///   q4t      (dtype 11): G tiles of [f16 s][16 B nibbles]
#include <algorithm>
#include <cmath>

#include "cmfx/formats/format.hpp"
#include "cmfx/formats/scale.hpp"

namespace cmfx {

namespace detail {
inline constexpr uint32_t q4_group = 32;
inline constexpr uint32_t q4_group_bytes = 16;

template <bool Tiled>
struct q4_flat {
  static constexpr uint32_t block_elems = q4_group;
  static constexpr uint32_t block_rows = 1;
  static constexpr uint32_t block_bytes = q4_group_bytes + 2;
  // Layout constants for the GLSL preamble (decode_row implements exactly these).
  static constexpr bool tiled = Tiled;                    ///< q4t: [f16 s][nibbles] tiles; q4_block: planes
  static constexpr uint32_t elem_bits = 4;
  static constexpr uint32_t group_bytes = q4_group_bytes;  ///< nibble bytes of one group
  static constexpr uint32_t group_scale_bytes = 2;         ///< f16 scale of one group
  static constexpr float value_offset = 8.0f;              ///< w = (nib - value_offset) * s
  static constexpr bool low_bits_first = true;             ///< byte k: element 2k in the low nibble
  static constexpr bool shape_ok(uint64_t r, uint64_t c) noexcept { return r * c > 0; }
  static constexpr uint64_t data_bytes(uint64_t r, uint64_t c) noexcept { return 18 * ceil_div(r * c, q4_group); }
  static constexpr uint64_t scale_bytes(uint64_t, uint64_t) noexcept { return 0; }

  static const uint8_t* nibbles(const uint8_t* base, uint64_t groups, uint64_t g) noexcept {
    (void)groups;
    return Tiled ? base + 18 * g + 2 : base + q4_group_bytes * g;
  }
  static float group_scale(const uint8_t* base, uint64_t groups, uint64_t g) noexcept {
    return Tiled ? load_f16(base + 18 * g) : load_f16(base + q4_group_bytes * groups + 2 * g);
  }
  static void decode_row(const matrix_view& v, uint64_t r, float* out) noexcept {
    const uint64_t n = v.rows * v.cols, groups = ceil_div(n, q4_group);
    for (uint64_t c = 0; c < v.cols; ++c) {
      const uint64_t i = r * v.cols + c, g = i / q4_group, j = i % q4_group;
      const uint8_t b = nibbles(v.data, groups, g)[j / 2];
      const int nib = (j & 1) ? (b >> 4) : (b & 15);
      out[c] = float(nib - 8) * group_scale(v.data, groups, g);
    }
  }
  /// Reference encoder: s = f16_scale(absmax/7) per group, nib = clamp(rhe(w/s), -8, 7) + 8.
  static encoded_matrix encode(const float* w, uint64_t rows, uint64_t cols) {
    const uint64_t n = rows * cols, groups = ceil_div(n, q4_group);
    encoded_matrix e;
    e.data.assign(data_bytes(rows, cols), 0);
    for (uint64_t g = 0; g < groups; ++g) {
      float amax = 0.0f;
      for (uint64_t j = 0; j < q4_group && g * q4_group + j < n; ++j) amax = std::max(amax, std::fabs(w[g * q4_group + j]));
      const uint16_t sh = f16_scale_bits(amax / 7.0f);
      const float s = f16_to_f32(sh);
      uint8_t* nb = Tiled ? e.data.data() + 18 * g + 2 : e.data.data() + q4_group_bytes * g;
      store_u16(Tiled ? e.data.data() + 18 * g : e.data.data() + q4_group_bytes * groups + 2 * g, sh);
      for (uint64_t j = 0; j < q4_group; ++j) {
        const float x = g * q4_group + j < n ? w[g * q4_group + j] : 0.0f;
        const int q = int(std::clamp(round_half_even(x / s), -8.0f, 7.0f)) + 8;
        nb[j / 2] = uint8_t(nb[j / 2] | ((j & 1) ? q << 4 : q));
      }
    }
    return e;
  }
};
}  // namespace detail

struct fmt_q4_block : detail::q4_flat<false> {
  static constexpr std::string_view name = "q4_block";
  static constexpr format id = format::q4_block;
  static constexpr int cmf_dtype = 4;
};

struct fmt_q4t : detail::q4_flat<true> {
  static constexpr std::string_view name = "q4t";
  static constexpr format id = format::q4t;
  static constexpr int cmf_dtype = 11;
};

}  // namespace cmfx

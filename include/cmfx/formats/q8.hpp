#pragma once
/// @file q8.hpp
/// @brief CMF int8 formats (cmf-format.md §2.3):
///   q8_row (dtype 3): [i8 R*C][f16 scale x R], w = q * scale[r]
///   q8_2f  (dtype 9): [i8 R*C][f16 row x R][f16 col x C], w = q * row[r] * col[c]
#include <algorithm>
#include <cmath>

#include "cmfx/formats/format.hpp"
#include "cmfx/formats/scale.hpp"

namespace cmfx {

namespace detail {
inline float row_absmax(const float* w, uint64_t n) noexcept {
  float m = 0.0f;
  for (uint64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(w[i]));
  return m;
}
inline int8_t quant_i8(float w, float s) noexcept {
  return int8_t(std::clamp(round_half_even(w / s), -128.0f, 127.0f));
}
}  // namespace detail

struct fmt_q8_row {
  static constexpr std::string_view name = "q8_row";
  static constexpr format id = format::q8_row;
  static constexpr int cmf_dtype = 3;
  static constexpr uint32_t block_elems = 0;  // one scale per whole row
  static constexpr uint32_t block_rows = 1;
  static constexpr uint32_t block_bytes = 1;
  static constexpr uint32_t elem_bits = 8;        ///< signed int8 values
  static constexpr uint32_t row_scale_bytes = 2;  ///< f16 per row, after the R*C values
  static constexpr bool shape_ok(uint64_t r, uint64_t c) noexcept { return r > 0 && c > 0; }
  static constexpr uint64_t data_bytes(uint64_t r, uint64_t c) noexcept { return r * c + 2 * r; }
  static constexpr uint64_t scale_bytes(uint64_t, uint64_t) noexcept { return 0; }
  static void decode_row(const matrix_view& v, uint64_t r, float* out) noexcept {
    const int8_t* q = reinterpret_cast<const int8_t*>(v.data) + r * v.cols;
    const float s = load_f16(v.data + v.rows * v.cols + 2 * r);
    for (uint64_t c = 0; c < v.cols; ++c) out[c] = float(q[c]) * s;
  }
  /// cortiq's encode_q8_row: scale = f16_scale(absmax/127), q = clamp(rhe(w/scale), -128, 127).
  static encoded_matrix encode(const float* w, uint64_t rows, uint64_t cols) {
    encoded_matrix e;
    e.data.resize(data_bytes(rows, cols));
    for (uint64_t r = 0; r < rows; ++r) {
      const uint16_t sh = f16_scale_bits(detail::row_absmax(w + r * cols, cols) / 127.0f);
      const float s = f16_to_f32(sh);
      for (uint64_t c = 0; c < cols; ++c)
        e.data[r * cols + c] = uint8_t(detail::quant_i8(w[r * cols + c], s));
      store_u16(e.data.data() + rows * cols + 2 * r, sh);
    }
    return e;
  }
};

struct fmt_q8_2f {
  static constexpr std::string_view name = "q8_2f";
  static constexpr format id = format::q8_2f;
  static constexpr int cmf_dtype = 9;
  static constexpr uint32_t block_elems = 0;
  static constexpr uint32_t block_rows = 1;
  static constexpr uint32_t block_bytes = 1;
  static constexpr uint32_t elem_bits = 8;        ///< signed int8 values
  static constexpr uint32_t row_scale_bytes = 2;  ///< f16 per row, after the R*C values
  static constexpr bool shape_ok(uint64_t r, uint64_t c) noexcept { return r > 0 && c > 0; }
  static constexpr uint32_t col_scale_bytes = 2;  ///< f16 per column, after the row scales
  static constexpr uint64_t data_bytes(uint64_t r, uint64_t c) noexcept { return r * c + 2 * r + 2 * c; }
  static constexpr uint64_t scale_bytes(uint64_t, uint64_t) noexcept { return 0; }
  static void decode_row(const matrix_view& v, uint64_t r, float* out) noexcept {
    const int8_t* q = reinterpret_cast<const int8_t*>(v.data) + r * v.cols;
    const uint8_t* rowp = v.data + v.rows * v.cols;
    const uint8_t* colp = rowp + 2 * v.rows;
    const float rs = load_f16(rowp + 2 * r);
    for (uint64_t c = 0; c < v.cols; ++c) out[c] = float(q[c]) * rs * load_f16(colp + 2 * c);
  }
  /// Reference encoder: column scales from the column absmax normalised to 1 at the largest column
  /// (f16), then per-row f16 scales of the column-normalised values.
  static encoded_matrix encode(const float* w, uint64_t rows, uint64_t cols) {
    encoded_matrix e;
    e.data.resize(data_bytes(rows, cols));
    uint8_t* rowp = e.data.data() + rows * cols;
    uint8_t* colp = rowp + 2 * rows;
    std::vector<float> colmax(cols, 0.0f);
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t c = 0; c < cols; ++c) colmax[c] = std::max(colmax[c], std::fabs(w[r * cols + c]));
    const float gmax = *std::max_element(colmax.begin(), colmax.end());
    std::vector<float> cs(cols);
    for (uint64_t c = 0; c < cols; ++c) {
      const uint16_t h = f16_scale_bits(gmax > 0 ? colmax[c] / gmax : 1.0f);
      store_u16(colp + 2 * c, h);
      cs[c] = f16_to_f32(h);
    }
    std::vector<float> tmp(cols);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) tmp[c] = w[r * cols + c] / cs[c];
      const uint16_t sh = f16_scale_bits(detail::row_absmax(tmp.data(), cols) / 127.0f);
      store_u16(rowp + 2 * r, sh);
      const float rs = f16_to_f32(sh);
      for (uint64_t c = 0; c < cols; ++c)
        e.data[r * cols + c] = uint8_t(detail::quant_i8(w[r * cols + c], rs * cs[c]));
    }
    return e;
  }
};

}  // namespace cmfx

#pragma once
/// @file mx.hpp
/// @brief Source-checkpoint formats with scales in a sibling tensor (cmf-format.md §2.4-2.5):
///   mxfp4        OCP MX FP4: data I8 [R, C/2], byte = element 2k (low nibble) | element 2k+1 (high nibble)
///                (convert.rs `unpack_mxfp4`); scale UE8M0 [R, C/32]; w = e2m1(nib) * 2^(k-127).
///   fp8_b128/b32 FP8 E4M3fn [R, C] with one scale per T x T tile, [ceil(R/T), ceil(C/T)] row-major, partial
///                edge tiles; scale UE8M0 (DeepSeek-V4) or f32 (`weight_scale_inv`, DeepSeek-V3). w = e4m3(b) * scale.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "cmfx/formats/exmy.hpp"
#include "cmfx/formats/format.hpp"

namespace cmfx {

namespace detail {
inline float scale_at(const matrix_view& v, uint64_t i) noexcept {
  if (v.scale_enc == scale_encoding::f32) {
    float f;
    std::memcpy(&f, v.scale + 4 * i, 4);
    return f;
  }
  return e8m0_to_f32(v.scale[i]);
}
/// Smallest power of two s with amax / s <= qmax, as a UE8M0 code (amax = 0 gives 2^-127 .. any, we use 1.0).
inline uint8_t pow2_scale_code(float amax, float qmax) noexcept {
  if (!(amax > 0.0f)) return 127;
  int k = int(std::ceil(std::log2(double(amax) / double(qmax))));
  k = std::clamp(k, -127, 127);
  return uint8_t(k + 127);
}
}  // namespace detail

struct fmt_mxfp4 {
  static constexpr std::string_view name = "mxfp4";
  static constexpr format id = format::mxfp4;
  static constexpr int cmf_dtype = -1;
  static constexpr uint32_t block_elems = 32;
  static constexpr uint32_t block_rows = 1;
  static constexpr uint32_t block_bytes = 16;
  using elem = e2m1;        ///< element and scale types (their constants feed the GLSL preamble)
  using scale_elem = ue8m0;
  static constexpr uint32_t elem_bits = 4;
  static constexpr bool low_bits_first = true;  ///< byte k: element 2k in the low nibble
  static constexpr bool shape_ok(uint64_t r, uint64_t c) noexcept { return r > 0 && c > 0 && c % block_elems == 0; }
  static constexpr uint64_t data_bytes(uint64_t r, uint64_t c) noexcept { return r * c / 2; }
  static constexpr uint64_t scale_bytes(uint64_t r, uint64_t c) noexcept { return r * (c / block_elems); }
  static void decode_row(const matrix_view& v, uint64_t r, float* out) noexcept {
    const uint8_t* q = v.data + r * (v.cols / 2);
    const uint64_t spr = v.cols / block_elems;
    for (uint64_t b = 0; b < spr; ++b) {
      const float s = detail::scale_at(v, r * spr + b);
      for (uint32_t k = 0; k < block_elems / 2; ++k) {
        const uint8_t byte = q[b * 16 + k];
        out[b * 32 + 2 * k] = e2m1::decode(uint8_t(byte & 15)) * s;
        out[b * 32 + 2 * k + 1] = e2m1::decode(uint8_t(byte >> 4)) * s;
      }
    }
  }
  /// Reference encoder: per block the smallest power-of-two scale that keeps amax <= 6, E2M1 round-half-even.
  static encoded_matrix encode(const float* w, uint64_t rows, uint64_t cols) {
    encoded_matrix e;
    e.data.assign(data_bytes(rows, cols), 0);
    e.scale.assign(scale_bytes(rows, cols), 0);
    const uint64_t spr = cols / block_elems;
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t b = 0; b < spr; ++b) {
        const float* wb = w + r * cols + b * block_elems;
        float amax = 0.0f;
        for (uint32_t j = 0; j < block_elems; ++j) amax = std::max(amax, std::fabs(wb[j]));
        const uint8_t k = detail::pow2_scale_code(amax, 6.0f);
        e.scale[r * spr + b] = k;
        const float s = ue8m0::decode(k);
        for (uint32_t j = 0; j < block_elems; ++j) {
          const uint8_t nib = e2m1::encode(wb[j] / s);
          e.data[r * (cols / 2) + b * 16 + j / 2] |= uint8_t((j & 1) ? nib << 4 : nib);
        }
      }
    return e;
  }
};

template <uint32_t Tile, format Id>
struct fmt_fp8_block {
  static constexpr std::string_view name = Tile == 128 ? "fp8_b128" : "fp8_b32";
  static constexpr format id = Id;
  static constexpr int cmf_dtype = -1;
  static constexpr uint32_t block_elems = Tile;
  static constexpr uint32_t block_rows = Tile;
  static constexpr uint32_t block_bytes = Tile;  // one row of one tile
  using elem = e4m3;  ///< element and scale types (their constants feed the GLSL preamble)
  using scale_elem = ue8m0;
  static constexpr uint32_t elem_bits = 8;
  static constexpr bool shape_ok(uint64_t r, uint64_t c) noexcept { return r > 0 && c > 0; }
  static constexpr uint64_t data_bytes(uint64_t r, uint64_t c) noexcept { return r * c; }
  static constexpr uint64_t scale_count(uint64_t r, uint64_t c) noexcept { return ceil_div(r, Tile) * ceil_div(c, Tile); }
  static constexpr uint64_t scale_bytes(uint64_t r, uint64_t c) noexcept { return scale_count(r, c); }
  static void decode_row(const matrix_view& v, uint64_t r, float* out) noexcept {
    const uint64_t tpr = ceil_div(v.cols, Tile);
    const uint8_t* q = v.data + r * v.cols;
    for (uint64_t c = 0; c < v.cols; ++c) out[c] = e4m3::decode(q[c]) * detail::scale_at(v, (r / Tile) * tpr + c / Tile);
  }
  /// Reference encoder: per tile the smallest power-of-two UE8M0 scale with amax/scale <= 448, E4M3 RNE.
  static encoded_matrix encode(const float* w, uint64_t rows, uint64_t cols) {
    encoded_matrix e;
    e.data.assign(data_bytes(rows, cols), 0);
    e.scale.assign(scale_bytes(rows, cols), 0);
    const uint64_t tpr = ceil_div(cols, Tile);
    std::vector<float> amax(scale_count(rows, cols), 0.0f);
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t c = 0; c < cols; ++c) {
        float& a = amax[(r / Tile) * tpr + c / Tile];
        a = std::max(a, std::fabs(w[r * cols + c]));
      }
    for (uint64_t i = 0; i < amax.size(); ++i) e.scale[i] = detail::pow2_scale_code(amax[i], 448.0f);
    for (uint64_t r = 0; r < rows; ++r)
      for (uint64_t c = 0; c < cols; ++c) {
        const float s = ue8m0::decode(e.scale[(r / Tile) * tpr + c / Tile]);
        e.data[r * cols + c] = e4m3::encode(w[r * cols + c] / s, /*saturate=*/true);
      }
    return e;
  }
};

using fmt_fp8_b128 = fmt_fp8_block<128, format::fp8_b128>;
using fmt_fp8_b32 = fmt_fp8_block<32, format::fp8_b32>;

}  // namespace cmfx

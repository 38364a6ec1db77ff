#pragma once
/// @file dense.hpp
/// @brief Unquantised formats: f32, f16, bf16 (CMF dtypes 0, 1, 2), little-endian.
#include <cstring>

#include "cmfx/formats/exmy.hpp"
#include "cmfx/formats/format.hpp"

namespace cmfx {

namespace detail {
template <class Derived, uint32_t Bytes>
struct dense_base {
  static constexpr uint32_t block_elems = 1;
  static constexpr uint32_t block_rows = 1;
  static constexpr uint32_t block_bytes = Bytes;
  static constexpr uint32_t elem_bits = 8 * Bytes;  ///< bits of one stored element (GLSL preamble)
  static constexpr bool shape_ok(uint64_t, uint64_t) noexcept { return true; }
  static constexpr uint64_t data_bytes(uint64_t r, uint64_t c) noexcept { return r * c * Bytes; }
  static constexpr uint64_t scale_bytes(uint64_t, uint64_t) noexcept { return 0; }
};
}  // namespace detail

struct fmt_f32 : detail::dense_base<fmt_f32, 4> {
  static constexpr std::string_view name = "f32";
  static constexpr format id = format::f32;
  static constexpr int cmf_dtype = 0;
  static void decode_row(const matrix_view& v, uint64_t r, float* out) noexcept {
    std::memcpy(out, v.data + r * v.cols * 4, v.cols * 4);
  }
  static encoded_matrix encode(const float* w, uint64_t rows, uint64_t cols) {
    encoded_matrix e;
    e.data.resize(rows * cols * 4);
    std::memcpy(e.data.data(), w, e.data.size());
    return e;
  }
};

template <class Elem, format Id, int Dtype, class Name>
struct fmt_half_like : detail::dense_base<fmt_half_like<Elem, Id, Dtype, Name>, 2> {
  static constexpr std::string_view name = Name::value;
  using elem = Elem;  ///< the exmy element type (its constants feed the GLSL preamble)
  static constexpr format id = Id;
  static constexpr int cmf_dtype = Dtype;
  static void decode_row(const matrix_view& v, uint64_t r, float* out) noexcept {
    const uint8_t* p = v.data + r * v.cols * 2;
    for (uint64_t c = 0; c < v.cols; ++c) {
      uint16_t h;
      std::memcpy(&h, p + 2 * c, 2);
      if constexpr (Id == format::f16)
        out[c] = f16_to_f32(h);
      else
        out[c] = bf16_to_f32(h);
    }
  }
  static encoded_matrix encode(const float* w, uint64_t rows, uint64_t cols) {
    encoded_matrix e;
    e.data.resize(rows * cols * 2);
    for (uint64_t i = 0; i < rows * cols; ++i) {
      const uint16_t h = Elem::encode(w[i]);
      std::memcpy(e.data.data() + 2 * i, &h, 2);
    }
    return e;
  }
};

namespace detail {
struct name_f16 {
  static constexpr std::string_view value = "f16";
};
struct name_bf16 {
  static constexpr std::string_view value = "bf16";
};
}  // namespace detail

using fmt_f16 = fmt_half_like<half, format::f16, 1, detail::name_f16>;
using fmt_bf16 = fmt_half_like<bfloat16, format::bf16, 2, detail::name_bf16>;

}  // namespace cmfx

#pragma once
/// @file cmf_dtype.hpp
/// @brief CMF tensor dtype ids (cmf-format.md §1.7; infosave2007/cmf:crates/cortiq-core/src/types.rs). Ids are
///        append-only. cmfx computes with the ids that map to a weight format; the others are listed by
///        `cmfx info` but refused when a kernel asks for them.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "cmfx/formats/format.hpp"

namespace cmfx {

enum class cmf_dtype : uint8_t {
  f32 = 0, f16 = 1, bf16 = 2, q8_row = 3, q4_block = 4, mix8_4 = 5, u8 = 6, q4_col = 7, vbit = 8, q8_2f = 9,
  vbit_ro = 10, q4t = 11, q1 = 12, q1s = 13, q1t = 14, q4tp = 15, q2tp = 16,
};
inline constexpr uint8_t cmf_dtype_count = 17;

inline constexpr std::array<std::string_view, cmf_dtype_count> cmf_dtype_names = {
    "f32", "f16", "bf16", "q8_row", "q4_block", "mix8_4", "u8", "q4_col", "vbit", "q8_2f",
    "vbit_ro", "q4t", "q1", "q1s", "q1t", "q4tp", "q2tp"};

inline bool cmf_dtype_known(uint8_t id) noexcept { return id < cmf_dtype_count; }

inline std::string_view cmf_dtype_name(uint8_t id) noexcept {
  return cmf_dtype_known(id) ? cmf_dtype_names[id] : std::string_view("unknown");
}

/// The weight format cmfx computes a dtype with, or nullopt for dtypes it refuses (vbit, q1 family, u8, reserved).
inline std::optional<format> cmf_dtype_format(uint8_t id) noexcept {
  switch (cmf_dtype(id)) {
    case cmf_dtype::f32: return format::f32;
    case cmf_dtype::f16: return format::f16;
    case cmf_dtype::bf16: return format::bf16;
    case cmf_dtype::q8_row: return format::q8_row;
    case cmf_dtype::q4_block: return format::q4_block;
    case cmf_dtype::q8_2f: return format::q8_2f;
    case cmf_dtype::q4t: return format::q4t;
    case cmf_dtype::q4tp: return format::q4tp;
    case cmf_dtype::q2tp: return format::q2tp;
    default: return std::nullopt;
  }
}

/// Overflow-checked a*b.
inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) noexcept { return __builtin_mul_overflow(a, b, out); }
inline bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) noexcept { return __builtin_add_overflow(a, b, out); }

/// Expected payload size of a dtype and shape (quant.rs `expected_nbytes`), or nullopt where the reference
/// defines none (reserved ids, u8, vbit, q1s/q1t, and q4tp/q2tp unless 2-D with cols % 32 == 0).
/// `elements` is the (already overflow-checked) product of the shape.
inline std::optional<uint64_t> cmf_expected_nbytes(uint8_t id, const uint32_t* shape, uint32_t ndim,
                                                   uint64_t elements) noexcept {
  const uint64_t n = elements, g = (n + 31) / 32, r = ndim ? shape[0] : 1;
  uint64_t out = 0, t = 0;
  switch (cmf_dtype(id)) {
    case cmf_dtype::f32:
      if (mul_overflows(n, 4, &out)) return std::nullopt;
      return out;
    case cmf_dtype::f16:
    case cmf_dtype::bf16:
      if (mul_overflows(n, 2, &out)) return std::nullopt;
      return out;
    case cmf_dtype::q8_row:
      if (add_overflows(n, 2 * r, &out)) return std::nullopt;
      return out;
    case cmf_dtype::q4_block:
    case cmf_dtype::q4t: return 18 * g;
    case cmf_dtype::q1: return 6 * g;
    case cmf_dtype::q8_2f: {
      const uint64_t c = r ? n / r : 0;
      if (add_overflows(n, 2 * r, &t) || add_overflows(t, 2 * c, &out)) return std::nullopt;
      return out;
    }
    case cmf_dtype::q4tp:
    case cmf_dtype::q2tp: {
      if (ndim != 2 || shape[1] % 32 != 0) return std::nullopt;
      const uint64_t rows = shape[0], gpr = shape[1] / 32, vb = id == uint8_t(cmf_dtype::q4tp) ? 16 : 8;
      // rows <= 2^32 and gpr < 2^27: no overflow in 64 bits.
      return rows * gpr * vb + 4 * rows + rows * ((5 * gpr + 7) / 8);
    }
    default: return std::nullopt;
  }
}

}  // namespace cmfx

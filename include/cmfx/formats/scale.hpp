#pragma once
/// @file scale.hpp
/// @brief Small helpers shared by the reference encoders: f16 scale rounding and round-half-even.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cmfx/formats/exmy.hpp"

namespace cmfx {

/// Smallest normal f16, the floor every f16 scale is clamped to (cortiq's F16_TINY, cmf-format.md §2.1).
inline constexpr float f16_tiny = 6.103515625e-05f;  // 2^-14

/// Round-half-even to an integer, as std::nearbyint in the default rounding mode, for |x| < 2^22: adding and
/// subtracting 1.5 · 2^23 lets the f32 addition's own round-to-nearest-even do it — inline on every x86-64 (without
/// SSE4.1, std::nearbyint is a libm call per value: a fifth of a 1024x4096 int8 matvec went to quantising its
/// activations). Beyond 2^22 the result is within 2 of x (and NaN stays NaN): every caller clamps it to a small
/// range (quantised codes), where that changes nothing. cmfx never builds with -ffast-math, which could fold it.
inline float round_half_even(float x) noexcept {
  constexpr float magic = 12582912.0f;  // 1.5 · 2^23
  return (x + magic) - magic;
}

/// cortiq's f32 -> f16 (quant.rs `f32_to_f16`), used by the reference encoders so their payloads match the
/// reference bit for bit. Identical to IEEE RNE (f32_to_f16) for normal results; subnormal results round half
/// up in magnitude with no sticky bit (2^-25 -> 0x0001); |x| < 2^-25 -> ±0; NaN -> 0x7E00 (payload dropped).
inline uint16_t f32_to_f16_cortiq(float x) noexcept {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  const uint32_t sign = (bits >> 16) & 0x8000u, m = bits & 0x7FFFFFu;
  int e = int((bits >> 23) & 0xFFu);
  if (e == 0xFF) return uint16_t(sign | 0x7C00u | (m ? 0x200u : 0u));
  e -= 112;
  if (e >= 31) return uint16_t(sign | 0x7C00u);
  if (e <= 0) {
    if (e < -10) return uint16_t(sign);
    const uint32_t mm = m | 0x800000u;
    const int sh = 14 - e;
    return uint16_t(sign | ((mm >> sh) + ((mm >> (sh - 1)) & 1u)));
  }
  const uint32_t h = (uint32_t(e) << 10) | (m >> 13), r = (m >> 12) & 1u, sticky = (m & 0xFFFu) != 0;
  return uint16_t(sign | (h + (r & (sticky | (h & 1u)))));
}

/// f16 bits of max(f16round(x), 2^-14): the scale rule of cortiq's encoders (`f16_scale`).
inline uint16_t f16_scale_bits(float x) noexcept {
  uint16_t h = f32_to_f16_cortiq(x);
  if (!(f16_to_f32(h) >= f16_tiny)) h = 0x0400;  // 2^-14
  return h;
}
inline float f16_scale(float x) noexcept { return f16_to_f32(f16_scale_bits(x)); }

inline uint16_t load_u16(const uint8_t* p) noexcept {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline void store_u16(uint8_t* p, uint16_t v) noexcept { std::memcpy(p, &v, 2); }
inline float load_f16(const uint8_t* p) noexcept { return f16_to_f32(load_u16(p)); }

}  // namespace cmfx

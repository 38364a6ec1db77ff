#pragma once
/// @file fake_quant.hpp
/// @brief QAT fake quantisation that is part of the V4 / V4.1 forward pass (spec §3.6), in place.
///
/// act_quant_e4m3(x, B): per block of B values (a ragged last block uses its own amax):
///   amax = max(max|x|, 1e-4); scale = 2^ceil(log2(amax/448)) (a UE8M0 power of two);
///   x ← e4m3_round(clamp(x/scale, ±448)) · scale.
/// act_quant_e2m1(x, B): amax floor 6·2^−126; scale = 2^ceil(log2(amax/6)); x ← e2m1_round(clamp(x/scale, ±6))·scale.
/// Rounding is cmfx::e4m3 / cmfx::e2m1 encode (round to nearest, ties to even) followed by the exact decode.
/// ceil(log2(q)) is exact (from the f32 exponent and mantissa of q = amax/fmax, as the tilelang kernel's
/// bit-level fast_log2_ceil), and x/scale, ·scale are exact powers of two, so the result is bit-exact.
/// Block sizes in the models: 128 (V4 Linear inputs), 32 (V4.1), 64 (V4 KV nope dims); FP4 uses 32.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>

#include "cmfx/formats/exmy.hpp"

namespace cmfx {

/// The amax floors of act_quant_e4m3 / act_quant_e2m1 (also the constants of the GPU kernel, kernels_quant.cpp).
inline constexpr float e4m3_amax_floor = 1e-4f;
inline constexpr float e2m1_amax_floor = 6.0f * 0x1p-126f;

/// 2^ceil(log2(q)) for finite q > 0, exact.
inline float pow2_ceil(float q) noexcept {
  int e;
  const float f = std::frexp(q, &e);  // q = f·2^e, f in [0.5, 1)
  return std::ldexp(1.0f, f == 0.5f ? e - 1 : e);
}

namespace ops_detail {
template <class Fmt>
inline void fake_quant_blocks(std::span<float> x, uint32_t block, float fmax, float amax_floor) {
  if (block == 0) throw std::invalid_argument("fake quant: block must be > 0");
  const size_t n = x.size();
  for (size_t b = 0; b < n; b += block) {
    float* p = x.data() + b;
    const size_t len = std::min<size_t>(block, n - b);
    float amax = 0.0f;
    for (size_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(p[i]));
    amax = std::max(amax, amax_floor);
    const float scale = pow2_ceil(amax / fmax);
    const float inv = 1.0f / scale;  // exact: scale is a power of two within the f32 normal range
    for (size_t i = 0; i < len; ++i) {
      const float q = std::clamp(p[i] * inv, -fmax, fmax);
      p[i] = Fmt::decode(Fmt::encode(q)) * scale;
    }
  }
}
}  // namespace ops_detail

/// FP8 (E4M3) block fake-quant in place.
inline void act_quant_e4m3(std::span<float> x, uint32_t block) {
  ops_detail::fake_quant_blocks<e4m3>(x, block, 448.0f, e4m3_amax_floor);
}

/// FP4 (E2M1) block fake-quant in place (V4 indexer, block 32).
inline void act_quant_e2m1(std::span<float> x, uint32_t block = 32) {
  ops_detail::fake_quant_blocks<e2m1>(x, block, 6.0f, e2m1_amax_floor);
}

/// FP4 (E2M1) block scale with an E4M3 scale (V4.1 compressed KV, spec §8): s = e4m3_RNE(max(amax, 6·2^-9)/6),
/// an ordinary E4M3 value (not a power of two), saturated at 448. amax/6 is an f32 division; it never lands on an
/// E4M3 rounding tie it did not hit exactly, so the result equals e4m3_RNE of the exact quotient. Returns the code.
inline constexpr float e2m1_e4m3_amax_floor = 6.0f * 0x1p-9f;  ///< s ≥ 2^-9, the smallest E4M3 subnormal
inline uint8_t fp4_e4m3_scale_code(float amax) noexcept {
  const float a = std::max(amax, e2m1_e4m3_amax_floor);
  return e4m3::encode(a / 6.0f, /*saturate=*/true);
}

/// FP4 (E2M1) block scale with a UE8M0 scale (V4 indexer, V4.1 index keys): the act_quant_e2m1 rule,
/// s = 2^ceil(log2(max(amax, 6·2^-126)/6)). Returns the UE8M0 code (exact: s is a power of two in range).
inline uint8_t fp4_e8m0_scale_code(float amax) noexcept {
  const float a = std::max(amax, e2m1_amax_floor);
  return ue8m0::encode(pow2_ceil(a / 6.0f));
}

/// FP4 (E2M1) block fake-quant with E4M3 scales in place (V4.1 compressed KV: block 16, spec §4.2/§8):
///   s = fp4_e4m3_scale_code(amax) decoded;  x ← e2m1_RNE(clamp(x/s, ±6)) · s   (x/s: f32 division).
/// A ragged last block uses its own amax. Bit-identical to decoding cmfx::kv_main_row (include/cmfx/kv/packed_kv.hpp).
inline void act_quant_e2m1_e4m3(std::span<float> x, uint32_t block = 16) {
  if (block == 0) throw std::invalid_argument("fake quant: block must be > 0");
  const size_t n = x.size();
  for (size_t b = 0; b < n; b += block) {
    float* p = x.data() + b;
    const size_t len = std::min<size_t>(block, n - b);
    float amax = 0.0f;
    for (size_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(p[i]));
    const float s = e4m3::decode(fp4_e4m3_scale_code(amax));
    for (size_t i = 0; i < len; ++i) {
      const float q = std::clamp(p[i] / s, -6.0f, 6.0f);
      p[i] = e2m1::decode(e2m1::encode(q)) * s;
    }
  }
}

}  // namespace cmfx

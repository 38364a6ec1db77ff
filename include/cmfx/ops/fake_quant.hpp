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
  ops_detail::fake_quant_blocks<e4m3>(x, block, 448.0f, 1e-4f);
}

/// FP4 (E2M1) block fake-quant in place (V4 indexer, block 32).
inline void act_quant_e2m1(std::span<float> x, uint32_t block = 32) {
  ops_detail::fake_quant_blocks<e2m1>(x, block, 6.0f, 6.0f * 0x1p-126f);
}

}  // namespace cmfx

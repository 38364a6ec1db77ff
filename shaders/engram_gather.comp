#version 460
#extension GL_GOOGLE_include_directive : require
// V4.1 Engram table gather (include/cmfx/model/engram.hpp engram_gather / engram_decode_row), one invocation per
// output value: E[t, col·hd + j] = bf16(e4m3(row[j]) · 2^(k − bias)) of table row ids[t, col], k the UE8M0 scale of
// the row's block j / sb. The E4M3 value comes from the host table (tabf, TAB_E4M3: the C++ trait's decode of every
// code); the UE8M0 bias / NaN code and the bf16 mantissa width are #defines from the C++ traits (kernels_v41.cpp).
// The product is built from bits, exactly as the CPU computes it: an e4m3 value has ≤ 4 significant bits, so
// v·2^(k−bias) is exact unless it falls below 2^−126, where the CPU's f32 product rounds to a subnormal (RNE) and
// the bf16 cast rounds that again (RNE, multiples of 2^−133): the same two roundings here, with integers (no
// subnormal float ever enters an arithmetic instruction, so a flushing device agrees). A token with any row id
// outside [0, rows) gets NaN over its whole E row (the CPU throws).
#include "common/base.glsl"

layout(push_constant) uniform eg_pc {
  uint tokens, cols, hd, sb;  // hd = head_dim, sb = scale_block (divides hd)
  uint rows;                  // table rows
  uint doff, soff;            // byte offsets of the payload / scales inside bindings 0 / 1
  uint ioff, eoff;            // word offsets of the row ids / E inside bindings 2 / 3
  uint pad0, pad1, pad2;
} pc;
layout(std430, binding = 0) readonly buffer D { uint dw[]; };
layout(std430, binding = 1) readonly buffer S { uint sw[]; };
layout(std430, binding = 2) readonly buffer I { int ids[]; };
layout(std430, binding = 3) writeonly buffer E { float es[]; };
layout(std430, binding = 4) readonly buffer TABF { float tabf[]; };

uint d_byte(uint b) { return (dw[b >> 2] >> ((b & 3u) << 3)) & 0xFFu; }
uint s_byte(uint b) { return (sw[b >> 2] >> ((b & 3u) << 3)) & 0xFFu; }

// m >> sh rounded to nearest, ties to even (sh ≥ 1).
uint rne_shift(uint m, uint sh) {
  if (sh >= 31u) return 0u;  // m < 2^24
  const uint q = m >> sh, rem = m & ((1u << sh) - 1u), half_ = 1u << (sh - 1u);
  return q + ((rem > half_ || (rem == half_ && (q & 1u) != 0u)) ? 1u : 0u);
}

// bf16(f32(v · 2^(k − bias))) for v an E4M3 value (zero, NaN or a normal f32).
float scaled_bf16(float v, uint k) {
  if (k == UE8M0_NAN_CODE) return uintBitsToFloat(0x7FC00000u);
  const uint b = floatBitsToUint(v), sgn = b & 0x80000000u, mag = b & 0x7FFFFFFFu;
  if (mag == 0u || mag >= 0x7F800000u) return v;  // ±0 stays ±0; NaN stays NaN
  const int e = int(mag >> 23) + int(k) - UE8M0_BIAS;  // biased f32 exponent of the product
  if (e >= 255) return uintBitsToFloat(sgn | 0x7F800000u);
  if (e >= 1) return uintBitsToFloat(sgn | (uint(e) << 23) | (mag & 0x7FFFFFu));
  // value = m · 2^(e − 150): f32 subnormal f = RNE(m · 2^(e − 1)) units of 2^−149, then bf16 keeps the top
  // BF16_MAN_BITS of the 23 mantissa bits (RNE again; f = 2^23 after rounding is 2^−126, handled alike).
  const uint m = (mag & 0x7FFFFFu) | 0x800000u;
  const uint f = rne_shift(m, uint(1 - e));
  const uint q = rne_shift(f, 23u - BF16_MAN_BITS);
  return uintBitsToFloat(sgn | (q << (23u - BF16_MAN_BITS)));
}

void main() {
  const uint g = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  const uint per = pc.cols * pc.hd;
  if (g >= pc.tokens * per) return;
  const uint t = g / per, c = (g % per) / pc.hd, j = g % pc.hd;
  bool bad = false;
  for (uint i = 0u; i < pc.cols; ++i) {
    const int r = ids[pc.ioff + t * pc.cols + i];
    bad = bad || r < 0 || uint(r) >= pc.rows;
  }
  float v = uintBitsToFloat(0x7FC00000u);
  if (!bad) {
    const uint r = uint(ids[pc.ioff + t * pc.cols + c]);
    const uint code = d_byte(pc.doff + r * pc.hd + j);
    const uint k = s_byte(pc.soff + r * (pc.hd / pc.sb) + j / pc.sb);
    v = scaled_bf16(tabf[TAB_E4M3 + code], k);
  }
  es[pc.eoff + g] = v;
}

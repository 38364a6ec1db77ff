#version 460
#extension GL_GOOGLE_include_directive : require
// Activation fake-quant in place (ops/fake_quant.hpp), per row of n floats in blocks of `block` (a ragged last
// block uses its own amax). Per block:
//   amax  = max(max|x|, FQ_AMAX_FLOOR) (NaN ignored, as std::max);
//   scale = 2^e with e the smallest integer such that amax ≤ FQ_FMAX·2^e — exactly ceil(log2(f32(amax/FQ_FMAX)))
//           for every f32 amax (RN(a/f) ≤ 2^e ⇔ a ≤ f·2^e, since a step of one ulp in a moves a/f by more than
//           half an ulp of 2^e), found with exact products only: no dependence on the device's f32 division;
//   x     = round(clamp(x·2^−e, ±FQ_FMAX)) · 2^e, round = nearest value of the format, ties to the even code:
//           roundEven(|q|/u)·u with u = 2^(max(⌊log2|q|⌋, FQ_MIN_EXP) − FQ_MAN_BITS), the spacing of the values
//           around q (exact: every step is a power-of-two scaling or an integer rounding).
// FQ_E4M3_SCALE = 1 (act_quant_e2m1_e4m3, V4.1 compressed KV): the block scale is an E4M3 value instead,
//   s = e4m3_RNE(f32(max(amax, FQ_AMAX_FLOOR) / FQ_FMAX)) saturated at SC_MAX, and q = f32(x / s) — both f32
//   quotients correctly rounded whatever the device's division does (div_rn: the candidate within ±3 ulp of
//   x / s with the smallest exact fma residual; a quotient by an E4M3 value is never an exact f32 tie), then
//   x ← e2m1_RNE(clamp(q, ±FQ_FMAX)) · s (exact: ≤ 6 significant bits).
// The workgroup covers whole blocks of one row (bpw of them). Defines from the format traits (exmy.hpp) and
// fake_quant.hpp: FQ_FMAX, FQ_AMAX_FLOOR, FQ_MAN_BITS, FQ_MIN_EXP (values), FQ_E4M3_SCALE, and with it
// SC_MAN_BITS, SC_MIN_EXP, SC_MAX (the scale's format).
#include "common/base.glsl"

layout(push_constant) uniform fq_pc {
  uint rows, n, block, nb;  // nb: blocks per row
  uint bpw, groups, xoff, pad;  // blocks per workgroup, workgroups per row
} pc;
layout(std430, binding = 0) buffer X { float xs[]; };

shared uint amax_bits[WG_SIZE];
shared int blk_exp[WG_SIZE];
shared float blk_scale[WG_SIZE];

float pow2(int e) { return uintBitsToFloat(uint(e + 127) << 23); }  // 2^e, e in [−126, 127]

// Nearest value of a format with man_bits mantissa bits and smallest normal exponent min_exp, ties to even.
float round_to(float q, int man_bits, int min_exp) {
  const float a = abs(q);
  if (!(a > 0.0) || isnan(q)) return q;  // ±0 (sign kept), NaN
  const int ea = int((floatBitsToUint(a) >> 23) & 0xFFu) - 127;  // ⌊log2 a⌋ for normal a (subnormal: < min)
  const int e = max(ea, min_exp) - man_bits;
  const float r = roundEven(a * pow2(-e)) * pow2(e);
  return q < 0.0 ? -r : r;
}
float round_to_format(float q) { return round_to(q, FQ_MAN_BITS, FQ_MIN_EXP); }

#if FQ_E4M3_SCALE
// f32(x / s) correctly rounded, x ≥ 0 finite, s > 0 normal.
float div_rn(float x, float s) {
  precise const float q0 = x / s;
  if (!(x > 0.0) || isinf(q0)) return q0;
  const int b = int(floatBitsToUint(q0));
  float best = q0;
  precise float rb = abs(fma(-q0, s, x));
  for (int k = -3; k <= 3; ++k) {
    if (k == 0 || b + k < 0) continue;
    const float qk = uintBitsToFloat(uint(b + k));
    precise const float r = abs(fma(-qk, s, x));
    if (r < rb) {
      rb = r;
      best = qk;
    }
  }
  return best;
}
#endif

void main() {
  const uint g = wg_index();
  if (g >= pc.rows * pc.groups) return;  // uniform over the workgroup
  const uint row = g / pc.groups, b0 = (g % pc.groups) * pc.bpw, lid = gl_LocalInvocationID.x;
  const uint nbl = min(pc.bpw, pc.nb - b0);  // blocks of this workgroup
  const uint base = pc.xoff + row * pc.n;
  if (lid < nbl) amax_bits[lid] = 0u;
  barrier();
  for (uint f = lid; f < nbl * pc.block; f += WG_SIZE) {
    const uint b = b0 + f / pc.block, c = b * pc.block + f % pc.block;
    if (c < pc.n) {
      const float v = abs(xs[base + c]);
      if (!isnan(v)) atomicMax(amax_bits[f / pc.block], floatBitsToUint(v));  // |x| bits order as values
    }
  }
  barrier();
  if (lid < nbl) {
    float amax = uintBitsToFloat(amax_bits[lid]);
    amax = amax < FQ_AMAX_FLOOR ? FQ_AMAX_FLOOR : amax;
#if FQ_E4M3_SCALE
    blk_scale[lid] = min(round_to(div_rn(amax, FQ_FMAX), SC_MAN_BITS, SC_MIN_EXP), SC_MAX);
#endif
    int e = int(ceil(log2(amax / FQ_FMAX)));  // a guess, corrected exactly below
    e = clamp(e, -126, 127);
    while (e < 127 && amax > FQ_FMAX * pow2(e)) ++e;
    while (e > -126 && amax <= FQ_FMAX * pow2(e - 1)) --e;
    blk_exp[lid] = e;
  }
  barrier();
  for (uint f = lid; f < nbl * pc.block; f += WG_SIZE) {
    const uint b = b0 + f / pc.block, c = b * pc.block + f % pc.block;
    if (c < pc.n) {
#if FQ_E4M3_SCALE
      const float sc = blk_scale[f / pc.block], x = xs[base + c];
      float q = x < 0.0 ? -div_rn(-x, sc) : div_rn(x, sc);
      q = q < -FQ_FMAX ? -FQ_FMAX : (FQ_FMAX < q ? FQ_FMAX : q);
      xs[base + c] = round_to_format(q) * sc;
#else
      const int e = blk_exp[f / pc.block];
      float q = xs[base + c] * pow2(-e);
      q = q < -FQ_FMAX ? -FQ_FMAX : (FQ_FMAX < q ? FQ_FMAX : q);
      xs[base + c] = round_to_format(q) * pow2(e);
#endif
    }
  }
}

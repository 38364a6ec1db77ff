#version 460
#extension GL_GOOGLE_include_directive : require
// V4.1 Engram gate and add (include/cmfx/model/engram.hpp engram_gate_add), one workgroup per (token, copy c):
//   rstd = 1/sqrt(Σx²/d + eps) / sqrt(Σk²/d + eps), dot = Σ x·qk·k · rstd / sqrt(d),
//   z = copysign(sqrt(max(|dot|, clamp)), dot), g = 1/(1 + e^−z), then X_c[i] += g·value[i] in f32.
// Sums, rstd, z and the sigmoid in ACC (f64 with exp_f64 when the device has f64, as the CPU; f32 otherwise).
// X [tokens, hc, d] in place; kv [tokens, (hc+1)·d] (key copies, then value: the wkv output); qk [hc·d].
// An image token (img[t] != 0) keeps X and gets gate 0. gates [tokens, hc] (optional) receive g.
#include "common/base.glsl"
#include "common/reduce.glsl"
#if ACC_DOUBLE
#include "common/f64math.glsl"
#endif

layout(push_constant) uniform eg_pc {
  uint tokens, hc, d;
  uint xoff, kvoff, qkoff, ioff, goff;  // word offsets inside bindings 0..4
  uint has_img, has_gates;
  float eps, clamp_;
} pc;
layout(std430, binding = 0) buffer X { float xs[]; };
layout(std430, binding = 1) readonly buffer KV { float kv[]; };
layout(std430, binding = 2) readonly buffer QK { float qk[]; };
layout(std430, binding = 3) readonly buffer IMG { uint img[]; };
layout(std430, binding = 4) writeonly buffer G { float gs[]; };

bool sign_bit(ACC v) {
#if ACC_DOUBLE
  return (unpackDouble2x32(v).y & 0x80000000u) != 0u;
#else
  return (floatBitsToUint(v) & 0x80000000u) != 0u;
#endif
}

void main() {
  const uint w = wg_index();
  if (w >= pc.tokens * pc.hc) return;  // uniform over the workgroup
  const uint t = w / pc.hc, c = w % pc.hc, lid = gl_LocalInvocationID.x;
  if (pc.has_img != 0u && img[pc.ioff + t] != 0u) {  // uniform
    if (lid == 0u && pc.has_gates != 0u) gs[pc.goff + w] = 0.0;
    return;
  }
  const uint xb = pc.xoff + w * pc.d, row = pc.kvoff + t * (pc.hc + 1u) * pc.d;
  const uint kb = row + c * pc.d, vb = row + pc.hc * pc.d, qb = pc.qkoff + c * pc.d;
  ACC sx = ACC(0), sk = ACC(0), dt = ACC(0);
  for (uint i = lid; i < pc.d; i += WG_SIZE) {
    const ACC x = ACC(xs[xb + i]), k = ACC(kv[kb + i]);
    sx += x * x;
    sk += k * k;
    dt += x * ACC(qk[qb + i]) * k;
  }
  sx = wg_sum(sx);
  sk = wg_sum(sk);
  dt = wg_sum(dt);
  const ACC D = ACC(pc.d), eps = ACC(pc.eps);
  const ACC rstd = ACC(1) / sqrt(sx / D + eps) / sqrt(sk / D + eps);
  dt *= rstd / sqrt(D);
  const ACC a = sqrt(max(abs(dt), ACC(pc.clamp_)));
  const ACC z = sign_bit(dt) ? -a : a;
#if ACC_DOUBLE
  const float g = float(1.0LF / (1.0LF + exp_f64(-z)));
#else
  const float g = 1.0 / (1.0 + exp(-z));
#endif
  if (lid == 0u && pc.has_gates != 0u) gs[pc.goff + w] = g;
  for (uint i = lid; i < pc.d; i += WG_SIZE) {
    precise float y = g * kv[vb + i];
    xs[xb + i] += y;
  }
}

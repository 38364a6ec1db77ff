#version 460
#extension GL_GOOGLE_include_directive : require
// Quantises activations X [n, cols] (cols % 32 == 0) to the int8 blocks of common/act_q8.glsl, packed for the
// integer-dot matvec of one weight format. One invocation per block of 32 values — or, with ACT_WIDE = 1
// (kernels::quantize_act), 32 invocations per block, one value each: coalesced loads and a short chain (the block's
// maximum by a butterfly, each value's rounding, the packed words gathered by 8 invocations) instead of one
// invocation's 32 loads and roundings in a row — the same operations on the same values, so the same bits
// (common/act_q8_wide.glsl, its ACT_WIDE_SG variant there).
// ACT_SWIGLU = 1 (kernels::moe's batch-1 int8 path): the values are not read but formed, moe_act.comp's h of pair
// p = t·KS + s from its gate/up row gu [n, 2·cols] and routing weight (common/swiglu.glsl), so the SwiGLU and
// the quantisation of h are one dispatch; the f32 h is never stored. Defines then: MOE_TOPK, MOE_SHARED, MOE_LIMIT.
#include "common/base.glsl"
#include "common/act_q8.glsl"
#ifndef ACT_WIDE
#define ACT_WIDE 0
#endif
#ifndef ACT_SWIGLU
#define ACT_SWIGLU 0
#endif

layout(std430, binding = 0) readonly buffer X { float xs[]; };
layout(std430, binding = 1) writeonly buffer QW { uint qw[]; };
layout(std430, binding = 1) writeonly buffer QF { float qf[]; };
layout(std430, binding = 1) writeonly buffer QI { int qi[]; };
layout(push_constant) uniform pcs {
  uint n, blocks;  // tokens (ACT_SWIGLU: pairs), blocks per token
  uint xoff;       // float offset of x (ACT_SWIGLU: of gu) in binding 0
  uint ooff;       // word offset of the output in binding 1
#if ACT_SWIGLU
  uint woff;       // float offset of the routing weights in binding 2
#endif
} pc;

#if ACT_SWIGLU
#include "common/swiglu.glsl"
layout(std430, binding = 2) readonly buffer Wr { float wr[]; };
#define KS (MOE_TOPK + MOE_SHARED)
float value(uint p, uint c) {
  const uint I = pc.blocks * 32u, s = p % KS, g = pc.xoff + p * 2u * I + c;
  return swiglu_clamped(xs[g], xs[g + I], MOE_LIMIT, s < MOE_TOPK ? wr[pc.woff + (p / KS) * MOE_TOPK + s] : 1.0);
}
#else
float value(uint t, uint c) { return xs[pc.xoff + t * pc.blocks * 32u + c]; }
#endif

#if ACT_WIDE
#if ACT_SWIGLU
#error "ACT_WIDE: the plain quantisation only"
#endif
#include "common/act_q8_wide.glsl"
// Block g = wg_index() · (WG_SIZE / 32) + lid / 32, value lid % 32 of it.
void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint g = wg_index() * (WG_SIZE / 32u) + lid / 32u;
  const bool live = g < pc.n * pc.blocks;  // not uniform: no return before act_q8_wide's barriers
  const uint t = live ? g / pc.blocks : 0u, b = live ? g % pc.blocks : 0u;
  act_q8_wide(live ? value(t, b * 32u + lid % 32u) : 0.0, live, pc.ooff + t * ACT_VEC_WORDS(pc.blocks), b, pc.blocks);
}
#else
void main() {
  const uint gid = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  if (gid >= pc.n * pc.blocks) return;
  const uint t = gid / pc.blocks, b = gid % pc.blocks, c0 = b * 32u;
  float v[32];
  [[unroll]] for (uint i = 0u; i < 32u; ++i) v[i] = value(t, c0 + i);
  const act_block q = act_q8_block(v);
  const uint base = pc.ooff + t * ACT_VEC_WORDS(pc.blocks);
  [[unroll]] for (uint s = 0u; s < 8u; ++s) qw[base + 8u * b + s] = q.w[s];
  qf[base + ACT_SCALE_WORD(pc.blocks) + b] = q.half_sx;
  qi[base + ACT_BSUM_WORD(pc.blocks) + b] = q.bsum2;
}
#endif

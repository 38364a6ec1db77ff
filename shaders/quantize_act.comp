#version 460
#extension GL_GOOGLE_include_directive : require
// Quantises activations X [n, cols] (cols % 32 == 0) to the int8 blocks of common/act_q8.glsl, packed for the
// integer-dot matvec of one weight format. One invocation per block of 32 values.
// ACT_SWIGLU = 1 (kernels::moe's batch-1 int8 path): the values are not read but formed, moe_act.comp's h of pair
// p = t·KS + s from its gate/up row gu [n, 2·cols] and routing weight (common/swiglu.glsl), so the SwiGLU and
// the quantisation of h are one dispatch; the f32 h is never stored. Defines then: MOE_TOPK, MOE_SHARED, MOE_LIMIT.
#include "common/base.glsl"
#include "common/act_q8.glsl"
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

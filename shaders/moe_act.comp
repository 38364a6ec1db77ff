#version 460
#extension GL_GOOGLE_include_directive : require
// MoE between the gate/up and the down products of the int8 batch-1 path and of the expert-grouped GEMM path
// (kernels::moe, kernels_moe.cpp): per token t < n and slot s (MOE_TOPK routed + MOE_SHARED shared), pair
// p = t·KS + s: h[p, i] = silu(min(g, L)) · clamp(u, −L, L) · w with g = gu[p, i], u = gu[p, I + i] and w the
// routing weight w[t, s] (1 for the shared expert) — moe_up.comp's arithmetic, in its order.
#include "common/base.glsl"
#include "common/swiglu.glsl"

layout(push_constant) uniform ma_pc {
  uint inter, guoff, hoff, woff, n;
} pc;
layout(std430, binding = 0) readonly buffer GU { float gu[]; };
layout(std430, binding = 1) readonly buffer Wr { float wr[]; };
layout(std430, binding = 2) writeonly buffer H { float hs[]; };

void main() {
  const uint KS = MOE_TOPK + MOE_SHARED, I = pc.inter, total = pc.n * KS * I;
  const uint i = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  if (i >= total) return;
  const uint p = i / I, c = i % I, s = p % KS, t = p / KS;
  const float gv = gu[pc.guoff + p * 2u * I + c], uv = gu[pc.guoff + p * 2u * I + I + c];
  hs[pc.hoff + i] = swiglu_clamped(gv, uv, MOE_LIMIT, s < MOE_TOPK ? wr[pc.woff + t * MOE_TOPK + s] : 1.0);
}

#version 460
#extension GL_GOOGLE_include_directive : require
// Batch-1 MoE, between the two expert-indirect row-kernel passes (kernels::moe, kernels_moe.cpp): per slot s
// (MOE_TOPK routed + MOE_SHARED shared), h[s, i] = silu(min(g, L)) · clamp(u, −L, L) · w_s with g = gu[s, i],
// u = gu[s, I + i] and w_s the routing weight (1 for the shared expert) — moe_up.comp's arithmetic, in its order.
#include "common/base.glsl"

layout(push_constant) uniform ma_pc {
  uint inter, guoff, hoff, woff;
} pc;
layout(std430, binding = 0) readonly buffer GU { float gu[]; };
layout(std430, binding = 1) readonly buffer Wr { float wr[]; };
layout(std430, binding = 2) writeonly buffer H { float hs[]; };

void main() {
  const uint I = pc.inter, total = (MOE_TOPK + MOE_SHARED) * I;
  const uint i = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  if (i >= total) return;
  const uint s = i / I, c = i % I;
  const float gv = gu[pc.guoff + s * 2u * I + c], uv = gu[pc.guoff + s * 2u * I + I + c];
  const float L = MOE_LIMIT;
  const float gc = L < gv ? L : gv;                   // std::min(g, limit)
  const float vc = uv < -L ? -L : (L < uv ? L : uv);  // std::clamp(u, −limit, limit)
  const float silu = gc / (1.0 + exp(-gc));
  hs[pc.hoff + i] = silu * vc * (s < MOE_TOPK ? wr[pc.woff + s] : 1.0);
}

#version 460
#extension GL_GOOGLE_include_directive : require
// Clamped SwiGLU (ops/routing.hpp swiglu_clamp): out = silu(min(g, L)) · clamp(v, −L, L) · weight in f32, in
// that order; L <= 0 disables the clamp. Comparisons written as the CPU's std::min / std::clamp (NaN passes).
#include "common/base.glsl"
#include "common/swiglu.glsl"

layout(push_constant) uniform sw_pc {
  uint n, goff, voff, ooff;
  float limit, weight;
  uint pad0, pad1;
} pc;
layout(std430, binding = 0) readonly buffer G { float gs[]; };
layout(std430, binding = 1) readonly buffer V { float vs[]; };
layout(std430, binding = 2) writeonly buffer O { float os[]; };

void main() {
  const uint total = gl_NumWorkGroups.x * gl_NumWorkGroups.y * WG_SIZE;
  for (uint i = wg_index() * WG_SIZE + gl_LocalInvocationID.x; i < pc.n; i += total) {
    const float g = gs[pc.goff + i], v = vs[pc.voff + i];
    os[pc.ooff + i] = pc.limit > 0.0 ? swiglu_clamped(g, v, pc.limit, pc.weight) : g / (1.0 + exp(-g)) * v * pc.weight;
  }
}

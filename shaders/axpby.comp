#version 460
#extension GL_GOOGLE_include_directive : require
// y[i] = alpha · x[i] + beta · y[i] in f32 (kernels::add: alpha = beta = 1, an exact x + y; kernels::scale:
// alpha = 0 and x bound to y's own range, so y = beta · y except that 0·NaN keeps a NaN a NaN).
#include "common/base.glsl"

layout(push_constant) uniform ax_pc {
  uint n, xoff, yoff, pad0;
  float alpha, beta;
  uint pad1, pad2;
} pc;
layout(std430, binding = 0) readonly buffer X { float xs[]; };
layout(std430, binding = 1) buffer Y { float ys[]; };

void main() {
  const uint total = gl_NumWorkGroups.x * gl_NumWorkGroups.y * WG_SIZE;
  for (uint i = wg_index() * WG_SIZE + gl_LocalInvocationID.x; i < pc.n; i += total) {
    const float x = xs[pc.xoff + i];
    const float y = ys[pc.yoff + i];
    ys[pc.yoff + i] = pc.alpha == 1.0 && pc.beta == 1.0 ? x + y : pc.alpha * x + pc.beta * y;
  }
}

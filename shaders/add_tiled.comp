#version 460
#extension GL_GOOGLE_include_directive : require
// y[t, c] += x[(first + t) % period, c] for t < rows, c < n (kernels::add_tiled): a per-position table (e.g. a
// compressor's ape, one row per position inside its window) added to `rows` consecutive positions. Exact f32 adds.
#include "common/base.glsl"

layout(push_constant) uniform at_pc {
  uint rows, n, period, first, xoff, yoff;
} pc;
layout(std430, binding = 0) readonly buffer X { float xs[]; };
layout(std430, binding = 1) buffer Y { float ys[]; };

void main() {
  const uint i = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  if (i >= pc.rows * pc.n) return;
  const uint t = i / pc.n, c = i % pc.n;
  ys[pc.yoff + i] = xs[pc.xoff + ((pc.first + t) % pc.period) * pc.n + c] + ys[pc.yoff + i];
}

#version 460
#extension GL_GOOGLE_include_directive : require
// Top-1 of long rows (kernels::topk with k = 1), the tie rule of topk.comp / ops/topk.hpp: the largest composite
// (K(value), ~index) — NaN counts as −inf, −0 as +0, equal values go to the lower index. Two dispatches:
//   ARGMAX_PASS 1: workgroup (row, g) reduces its chunk of `chunk` values to one composite → part[row·groups + g];
//   ARGMAX_PASS 2: one workgroup per row reduces the row's `groups` composites and writes the index.
#include "common/base.glsl"

layout(push_constant) uniform am_pc {
  uint rows, n, groups, chunk;
  uint xoff, ooff, x_stride, o_stride;
} pc;
layout(std430, binding = 0) readonly buffer S { float sc[]; };
layout(std430, binding = 1) buffer P { uvec2 part[]; };
layout(std430, binding = 2) writeonly buffer O { uint oi[]; };

shared uvec2 red[WG_SIZE];

uint key_of(float v) {
  uint u = isnan(v) ? 0xFF800000u : floatBitsToUint(v);
  if ((u & 0x7FFFFFFFu) == 0u) u = 0u;
  return (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
}

bool greater(uvec2 a, uvec2 b) { return a.x > b.x || (a.x == b.x && a.y > b.y); }

void main() {
  const uint lid = gl_LocalInvocationID.x;
#if ARGMAX_PASS == 1
  const uint g = wg_index();
  if (g >= pc.rows * pc.groups) return;  // uniform over the workgroup
  const uint row = g / pc.groups, part_i = g % pc.groups;
  const uint b0 = part_i * pc.chunk, b1 = min(pc.n, b0 + pc.chunk);
  uvec2 best = uvec2(0u, 0u);  // below every real composite (K(−inf) = 0x007FFFFF)
  for (uint i = b0 + lid; i < b1; i += WG_SIZE) {
    const uvec2 c = uvec2(key_of(sc[pc.xoff + row * pc.x_stride + i]), ~i);
    if (greater(c, best)) best = c;
  }
#else
  const uint row = wg_index();
  if (row >= pc.rows) return;
  uvec2 best = uvec2(0u, 0u);
  for (uint i = lid; i < pc.groups; i += WG_SIZE) {
    const uvec2 c = part[row * pc.groups + i];
    if (greater(c, best)) best = c;
  }
#endif
  red[lid] = best;
  barrier();
  for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1u) {
    if (lid < s && greater(red[lid + s], red[lid])) red[lid] = red[lid + s];
    barrier();
  }
  if (lid == 0u) {
#if ARGMAX_PASS == 1
    part[row * pc.groups + part_i] = red[0];
#else
    oi[pc.ooff + row * pc.o_stride] = red[0].x == 0u ? 0xFFFFFFFFu : ~red[0].y;
#endif
  }
}

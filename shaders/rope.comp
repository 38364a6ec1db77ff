#version 460
#extension GL_GOOGLE_include_directive : require
// RoPE in place (ops/rope.hpp): adjacent pairs (x[2i], x[2i+1]) of the LAST rope_dim channels of every head,
// rotated by the precomputed cos/sin of the row's position: cs[row][2i] = cos, cs[row][2i+1] = sin
// (rope_table::rotation). inverse = conjugate rotation. One invocation per pair.
#include "common/base.glsl"
#include "common/rope.glsl"

layout(push_constant) uniform rope_pc {
  uint rows, heads, head_dim, rope_dim, xoff, csoff, inverse, pad;
} pc;
layout(std430, binding = 0) buffer X { float xs[]; };
layout(std430, binding = 1) readonly buffer CS { float cs[]; };

void main() {
  const uint pairs = pc.rope_dim / 2u;
  const uint id = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  if (id >= pc.rows * pc.heads * pairs) return;
  const uint i = id % pairs, h = (id / pairs) % pc.heads, row = id / (pairs * pc.heads);
  const uint b = pc.xoff + (row * pc.heads + h) * pc.head_dim + (pc.head_dim - pc.rope_dim) + 2u * i;
  const float c = cs[pc.csoff + row * pc.rope_dim + 2u * i];
  const float s0 = cs[pc.csoff + row * pc.rope_dim + 2u * i + 1u];
  const float s = pc.inverse != 0u ? -s0 : s0;
  const vec2 r = rope_pair(xs[b], xs[b + 1u], c, s);
  xs[b] = r.x;
  xs[b + 1u] = r.y;
}

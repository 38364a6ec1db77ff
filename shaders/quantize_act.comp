#version 460
#extension GL_GOOGLE_include_directive : require
// Quantises activations X [n, cols] (cols % 32 == 0) to the int8 blocks of common/act_q8.glsl, packed for the
// integer-dot matvec of one weight format. One invocation per block of 32 values.
#include "common/base.glsl"
#include "common/act_q8.glsl"

layout(std430, binding = 0) readonly buffer X { float xs[]; };
layout(std430, binding = 1) writeonly buffer QW { uint qw[]; };
layout(std430, binding = 1) writeonly buffer QF { float qf[]; };
layout(std430, binding = 1) writeonly buffer QI { int qi[]; };
layout(push_constant) uniform pcs {
  uint n, blocks;  // tokens, blocks per token
  uint xoff;       // float offset of x in binding 0
  uint ooff;       // word offset of the output in binding 1
} pc;

void main() {
  const uint gid = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  if (gid >= pc.n * pc.blocks) return;
  const uint t = gid / pc.blocks, b = gid % pc.blocks;
  const uint x0 = pc.xoff + (t * pc.blocks + b) * 32u;
  float amax = 0.0;
  [[unroll]] for (uint i = 0u; i < 32u; ++i) amax = max(amax, abs(xs[x0 + i]));
  const float sx = amax > 0.0 ? amax / 127.0 : 1.0, inv = 1.0 / sx;
  const uint base = pc.ooff + t * ACT_WORDS_PER_BLOCK * pc.blocks;
  int sum = 0;
  [[unroll]] for (uint s = 0u; s < 8u; ++s) {
    uint w = 0u;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      const int q = int(clamp(roundEven(xs[x0 + act_plane_elem(s, i)] * inv), -127.0, 127.0));
      sum += q;
      w |= (uint(q) & 0xFFu) << (8u * i);
    }
    qw[base + 8u * b + s] = w;
  }
  qf[base + ACT_SCALE_WORD(pc.blocks) + b] = 0.5 * sx;
  qi[base + ACT_BSUM_WORD(pc.blocks) + b] = ACT_OFF2 * sum;
}

#version 460
#extension GL_GOOGLE_include_directive : require
// idx[t·stride + offset + j] = picks[t, j] when picks[t, j] < counts[t], else −1 (kernels::pick_keys): a top-k of
// an indexer's scores over n entries, of which row t may use only its first counts[t] (the entries finished at its
// position), turned into that row's slots of an attention key list.
#include "common/base.glsl"

layout(push_constant) uniform pk_pc {
  uint rows, k, stride, offset, poff, coff, ioff, pad;
} pc;
layout(std430, binding = 0) readonly buffer P { uint picks[]; };
layout(std430, binding = 1) readonly buffer C { uint counts[]; };
layout(std430, binding = 2) writeonly buffer I { uint idx[]; };

void main() {
  const uint i = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  if (i >= pc.rows * pc.k) return;
  const uint t = i / pc.k, j = i % pc.k, p = picks[pc.poff + i];
  idx[pc.ioff + t * pc.stride + pc.offset + j] = p < counts[pc.coff + t] ? p : 0xFFFFFFFFu;
}

#version 460
#extension GL_GOOGLE_include_directive : require
// Streaming read of a whole buffer (the bandwidth roofline of cmfx-bench-vk): every invocation XORs 16-byte
// words in a grid-stride loop and writes only if the result is a magic value (so the loads cannot be removed).
#include "common/base.glsl"

layout(push_constant) uniform sr_pc {
  uint words, pad0, pad1, pad2;
} pc;
layout(std430, binding = 0) readonly buffer SRC { uvec4 src[]; };
layout(std430, binding = 1) writeonly buffer SINK { uint sink[]; };

void main() {
  const uint total = gl_NumWorkGroups.x * gl_NumWorkGroups.y * WG_SIZE;
  uvec4 a = uvec4(0u), b = uvec4(0u), c = uvec4(0u), d = uvec4(0u);
  uint i = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  for (; i + 3u * total < pc.words; i += 4u * total) {  // four independent loads in flight per invocation
    a ^= src[i];
    b ^= src[i + total];
    c ^= src[i + 2u * total];
    d ^= src[i + 3u * total];
  }
  for (; i < pc.words; i += total) a ^= src[i];
  a ^= b ^ c ^ d;
  if (a.x == 0x9E3779B9u && a.y == 0x7F4A7C15u && a.z == 0x85EBCA6Bu) sink[0] = a.w;
}

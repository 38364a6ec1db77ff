#version 460
#extension GL_GOOGLE_include_directive : require
// In-place Walsh–Hadamard transform of one row per workgroup (ops/hadamard.hpp): radix-2 butterflies
// (a, b) → (a + b, a − b) in f32 with strides 1, 2, 4, …, the same operations in the same order as the CPU (so
// bit-exact), then x · scale. The row lives in shared memory. Defines: HAD_MAX (row capacity).
#include "common/base.glsl"

layout(push_constant) uniform had_pc {
  uint rows, n, xoff;
  float scale;
} pc;
layout(std430, binding = 0) buffer X { float xs[]; };

shared float v[HAD_MAX];

void main() {
  const uint row = wg_index();
  if (row >= pc.rows) return;  // uniform over the workgroup
  const uint lid = gl_LocalInvocationID.x, n = pc.n, base = pc.xoff + row * n;
  for (uint i = lid; i < n; i += WG_SIZE) v[i] = xs[base + i];
  barrier();
  for (uint h = 1u; h < n; h <<= 1) {
    for (uint p = lid; p < n / 2u; p += WG_SIZE) {
      const uint i = (p / h) * 2u * h + p % h;
      const float a = v[i], b = v[i + h];
      precise float s = a + b, t = a - b;
      v[i] = s;
      v[i + h] = t;
    }
    barrier();
  }
  for (uint i = lid; i < n; i += WG_SIZE) {
    precise float y = v[i] * pc.scale;
    xs[base + i] = y;
  }
}

#version 460
#extension GL_GOOGLE_include_directive : require
// Softmax with an attention sink (ops/softmax.hpp attend_sink), one workgroup per row:
//   p_k = e^(l_k − m) / (Σ_k e^(l_k − m) + e^(sink − m)),  m = max(max_k l_k, sink)
// Masked keys (−inf) give 0; a row with nothing finite gives all 0. sink_count 0 = no sink. p may be the same
// memory as l (each invocation reads l_k before it writes p_k).
#include "common/base.glsl"
#include "common/reduce.glsl"

layout(push_constant) uniform sm_pc {
  uint rows, n, sink_count, loff, soff, poff, pad0, pad1;
} pc;
layout(std430, binding = 0) buffer L { float ls[]; };
layout(std430, binding = 1) readonly buffer S { float sinks[]; };
layout(std430, binding = 2) buffer P { float ps[]; };

void main() {
  const uint row = wg_index();
  if (row >= pc.rows) return;  // uniform over the workgroup
  const uint lid = gl_LocalInvocationID.x, lb = pc.loff + row * pc.n, pb = pc.poff + row * pc.n;
  const float sink = pc.sink_count != 0u ? sinks[pc.soff + row % pc.sink_count] : -F32_INF;
  float m = sink;
  for (uint k = lid; k < pc.n; k += WG_SIZE) m = nan_free_max(ls[lb + k], m);
  m = wg_max(m);
  if (!(m > -F32_INF)) {
    for (uint k = lid; k < pc.n; k += WG_SIZE) ps[pb + k] = 0.0;
    return;
  }
  ACC den = ACC(0);
  for (uint k = lid; k < pc.n; k += WG_SIZE) {
    const float l = ls[lb + k];
    const float e = l > -F32_INF ? exp(l - m) : 0.0;
    ps[pb + k] = e;
    den += ACC(e);
  }
  den = wg_sum(den);
  if (sink > -F32_INF) den += ACC(exp(sink - m));
  const ACC inv = ACC(1) / den;
  for (uint k = lid; k < pc.n; k += WG_SIZE) ps[pb + k] = float(ACC(ps[pb + k]) * inv);
}

#version 460
#extension GL_GOOGLE_include_directive : require
// y[row] = x[row] · 1/sqrt(mean(x[row]²) + eps) [· w] — ops/rmsnorm.hpp. One workgroup per row; the sum of
// squares and the scale in ACC (f64 when the device has it, as the CPU does, so eps down to 1e-20 and inputs
// whose squares underflow f32 behave alike; f32 otherwise).
#include "common/base.glsl"
#include "common/reduce.glsl"

layout(push_constant) uniform rms_pc {
  uint rows, dim, xoff, woff, yoff, has_w;
  float eps;
  uint pad;
} pc;
layout(std430, binding = 0) readonly buffer X { float xs[]; };
layout(std430, binding = 1) readonly buffer Wt { float ws[]; };
layout(std430, binding = 2) writeonly buffer Y { float ys[]; };

void main() {
  const uint row = wg_index();
  if (row >= pc.rows) return;  // uniform over the workgroup
  const uint lid = gl_LocalInvocationID.x, xb = pc.xoff + row * pc.dim, yb = pc.yoff + row * pc.dim;
  ACC ss = ACC(0);
  for (uint i = lid; i < pc.dim; i += WG_SIZE) {
    const ACC v = ACC(xs[xb + i]);
    ss += v * v;
  }
  ss = wg_sum(ss);
  const ACC r = ACC(1) / sqrt(ss / ACC(pc.dim) + ACC(pc.eps));
  for (uint i = lid; i < pc.dim; i += WG_SIZE) {
    const ACC v = ACC(xs[xb + i]) * r;
    ys[yb + i] = pc.has_w != 0u ? float(v * ACC(ws[pc.woff + i])) : float(v);
  }
}

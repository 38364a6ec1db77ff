#version 460
#extension GL_GOOGLE_include_directive : require
// y[row] = x[row] · 1/sqrt(mean(x[row]²) + eps) [· w] — ops/rmsnorm.hpp. One workgroup per row; the sum of
// squares and the scale in ACC (f64 when the device has it, as the CPU does, so eps down to 1e-20 and inputs
// whose squares underflow f32 behave alike; f32 otherwise).
// RMS_ROPE = 1 (kernels::rmsnorm_rope): then the RoPE of the row's last rope_dim channels (common/rope.glsl) with
// the cos/sin row cs[row / heads] (rows are the heads of tokens), each pair by the invocation of its first channel.
// RMS_Q8 = 1 (kernels::rmsnorm_q8): y also quantised to int8 for the integer-dot matvec of one weight format
// (common/act_q8_wide.glsl: the values quantize_act.comp would write from y, bit for bit), so a product that reads
// int8 activations follows the norm without a quantisation step; the format's defines come with it.
#include "common/base.glsl"
#include "common/reduce.glsl"
#ifndef RMS_ROPE
#define RMS_ROPE 0
#endif
#ifndef RMS_Q8
#define RMS_Q8 0
#endif
#if RMS_Q8 && RMS_ROPE
#error "rmsnorm.comp: RMS_Q8 and RMS_ROPE exclude each other"
#endif

layout(push_constant) uniform rms_pc {
  uint rows, dim, xoff, woff, yoff, has_w;
  float eps;
  uint pad;
#if RMS_ROPE
  uint heads, rope_dim, csoff, pad1;
#endif
#if RMS_Q8
  uint qoff, pad2, pad3, pad4;  // word offset of the int8 vectors in binding 4
#endif
} pc;
layout(std430, binding = 0) readonly buffer X { float xs[]; };
layout(std430, binding = 1) readonly buffer Wt { float ws[]; };
layout(std430, binding = 2) writeonly buffer Y { float ys[]; };
#if RMS_ROPE
#include "common/rope.glsl"
layout(std430, binding = 3) readonly buffer CS { float cs[]; };
#endif
#if RMS_Q8
#include "common/act_q8.glsl"
layout(std430, binding = 4) writeonly buffer QW { uint qw[]; };
layout(std430, binding = 4) writeonly buffer QF { float qf[]; };
layout(std430, binding = 4) writeonly buffer QI { int qi[]; };
#include "common/act_q8_wide.glsl"
#endif

void main() {
  const uint row = wg_index();
  if (row >= pc.rows) return;  // uniform over the workgroup
  const uint lid = gl_LocalInvocationID.x, xb = pc.xoff + row * pc.dim, yb = pc.yoff + row * pc.dim;
  // precise: no FMA contraction of the sum of squares, as in common/mhc_finish.glsl's fused norm (hc_pre_finish
  // with a norm weight must equal hc_pre_finish + this kernel bit for bit; a device that contracts one and not the
  // other rounds differently: the H200 failed parity hc_pre/post "+ fused norm" for one seed in s118)
  precise ACC ss = ACC(0);
  for (uint i = lid; i < pc.dim; i += WG_SIZE) {
    const ACC v = ACC(xs[xb + i]);
    ss += v * v;
  }
  ss = wg_sum(ss);
  const ACC r = ACC(1) / sqrt(ss / ACC(pc.dim) + ACC(pc.eps));
#if RMS_Q8
  // every invocation takes the same number of steps (act_q8_wide's barriers); value i = lid + k · WG_SIZE is value
  // lid % 32 of block i / 32 (WG_SIZE a multiple of 32, dim of 32)
  const uint blocks = pc.dim / 32u, qb = pc.qoff + row * ACT_VEC_WORDS(blocks);
  for (uint k = 0u; k < (pc.dim + WG_SIZE - 1u) / WG_SIZE; ++k) {
    const uint i = lid + k * WG_SIZE;
    const bool live = i < pc.dim;
    float y = 0.0;
    if (live) {
      const ACC v = ACC(xs[xb + i]) * r;
      y = pc.has_w != 0u ? float(v * ACC(ws[pc.woff + i])) : float(v);
      ys[yb + i] = y;
    }
    act_q8_wide(y, live, qb, i / 32u, blocks);
  }
  return;
#endif
#if RMS_ROPE
  const uint t0 = pc.dim - pc.rope_dim, cb = pc.csoff + (row / pc.heads) * pc.rope_dim;
#endif
  for (uint i = lid; i < pc.dim; i += WG_SIZE) {
#if RMS_ROPE
    // the pair's second channel is written with the first (and not read here: in place, the first writes it)
    if (i >= t0 && ((i - t0) & 1u) != 0u) continue;
#endif
    const ACC v = ACC(xs[xb + i]) * r;
    const float y = pc.has_w != 0u ? float(v * ACC(ws[pc.woff + i])) : float(v);
#if RMS_ROPE
    if (i >= t0) {
      const ACC v1 = ACC(xs[xb + i + 1u]) * r;
      const float y1 = pc.has_w != 0u ? float(v1 * ACC(ws[pc.woff + i + 1u])) : float(v1);
      const vec2 p = rope_pair(y, y1, cs[cb + i - t0], cs[cb + i - t0 + 1u]);
      ys[yb + i] = p.x;
      ys[yb + i + 1u] = p.y;
      continue;
    }
#endif
    ys[yb + i] = y;
  }
}

#version 460
#extension GL_GOOGLE_include_directive : require
// mHC per block of HC_BLOCK columns of one token (ops/mhc.hpp), one workgroup per (token, block):
//   HC_POST = 1: X'[k][c] = post[k]·o[c] + Σ_j C[j,k]·X[j][c] (f32, j ascending, as hc_post), written to out;
//   HC_POST = 0: X' = X (the first mix of a chain);
//   has_mix:     partial[r] = Σ_k Σ_c fn[r, k·d + c]·X'[k][c] for the rows of the (next) mixing projection, and
//                Σ X'² as an extra last row — in ACC (double when the device has it: the f32 products are exact
//                there, as in the CPU's double dot products). mhc_finish.comp adds the blocks in a fixed order.
// Defines: HC_MAX (ops/mhc.hpp hc_max), HC_BLOCK (= the workgroup size), HC_POST.
#include "common/base.glsl"
#include "common/reduce.glsl"

layout(push_constant) uniform hb_pc {
  uint tokens, hc, d, nblk;
  uint rows, has_mix, xoff, ooff;
  uint coff, outoff, fnoff, poff;
  uint cstride, pad0, pad1, pad2;
} pc;
layout(std430, binding = 0) readonly buffer X { float xs[]; };
layout(std430, binding = 1) readonly buffer O { float os[]; };      // HC_POST: the sublayer output [tokens, d]
layout(std430, binding = 2) readonly buffer Cf { float coeff[]; };  // HC_POST: pre, post, C per token
layout(std430, binding = 3) writeonly buffer Out { float outs[]; }; // HC_POST: X' [tokens, hc·d]
layout(std430, binding = 4) readonly buffer Fn { float fn[]; };     // [rows, hc·d]
layout(std430, binding = 5) writeonly buffer P { ACC part[]; };     // [tokens, nblk, rows + 1]

shared float xb[HC_MAX * HC_BLOCK];

void main() {
  const uint g = wg_index();
  if (g >= pc.tokens * pc.nblk) return;  // uniform over the workgroup
  const uint t = g / pc.nblk, b = g % pc.nblk, lid = gl_LocalInvocationID.x, hc = pc.hc, d = pc.d;
  const uint c = b * HC_BLOCK + lid;
  const bool live = c < d;
  const uint xrow = pc.xoff + t * hc * d;
  for (uint k = 0u; k < hc; ++k) {
    float v = 0.0;
    if (live) {
#if HC_POST
      const uint cb = pc.coff + t * pc.cstride;
      precise float acc = coeff[cb + hc + k] * os[pc.ooff + t * d + c];
      for (uint j = 0u; j < hc; ++j) acc += coeff[cb + 2u * hc + j * hc + k] * xs[xrow + j * d + c];
      v = acc;
      outs[pc.outoff + t * hc * d + k * d + c] = v;
#else
      v = xs[xrow + k * d + c];
#endif
    }
    xb[k * HC_BLOCK + lid] = v;
  }
  if (pc.has_mix == 0u) return;  // uniform
  const uint pb = pc.poff + (t * pc.nblk + b) * (pc.rows + 1u);
  for (uint r = 0u; r <= pc.rows; ++r) {
    ACC acc = ACC(0);
    if (live)
      for (uint k = 0u; k < hc; ++k) {
        const ACC xv = ACC(xb[k * HC_BLOCK + lid]);
        acc += r < pc.rows ? ACC(fn[pc.fnoff + r * hc * d + k * d + c]) * xv : xv * xv;
      }
    acc = wg_sum(acc);
    if (lid == 0u) part[pb + r] = acc;
  }
}

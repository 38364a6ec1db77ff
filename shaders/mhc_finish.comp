#version 460
#extension GL_GOOGLE_include_directive : require
// mHC coefficients and collapse of one token per workgroup (ops/mhc.hpp hc_pre / hc_head), from the block
// partials of mhc_block.comp (added in block order):
//   m[i]    = dot_i · 1/sqrt(Σx²/(hc·d) + norm_eps)
//   pre[j]  = sigmoid(m[j]·s0 + base[j]) + hc_eps,  post[j] = 2·sigmoid(m[hc+j]·s1 + base[hc+j])
//   C       = row-softmax(m[2hc + j·hc + k]·s2 + base[..]) + hc_eps; column pass; then iters−1 × {row, column}
//   y[c]    = Σ_j pre[j]·X[j][c] in f32, j ascending
// The coefficients in ACC with exp in double (common/f64math.glsl) when the device has f64, as the CPU.
// HC_HEAD = 1: hc_head (pre only, scalar scale). Defines: HC_MAX, HC_HEAD.
#include "common/base.glsl"
#if ACC_DOUBLE
#include "common/f64math.glsl"
#define EXP(x) exp_f64(x)
#else
#define EXP(x) exp(x)
#endif

layout(push_constant) uniform hf_pc {
  uint tokens, hc, d, nblk;
  uint rows, iters, xoff, poff;
  uint boff, soff, coff, yoff;
  float norm_eps, hc_eps, head_scale;
  uint cstride;
} pc;
layout(std430, binding = 0) readonly buffer P { ACC part[]; };
layout(std430, binding = 1) readonly buffer X { float xs[]; };
layout(std430, binding = 2) readonly buffer Bs { float base[]; };
layout(std430, binding = 3) readonly buffer Sc { float scale[]; };
layout(std430, binding = 4) writeonly buffer Cf { float coeff[]; };
layout(std430, binding = 5) writeonly buffer Y { float ys[]; };

shared ACC m[(2 + HC_MAX) * HC_MAX + 1];
shared float pre_s[HC_MAX];

ACC sigm(ACC x) { return ACC(1) / (ACC(1) + EXP(-x)); }

void main() {
  const uint t = wg_index();
  if (t >= pc.tokens) return;  // uniform over the workgroup
  const uint lid = gl_LocalInvocationID.x, hc = pc.hc, d = pc.d, R = pc.rows + 1u;
  for (uint r = lid; r < R; r += WG_SIZE) {
    ACC s = ACC(0);
    for (uint b = 0u; b < pc.nblk; ++b) s += part[pc.poff + (t * pc.nblk + b) * R + r];
    m[r] = s;
  }
  barrier();
  if (lid == 0u) {
    const ACC rs = ACC(1) / sqrt(m[pc.rows] / ACC(hc * d) + ACC(pc.norm_eps));
    const ACC eps = ACC(pc.hc_eps);
    const uint cb = pc.coff + t * pc.cstride;
#if HC_HEAD
    for (uint j = 0u; j < hc; ++j) {
      const float p = float(sigm(m[j] * rs * ACC(pc.head_scale) + ACC(base[pc.boff + j])) + eps);
      pre_s[j] = p;
      coeff[cb + j] = p;
    }
#else
    const ACC s0 = ACC(scale[pc.soff]), s1 = ACC(scale[pc.soff + 1u]), s2 = ACC(scale[pc.soff + 2u]);
    for (uint j = 0u; j < hc; ++j) {
      const float p = float(sigm(m[j] * rs * s0 + ACC(base[pc.boff + j])) + eps);
      pre_s[j] = p;
      coeff[cb + j] = p;
      coeff[cb + hc + j] = float(ACC(2) * sigm(m[hc + j] * rs * s1 + ACC(base[pc.boff + hc + j])));
    }
    ACC cm[HC_MAX * HC_MAX];
    for (uint j = 0u; j < hc; ++j) {  // row softmax + eps
      ACC mx = ACC(-F32_INF);
      for (uint k = 0u; k < hc; ++k) {
        const uint i = 2u * hc + j * hc + k;
        cm[j * hc + k] = m[i] * rs * s2 + ACC(base[pc.boff + i]);
        mx = max(mx, cm[j * hc + k]);
      }
      ACC sum = ACC(0);
      for (uint k = 0u; k < hc; ++k) {
        cm[j * hc + k] = EXP(cm[j * hc + k] - mx);
        sum += cm[j * hc + k];
      }
      for (uint k = 0u; k < hc; ++k) cm[j * hc + k] = cm[j * hc + k] / sum + eps;
    }
    for (uint it = 0u; it < max(pc.iters, 1u); ++it) {
      if (it > 0u)
        for (uint j = 0u; j < hc; ++j) {  // row pass (not before the first column pass)
          ACC s = ACC(0);
          for (uint k = 0u; k < hc; ++k) s += cm[j * hc + k];
          for (uint k = 0u; k < hc; ++k) cm[j * hc + k] /= s + eps;
        }
      for (uint k = 0u; k < hc; ++k) {  // column pass
        ACC s = ACC(0);
        for (uint j = 0u; j < hc; ++j) s += cm[j * hc + k];
        for (uint j = 0u; j < hc; ++j) cm[j * hc + k] /= s + eps;
      }
    }
    for (uint i = 0u; i < hc * hc; ++i) coeff[cb + 2u * hc + i] = float(cm[i]);
#endif
  }
  barrier();
  const uint xrow = pc.xoff + t * hc * d;
  for (uint c = lid; c < d; c += WG_SIZE) {
    precise float y = pre_s[0] * xs[xrow + c];
    for (uint j = 1u; j < hc; ++j) y += pre_s[j] * xs[xrow + j * d + c];
    ys[pc.yoff + t * d + c] = y;
  }
}

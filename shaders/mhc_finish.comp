#version 460
#extension GL_GOOGLE_include_directive : require
// mHC coefficients and collapse, one token per workgroup (ops/mhc.hpp hc_pre / hc_head; kernels::hc_pre_finish,
// hc_sinkhorn, hc_pre_finish_fold, hc_fold, hc_head_finish): the body is common/mhc_finish.glsl (its defines:
// HC_MAX, HC_HEAD, HC_NORM, HC_FOLD, HC_SG, HC_PART, HC_N, HC_COLS), which mhc_block.comp's HC_TAIL mode shares.
#include "common/base.glsl"

layout(push_constant) uniform hf_pc {
  uint tokens, hc, d, nblk;
  uint rows, iters, xoff, poff;
  uint boff, soff, coff, yoff;
  float norm_eps, hc_eps, head_scale;
  uint cstride;
  float rms_eps;
  uint nwoff, foldoff, fstride;
} pc;
layout(std430, binding = 0) readonly buffer P { ACC part[]; };
layout(std430, binding = 1) readonly buffer X { float xs[]; };
layout(std430, binding = 2) readonly buffer Bs { float base[]; };
layout(std430, binding = 3) readonly buffer Sc { float scale[]; };
layout(std430, binding = 4) writeonly buffer Cf { float coeff[]; };
layout(std430, binding = 5) buffer Y { float ys[]; };
#if HC_NORM
#include "common/reduce.glsl"
layout(std430, binding = 6) readonly buffer Nw { float nw[]; };
#endif
#if HC_FOLD
layout(std430, binding = 7) readonly buffer Fd { float fold[]; };
#endif
#define HCF_X(i) xs[i]
#include "common/mhc_finish.glsl"

void main() {
  const uint t = wg_index();
  if (t >= pc.tokens) return;  // uniform over the workgroup
  hcf_args a;
  a.t = t, a.hc = pc.hc, a.d = pc.d, a.nblk = pc.nblk, a.rows = pc.rows, a.iters = pc.iters, a.xoff = pc.xoff;
  a.poff = pc.poff, a.boff = pc.boff, a.soff = pc.soff, a.coff = pc.coff, a.yoff = pc.yoff, a.cstride = pc.cstride;
  a.nwoff = pc.nwoff, a.foldoff = pc.foldoff, a.fstride = pc.fstride, a.qoff = 0u;
  a.norm_eps = pc.norm_eps, a.hc_eps = pc.hc_eps, a.head_scale = pc.head_scale, a.rms_eps = pc.rms_eps;
  hc_finish(a);
}

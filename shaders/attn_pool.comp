#version 460
#extension GL_GOOGLE_include_directive : require
// Compressor pooling + RMSNorm (dsv4-architecture.md §3.3 "Compressor", §4.2; driver/model/dsv4_compressor.cpp and
// the V4.1 pooling of dsv41_attention.cpp), one workgroup per closing window (entry):
//   slots  = overlap: channel c of the previous window's rows (scores / values at c) and of the closing window's
//            rows (at width + c); else channel c of the closing window's rows. A missing previous window
//            (win[e].y == 0xFFFFFFFF) contributes nothing.
//   x[c]   = Σ_slots e^(s − m) a / Σ_slots e^(s − m), m = the slots' max (per channel), in ACC (double with
//            shaderFloat64: e^ with exp_f64, as the CPU's std::exp in double);
//   out[c] = x[c] · 1/√(mean(x²) + eps) · norm[c]  (ops/rmsnorm.hpp: mean of squares and scale in ACC).
// Invocation lid owns channels lid, lid + WG_SIZE, … (at most POOL_PT).
// POOL_ROPE = 1: then the RoPE of each entry's last pc.rope_dim channels (adjacent pairs, common/rope.glsl) with the
// cos/sin row cs[pc.csoff + e · pc.cs_stride …] — rope.comp's operation on the stored values, so the same bits as
// compress_pool followed by rope(); the entry's tail is staged in shared memory to pair each channel with its
// neighbour.
#include "common/base.glsl"
#include "common/reduce.glsl"
#ifndef POOL_ROPE
#define POOL_ROPE 0
#endif
// POOL_APE = 1: the scores are read before the compressor's absolute position embedding: row p of a window (its
// p-th position, windows start at multiples of ratio) gets ape[pc.apoff + p · rf + channel] added as it is read —
// one f32 add, the value an add() of the ape row before the pooling gives.
#ifndef POOL_APE
#define POOL_APE 0
#endif
#if POOL_ROPE
#include "common/rope.glsl"
#endif
#if ACC_DOUBLE
#include "common/f64math.glsl"
#endif

layout(push_constant) uniform pool_pc {
  uint entries, ratio, width, rf;
  uint overlap, aoff, soff, woff;
  uint has_norm, noff, ooff;
  float eps;
  uint rope_dim, csoff, cs_stride, apoff;  // POOL_ROPE; POOL_APE
} pc;
layout(std430, binding = 0) readonly buffer A { float av[]; };
layout(std430, binding = 1) readonly buffer S { float sv[]; };
layout(std430, binding = 2) readonly buffer W { uint win[]; };
layout(std430, binding = 3) readonly buffer N { float normw[]; };
layout(std430, binding = 4) writeonly buffer O { float ov[]; };
#if POOL_APE
layout(std430, binding = 6) readonly buffer Ape { float ape[]; };
#define SCORE(row, p, ch) (sv[pc.soff + (row) * pc.rf + (ch)] + ape[pc.apoff + (p) * pc.rf + (ch)])
#else
#define SCORE(row, p, ch) sv[pc.soff + (row) * pc.rf + (ch)]
#endif
#if POOL_ROPE
layout(std430, binding = 5) readonly buffer CS { float cs[]; };
shared float rope_s[POOL_PT * WG_SIZE];  // the entry's last rope_dim values
#endif

ACC ex(ACC x) {
#if ACC_DOUBLE
  return exp_f64(x);
#else
  return exp(x);
#endif
}

void main() {
  const uint e = wg_index();
  if (e >= pc.entries) return;  // uniform over the workgroup
  const uint lid = gl_LocalInvocationID.x, r = pc.ratio, w = pc.width;
  const uint cur = win[pc.woff + 2u * e], prev0 = win[pc.woff + 2u * e + 1u];
  const bool prev = pc.overlap != 0u && prev0 != 0xFFFFFFFFu;
  const uint off = pc.overlap != 0u ? w : 0u;
  float x[POOL_PT];
  ACC ss = ACC(0);
  [[unroll]] for (uint i = 0u; i < POOL_PT; ++i) {
    const uint c = lid + i * WG_SIZE;
    x[i] = 0.0;
    if (c >= w) continue;
    float m = -F32_INF;
    if (prev)
      for (uint p = 0u; p < r; ++p) m = nan_free_max(SCORE(prev0 + p, p, c), m);
    for (uint p = 0u; p < r; ++p) m = nan_free_max(SCORE(cur + p, p, off + c), m);
    ACC den = ACC(0), num = ACC(0);
    if (prev)
      for (uint p = 0u; p < r; ++p) {
        precise const ACC t = ex(ACC(SCORE(prev0 + p, p, c)) - ACC(m));
        den += t;
        num += t * ACC(av[pc.aoff + (prev0 + p) * pc.rf + c]);
      }
    for (uint p = 0u; p < r; ++p) {
      precise const ACC t = ex(ACC(SCORE(cur + p, p, off + c)) - ACC(m));
      den += t;
      num += t * ACC(av[pc.aoff + (cur + p) * pc.rf + off + c]);
    }
    x[i] = float(num / den);
    ss += ACC(x[i]) * ACC(x[i]);
  }
  ss = wg_sum(ss);
  const ACC inv = ACC(1) / sqrt(ss / ACC(w) + ACC(pc.eps));
#if POOL_ROPE
  const uint t0 = w - pc.rope_dim;
#endif
  [[unroll]] for (uint i = 0u; i < POOL_PT; ++i) {
    const uint c = lid + i * WG_SIZE;
    if (c >= w) continue;
    const float y = float(pc.has_norm != 0u ? ACC(x[i]) * inv * ACC(normw[pc.noff + c]) : ACC(x[i]) * inv);
#if POOL_ROPE
    if (c >= t0) {
      rope_s[c - t0] = y;
      continue;
    }
#endif
    ov[pc.ooff + e * w + c] = y;
  }
#if POOL_ROPE
  barrier();
  for (uint j = lid; j < pc.rope_dim; j += WG_SIZE) {
    const uint jb = j & ~1u, cb = pc.csoff + e * pc.cs_stride + jb;
    const vec2 p = rope_pair(rope_s[jb], rope_s[jb + 1u], cs[cb], cs[cb + 1u]);
    ov[pc.ooff + e * w + t0 + j] = (j & 1u) == 0u ? p.x : p.y;
  }
#endif
}

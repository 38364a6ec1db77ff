#version 460
#extension GL_GOOGLE_include_directive : require
// Combine of split sparse attention (flash decoding; attn_sparse.comp with pc.splits > 1 wrote the splits), one
// workgroup per (query row, head). Split s left a running max m_s (−inf: no finite logit), a denominator d_s
// (no sink; NaN when it met an invalid index) and an unnormalised accumulator o_s, all relative to e^(−m_s):
//   m = max(sink, m_s ...) (NaN-free),  d = e^(sink − m) + Σ_s d_s e^(m_s − m),  o = Σ_s o_s e^(m_s − m) / d.
// d == 0 (all slots masked, no sink) gives 0; a NaN d_s makes the (row, head) output NaN, as the single-pass kernel.
// Scratch layout (attn_sparse.comp): acc [(row·heads + h)·splits + s][ATT_HD], then the (m, d) pairs in that order.
// Defines: ATT_HD (head_dim), ATT_OPT (= ceil(HD / WG)), ATT_MAXS (the most splits of the shape: ≥ pc.splits),
// ATT_STAGE_ALL (1 where ATT_MAXS ≤ 32: every split's state loaded at once).
// ATT_Q8 = 1 (kernels::sparse_attention's attn_q8_out): the output is also written as int8 activations for the
// integer-dot products that read it (wo_a), packed for the format of the ACT_T_* defines (common/act_q8.glsl): o
// [rows, heads, ATT_HD] seen as vectors of pc.qcols values (a multiple of 32; ATT_HD too, so a block of 32 lies
// in one head and one vector), at binding 4 from word pc.qoff — the bits quantize_act.comp writes from o
// (common/act_q8_wide.glsl, one value per invocation: channel c = lid + i·WG_SIZE holds value c % 32 of its block),
// without a dependent step of its own.
#include "common/base.glsl"
#ifndef ATT_Q8
#define ATT_Q8 0
#endif

layout(push_constant) uniform combine_pc {
  uint rows, heads, splits, xoff;
  uint soff, has_sink, ooff, csoff;
#if ATT_Q8
  uint qoff, qcols, pad0, pad1;
#endif
} pc;
layout(std430, binding = 0) readonly buffer X { float xs[]; };
layout(std430, binding = 1) readonly buffer S { float sinks[]; };
layout(std430, binding = 2) writeonly buffer O { float os[]; };
#ifndef ATT_IROPE
#define ATT_IROPE 0
#endif
#if ATT_IROPE
// ATT_IROPE: the inverse rope of the output's tail (common/att_irope.glsl), the head staged in o_s
layout(std430, binding = 3) readonly buffer CS { float cs_rows[]; };
#include "common/att_irope.glsl"
shared float o_s[ATT_HD];
#endif

#if ATT_Q8
layout(std430, binding = 4) writeonly buffer QW { uint qw[]; };
layout(std430, binding = 4) writeonly buffer QF { float qf[]; };
layout(std430, binding = 4) writeonly buffer QI { int qi[]; };
#include "common/act_q8.glsl"
#include "common/act_q8_wide.glsl"
#endif

// max that never lets a NaN win (as the CPU's `a > m ? a : m`)
float max_nf(float a, float b) { return a > b ? a : b; }

void main() {
  const uint rh = wg_index();  // row · heads + head
  if (rh >= pc.rows * pc.heads) return;  // uniform over the workgroup
  const uint lid = gl_LocalInvocationID.x, x0 = rh * pc.splits;
  const uint md = pc.xoff + pc.rows * pc.heads * pc.splits * ATT_HD + 2u * x0;
  const float sink = pc.has_sink != 0u ? sinks[pc.soff + rh % pc.heads] : -F32_INF;
#if ATT_STAGE_ALL
  // Every split's (m, d) and accumulators in registers first (ATT_MAXS ≥ pc.splits is a compile-time constant, so
  // all the loads are in flight together), then combined in split order — for up to 32 splits (a decode step of
  // V4's 64 heads); more (few heads) one split at a time below, the same operations.
  float mv[ATT_MAXS], dv[ATT_MAXS], av[ATT_MAXS][ATT_OPT];
  [[unroll]] for (uint s = 0u; s < ATT_MAXS; ++s) {
    const bool live = s < pc.splits;
    mv[s] = live ? xs[md + 2u * s] : -F32_INF;
    dv[s] = live ? xs[md + 2u * s + 1u] : 0.0;
    [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
      const uint c = lid + i * WG_SIZE;
      av[s][i] = live && c < ATT_HD ? xs[pc.xoff + (x0 + s) * ATT_HD + c] : 0.0;
    }
  }
  float m = sink;
  [[unroll]] for (uint s = 0u; s < ATT_MAXS; ++s)
    if (s < pc.splits) m = max_nf(mv[s], m);
  float d = sink > -F32_INF ? exp(sink - m) : 0.0;
  float acc[ATT_OPT];
  [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) acc[i] = 0.0;
  [[unroll]] for (uint s = 0u; s < ATT_MAXS; ++s) {
    if (s >= pc.splits) break;
    const float ms = mv[s], ds = dv[s];
    const float w = ms > -F32_INF ? exp(ms - m) : 0.0;  // a split without a finite logit holds 0 (or NaN in d_s)
    d += isnan(ds) ? ds : ds * w;
    [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) acc[i] = fma(av[s][i], w, acc[i]);
  }
#else  // many splits (few heads): one split at a time
  float m = sink;
  for (uint s = 0u; s < pc.splits; ++s) m = max_nf(xs[md + 2u * s], m);
  float d = sink > -F32_INF ? exp(sink - m) : 0.0;
  float acc[ATT_OPT];
  [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) acc[i] = 0.0;
  for (uint s = 0u; s < pc.splits; ++s) {
    const float ms = xs[md + 2u * s], ds = xs[md + 2u * s + 1u];
    const float w = ms > -F32_INF ? exp(ms - m) : 0.0;
    d += isnan(ds) ? ds : ds * w;
    [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
      const uint c = lid + i * WG_SIZE;
      if (c < ATT_HD) acc[i] = fma(xs[pc.xoff + (x0 + s) * ATT_HD + c], w, acc[i]);
    }
  }
#endif
  const float inv = d > 0.0 ? 1.0 / d : 0.0;
  const bool bad = isnan(d);
  float ov[ATT_OPT];
#if ATT_IROPE
  [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
    const uint c = lid + i * WG_SIZE;
    if (c < ATT_HD) o_s[c] = bad ? d : acc[i] * inv;
  }
  barrier();
  [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
    const uint c = lid + i * WG_SIZE;
    ov[i] = 0.0;
    if (c < ATT_HD) ov[i] = att_irope(o_s[c], o_s[c ^ 1u], c, rh / pc.heads, pc.csoff);
  }
#else
  [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) ov[i] = bad ? d : acc[i] * inv;
#endif
  [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
    const uint c = lid + i * WG_SIZE;
    if (c < ATT_HD) os[pc.ooff + rh * ATT_HD + c] = ov[i];
  }
#if ATT_Q8
  // every invocation calls act_q8_wide ATT_OPT times (its barriers); a round's live blocks are whole (ATT_HD % 32)
  const uint qblocks = pc.qcols / 32u;
  [[unroll]] for (uint i = 0u; i < ATT_OPT; ++i) {
    const uint c = lid + i * WG_SIZE;
    const bool live = c < ATT_HD;
    const uint f = rh * ATT_HD + (live ? c : 0u), v = f / pc.qcols;
    act_q8_wide(live ? ov[i] : 0.0, live, pc.qoff + v * ACT_VEC_WORDS(qblocks), (f % pc.qcols) / 32u, qblocks);
  }
#endif
}

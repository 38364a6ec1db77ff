#version 460
#extension GL_GOOGLE_include_directive : require
// mHC per block of HC_BLOCK columns of one token (ops/mhc.hpp), one workgroup per (token, block):
//   HC_POST = 1: X'[k][c] = post[k]·o[c] + Σ_j C[j,k]·X[j][c] (f32, j ascending, as hc_post), written to out;
//   HC_POST = 0: X' = X (the first mix of a chain);
//   has_mix:     partial[r] = Σ_k Σ_c fn[r, k·d + c]·X'[k][c] for the rows of the (next) mixing projection, and
//                Σ X'² as an extra last row — in ACC (double when the device has it: the f32 products are exact
//                there, as in the CPU's double dot products). mhc_finish.comp adds the blocks in a fixed order.
// The rows of a mix are split over HC_RSPLIT workgroups per block (HC_RPG rows each; every one of them computes the
// block's X', group 0 writes it): a row's partial is the same sum over the same columns as without the split, so
// the partials are bit-identical — the split only shortens each invocation's chain of dependent loads.
// HC_TAIL = 1 (with a mix): the last workgroup of each token also runs mhc_finish.comp's work on the mix
// (kernels::hc_post_finish: a sublayer boundary in one dispatch); the finish's defines then apply too (HC_HEAD,
// HC_NORM, HC_SG, HC_PART, HC_N, HC_COLS, HC_FOLD; common/mhc_finish.glsl). With HC_FOLD = 1 (V4.1's one-sublayer
// lag) the finish's collapse weights are fold[pc.foldoff + t·pc.fstride + j] (binding 13); with HC_COUT = 1 it
// writes its coefficients to binding 12 at pc.cooff instead of rewriting those the post read (V4.1: a buffer per
// site).
// HC_TOK > 1 (not with HC_TAIL; the prefill chunks' hc_mix / hc_post): a workgroup walks HC_TOK consecutive tokens of
// its (block, row group), its fn values loaded once into registers for all of them — per token the same operations
// in the same order, so the same bits; the mix's weights are read from L2 once per HC_TOK tokens instead of once per
// token (a 512-token chunk of V4 read 24 · 16384 · 4 bytes · 512 = 805 MB of fn per boundary that way).
// Defines: HC_MAX (ops/mhc.hpp hc_max), HC_N (= hc), HC_BLOCK (= the workgroup size), HC_POST, HC_ROWS (mix rows + 1, or 1
// without a mix), HC_RSPLIT, HC_RPG (= ceil(HC_ROWS / HC_RSPLIT)), HC_TOK (1 by default).
#include "common/base.glsl"
#include "common/reduce.glsl"

#ifndef HC_TAIL
#define HC_TAIL 0
#endif
// HC_ADD = 1 (HC_POST): the sublayer output is o + o_add (binding 6, or 11 with HC_TAIL; word pc.aoff), one f32
// add — e.g. the MoE's routed sum and its shared expert kept apart (moe_sum.comp's `total + add`, the same bits).
#ifndef HC_ADD
#define HC_ADD 0
#endif
#ifndef HC_Q8
#define HC_Q8 0
#endif
#ifndef HC_TOK
#define HC_TOK 1
#endif
#if HC_TOK > 1 && HC_TAIL
#error "HC_TOK: the tail counts one token per workgroup"
#endif

layout(push_constant) uniform hb_pc {
  uint tokens, hc, d, nblk;
  uint rows, has_mix, xoff, ooff;
  uint coff, outoff, fnoff, poff;
  uint cstride, cntoff, iters, boff;  // HC_TAIL: cntoff … rms_eps
  uint soff, yoff, nwoff, aoff;
  float norm_eps, hc_eps, head_scale, rms_eps;
  uint foldoff, fstride, cooff, qoff;  // HC_TAIL with HC_FOLD / HC_COUT / HC_Q8
} pc;
layout(std430, binding = 0) readonly buffer X { float xs[]; };
layout(std430, binding = 1) readonly buffer O { float os[]; };      // HC_POST: the sublayer output [tokens, d]
layout(std430, binding = 4) readonly buffer Fn { float fn[]; };     // [rows, hc·d]
#if HC_ADD && HC_TAIL
layout(std430, binding = 11) readonly buffer OA { float oas[]; };
#elif HC_ADD
layout(std430, binding = 6) readonly buffer OA { float oas[]; };
#endif
#if HC_TAIL
// the coefficients are read (post, C) by every workgroup and rewritten by the finish of the last one
layout(std430, binding = 2) buffer Cf { float coeff[]; };
layout(std430, binding = 3) coherent buffer Out { float outs[]; };
layout(std430, binding = 5) coherent buffer P { ACC part[]; };
layout(std430, binding = 6) readonly buffer Bs { float base[]; };
layout(std430, binding = 7) readonly buffer Sc { float scale[]; };
#if HC_Q8
layout(std430, binding = 8) coherent buffer Y { float ys[]; };  // the finish reads its y back (HC_Q8)
#else
layout(std430, binding = 8) buffer Y { float ys[]; };
#endif
#if HC_NORM
layout(std430, binding = 9) readonly buffer Nw { float nw[]; };
#endif
layout(std430, binding = 10) coherent buffer Cnt { uint cnt[]; };  // per-token arrival counters, 0 between uses
#if HC_POST
#define HCF_X(i) outs[i]
#else
#define HCF_X(i) xs[i]
#endif
#else
layout(std430, binding = 2) readonly buffer Cf { float coeff[]; };  // HC_POST: pre, post, C per token
layout(std430, binding = 3) writeonly buffer Out { float outs[]; }; // HC_POST: X' [tokens, hc·d]
layout(std430, binding = 5) writeonly buffer P { ACC part[]; };     // [tokens, nblk, rows + 1]
#endif

#if HC_TAIL
#ifndef HC_FOLD
#define HC_FOLD 0
#endif
#ifndef HC_COUT
#define HC_COUT 0
#endif
#if HC_FOLD == 2
#error "the tail computes the next site's coefficients: HC_FOLD 0 or 1"
#endif
#if HC_COUT
layout(std430, binding = 12) writeonly buffer CfO { float coeffo[]; };
#define HCF_C(i) coeffo[i]
#endif
#if HC_FOLD
layout(std430, binding = 13) readonly buffer Fd { float fold[]; };
#endif
#if HC_Q8
#if HC_COUT
#error "HC_Q8 takes binding 12: not with HC_COUT"
#endif
// y's int8 copy (kernels::hc_finish_args::y_q8): the vectors of common/act_q8.glsl for the ACT_T_* format
layout(std430, binding = 12) writeonly buffer HQW { uint hqw[]; };
layout(std430, binding = 12) writeonly buffer HQF { float hqf[]; };
layout(std430, binding = 12) writeonly buffer HQI { int hqi[]; };
#include "common/act_q8.glsl"
#endif
#include "common/mhc_finish.glsl"
shared bool tail_last;
#endif

#if REDUCE_SUBGROUP
// per-subgroup sums of every row: [subgroup][row], summed in subgroup order by the first HC_ROWS invocations
shared ACC red_rows[(WG_SIZE / LANES) * HC_RPG];
#endif

/// Token t's X' column c (written by row group 0) and, with a mix, its partials of block b, row group rg; fv: this
/// workgroup's rows of fn (the next mix) for column c.
void one_token(const uint t, const uint rg, const uint b, const uint lid, const uint c, const bool live,
               const float fv[HC_RPG * HC_N]) {
  const uint hc = pc.hc, d = pc.d, r0 = rg * HC_RPG;
  const uint xrow = pc.xoff + t * hc * d;
  // This column of X' in registers. hc = HC_N is a compile-time constant: every loop below is unrolled, so all
  // the loads of X, o and the coefficients are in flight together (a loop over a run-time hc made each of them
  // wait for the previous one).
  float xv[HC_N];
#if HC_POST
  float xin[HC_N];
  [[unroll]] for (uint j = 0u; j < HC_N; ++j) xin[j] = live ? xs[xrow + j * d + c] : 0.0;
#if HC_ADD
  precise const float ov = live ? os[pc.ooff + t * d + c] + oas[pc.aoff + t * d + c] : 0.0;
#else
  const float ov = live ? os[pc.ooff + t * d + c] : 0.0;
#endif
  const uint cb = pc.coff + t * pc.cstride;
  // post and C in registers before any store below: with the coefficients in a buffer this shader may write (the
  // tail's finish rewrites them in place), a load after a store to outs could not be moved ahead of it
  float cv[HC_N + HC_N * HC_N];
  [[unroll]] for (uint i = 0u; i < HC_N + HC_N * HC_N; ++i) cv[i] = coeff[cb + HC_N + i];
  [[unroll]] for (uint k = 0u; k < HC_N; ++k) {
    precise float acc = cv[k] * ov;
    [[unroll]] for (uint j = 0u; j < HC_N; ++j) acc += cv[HC_N + j * HC_N + k] * xin[j];
    xv[k] = live ? acc : 0.0;
    if (live && rg == 0u) outs[pc.outoff + t * hc * d + k * d + c] = acc;
  }
#else
  [[unroll]] for (uint k = 0u; k < HC_N; ++k) xv[k] = live ? xs[xrow + k * d + c] : 0.0;
#endif
  if (pc.has_mix == 0u) return;  // uniform
  // Every row's products first (HC_ROWS = rows + 1 is a compile-time constant, so the accumulators are registers
  // and all the loads of fn are in flight together), then one reduction step for all rows: the sums are the
  // per-row wg_sum's (subgroup sums, then the subgroups in order), with two barriers instead of two per row.
  precise ACC acc[HC_RPG];  // precise: no FMA contraction, so every pipeline of this source (with or without HC_TAIL) sums alike
  const uint pb = pc.poff + (t * pc.nblk + b) * (pc.rows + 1u);
  [[unroll]] for (uint r = 0u; r < HC_RPG; ++r) {
    const uint rr = r0 + r;
    acc[r] = ACC(0);
    if (live && rr < HC_ROWS)
      [[unroll]] for (uint k = 0u; k < HC_N; ++k) {
        const ACC x = ACC(xv[k]);
        acc[r] += rr + 1u < HC_ROWS ? ACC(fv[r * HC_N + k]) * x : x * x;
      }
  }
#if REDUCE_SUBGROUP
  [[unroll]] for (uint r = 0u; r < HC_RPG; ++r) {
    const ACC v = acc_subgroup_sum(acc[r]);
    if (subgroupElect()) red_rows[gl_SubgroupID * HC_RPG + r] = v;
  }
  barrier();
  for (uint r = lid; r < HC_RPG; r += WG_SIZE) {  // HC_RPG may exceed the workgroup
    ACC s = ACC(0);
    for (uint i = 0u; i < gl_NumSubgroups; ++i) s += red_rows[i * HC_RPG + r];
    if (r0 + r < HC_ROWS) part[pb + r0 + r] = s;
  }
#else
  [[unroll]] for (uint r = 0u; r < HC_RPG; ++r) {
    const ACC v = wg_sum(acc[r]);
    if (lid == 0u && r0 + r < HC_ROWS) part[pb + r0 + r] = v;
  }
#endif
}

void main() {
  const uint g0 = wg_index();
  const uint groups = (pc.tokens + HC_TOK - 1u) / HC_TOK;
  if (g0 >= groups * pc.nblk * HC_RSPLIT) return;  // uniform over the workgroup
  const uint rg = g0 % HC_RSPLIT, g = g0 / HC_RSPLIT;
  const uint tg = g / pc.nblk, b = g % pc.nblk, lid = gl_LocalInvocationID.x, hc = pc.hc, d = pc.d;
  const uint c = b * HC_BLOCK + lid;
  const bool live = c < d;
  // This workgroup's rows of fn for this column, requested first: they do not depend on X', so their latency (a
  // cold read per layer) overlaps the loads of X, o and the coefficients.
  const uint r0 = rg * HC_RPG;
  float fv[HC_RPG * HC_N];  // (registers; loaded once for all the workgroup's tokens)
  [[unroll]] for (uint r = 0u; r < HC_RPG; ++r)
    [[unroll]] for (uint k = 0u; k < HC_N; ++k) {
      const uint rr = r0 + r;
      fv[r * HC_N + k] = pc.has_mix != 0u && live && rr + 1u < HC_ROWS ? fn[pc.fnoff + rr * hc * d + k * d + c] : 0.0;
    }
#if HC_TOK > 1
  for (uint i = 0u; i < HC_TOK; ++i) {
    const uint t = tg * HC_TOK + i;
    if (t >= pc.tokens) break;  // uniform
    if (i > 0u) barrier();      // the previous token's reads of red_rows are done
    one_token(t, rg, b, lid, c, live, fv);
  }
#else
  const uint t = tg;
  one_token(t, rg, b, lid, c, live, fv);
  if (pc.has_mix == 0u) return;  // uniform
#if HC_TAIL
  // The last of token t's nblk·HC_RSPLIT workgroups runs the finish (common/mhc_finish.glsl) on the partials and
  // X' all of them wrote: each workgroup makes its writes visible (memoryBarrierBuffer, then the workgroup barrier)
  // before one invocation counts it; the workgroup that counts last reads them back through the coherent bindings
  // and returns the counter to 0 for the next dispatch that uses it (after a pipeline barrier).
  memoryBarrierBuffer();
  barrier();
  if (lid == 0u) {  // device-scope fences on both sides of the count (release before, acquire after)
    memoryBarrierBuffer();
    tail_last = atomicAdd(cnt[pc.cntoff + t], 1u) + 1u == pc.nblk * HC_RSPLIT;
    memoryBarrierBuffer();
  }
  barrier();
  if (!tail_last) return;  // uniform (shared)
  if (lid == 0u) cnt[pc.cntoff + t] = 0u;
  memoryBarrierBuffer();
  hcf_args a;
  a.t = t, a.hc = hc, a.d = d, a.nblk = pc.nblk, a.rows = pc.rows, a.iters = pc.iters;
  a.xoff = HC_POST != 0 ? pc.outoff : pc.xoff;
  a.poff = pc.poff, a.boff = pc.boff, a.soff = pc.soff, a.coff = HC_COUT != 0 ? pc.cooff : pc.coff, a.yoff = pc.yoff;
  a.cstride = pc.cstride, a.nwoff = pc.nwoff, a.foldoff = pc.foldoff, a.fstride = pc.fstride, a.qoff = pc.qoff;
  a.norm_eps = pc.norm_eps, a.hc_eps = pc.hc_eps, a.head_scale = pc.head_scale, a.rms_eps = pc.rms_eps;
  hc_finish(a);
#endif
#endif  // HC_TOK
}

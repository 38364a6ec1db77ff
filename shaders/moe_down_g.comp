#version 460
#extension GL_GOOGLE_include_directive : require
// Expert-grouped MoE phase 2 (kernels::moe with n >= 2; moe_down.comp is the per-pair kernel): one workgroup per
// (expert e, block of ROWS_PER_WG rows of d) walks e's pairs in tiles of MOE_NB: y[p, r] = W2_e[r, :] · h[p, :]
// for every pair p = t·KS + j of e. moe_sum.comp then adds a token's slots in ascending expert id.
// Push constants: mat_pc with rows = the stack's ((NS + MOE_SHARED)·d, or more: a routed_only_scope leaves the
// shared expert in it; d = MOE_DIM), cols = I, n = tokens, xoff = h, x_stride = the lists'
// first word, yoff = y, pad = E (or the slot map's offset with MOE_SLOTS, E = MOE_E).
// Defines: TEAMS, ROWS_PER_WG (divides d), MOE_TOPK, MOE_SHARED, MOE_DIM, MOE_INTER, MOE_NB, MOE_FAST, the format's.
#include "common/base.glsl"
#include "common/formats.glsl"
#include "common/moe.glsl"
#include "common/moe_grouped.glsl"

layout(std430, binding = 4) writeonly buffer Y { float ys[]; };
layout(std430, binding = 6) readonly buffer Lists { uint lists[]; };
#ifndef MOE_SLOTS
#define MOE_SLOTS 0
#endif
#if MOE_SLOTS
layout(std430, binding = 8) readonly buffer SlotMap { uint slot_map[]; };
#endif

void main() {
#if MOE_SLOTS
  const uint E = MOE_E, NS = MOE_SLOTS;
#else
  const uint E = pc.pad, NS = E;
#endif
  const uint KS = MOE_TOPK + MOE_SHARED, d = MOE_DIM, I = pc.cols;
  const uint bpe = d / ROWS_PER_WG, ne = E + MOE_SHARED;
  const uint g = wg_index();
  if (g >= ne * bpe) return;  // uniform over the workgroup
  const uint e = g / bpe, blk = g % bpe;
  const uint cnt = lists[pc.x_stride + e];
  if (cnt == 0u) return;  // uniform
#if MOE_SLOTS
  const uint si = e < E ? slot_map[pc.pad + e] : NS;
  if (e < E && si >= NS) return;  // not in a slot: moe_sum.comp writes NaN for those tokens
#else
  const uint si = e;
#endif
  const uint lb = pc.x_stride + ne + e * pc.n * MOE_TOPK;  // moe_group.comp's layout
  const uint team = gl_LocalInvocationID.x / LANES, lane = gl_LocalInvocationID.x % LANES;
  const uint qi = min(team, ROWS_PER_WG - 1u), q = blk * ROWS_PER_WG + qi;
  const uint r0 = si * d + blk * ROWS_PER_WG;
  tables_init(r0 / ROWS_PER_WG);
  const row_t R = row_begin(r0 + qi, team);
  for (uint i0 = 0u; i0 < cnt; i0 += MOE_NB) {  // uniform
#define G_XB(t) pc.xoff + lists[lb + min(i0 + t, cnt - 1u)] * I
    G_TILE_DOT(R, r0 + qi, MOE_FAST != 0, lane)
    if (team >= ROWS_PER_WG || lane != 0u) continue;
#define G_OUT(t) if (i0 + t < cnt) ys[pc.yoff + lists[lb + i0 + t] * d + q] = acc##t;
    G_REP(G_OUT)
  }
}

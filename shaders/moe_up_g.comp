#version 460
#extension GL_GOOGLE_include_directive : require
// Expert-grouped MoE phase 1 (kernels::moe with n >= 2; moe_up.comp is the per-pair kernel): one workgroup per
// (expert e, block of ROWS_PER_WG rows of I) walks e's pairs (moe_group.comp's list) in tiles of MOE_NB, so the
// expert's gate/up rows are read once per tile instead of once per (token, slot). First the gate rows (g into h),
// then the up rows: h[p, q] = silu(min(g, L)) · clamp(u, −L, L) · w[t, j] — moe_up.comp's expression.
// Push constants: mat_pc with rows = the stack's (2(NS + MOE_SHARED)·I, or more: a routed_only_scope leaves the
// shared expert in it; I = MOE_INTER), cols = d, n = tokens, xoff = x, x_stride = the lists'
// first word (binding 6: counts, then lists), yoff = h, y_stride = weights offset, pad = E (or the slot map's
// offset with MOE_SLOTS, E = MOE_E). Workgroup E is the shared expert (stacked at index NS).
// Defines: TEAMS, ROWS_PER_WG (divides I), MOE_TOPK, MOE_SHARED, MOE_DIM, MOE_INTER, MOE_LIMIT, MOE_NB, MOE_FAST, the
// format's.
#include "common/base.glsl"
#include "common/formats.glsl"
#include "common/moe.glsl"
#include "common/swiglu.glsl"
#include "common/moe_grouped.glsl"

layout(std430, binding = 4) buffer H { float hs[]; };
layout(std430, binding = 6) readonly buffer Lists { uint lists[]; };
layout(std430, binding = 7) readonly buffer Wr { float wr[]; };
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
  const uint KS = MOE_TOPK + MOE_SHARED, I = MOE_INTER, d = pc.cols;
  const uint bpe = I / ROWS_PER_WG, ne = E + MOE_SHARED;
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
  const uint qi = min(team, ROWS_PER_WG - 1u), q = blk * ROWS_PER_WG + qi;  // idle teams shadow the last row
  const bool writer = team < ROWS_PER_WG && lane == 0u;
  const uint g0 = 2u * si * I + blk * ROWS_PER_WG;
  const float L = MOE_LIMIT;
  for (uint pass = 0u; pass < 2u; ++pass) {  // 0: gate rows, 1: up rows
    const uint r0 = g0 + pass * I;
    barrier();  // every team is done with the previous block's tables
    tables_init(r0 / ROWS_PER_WG);
    const row_t R = row_begin(r0 + qi, team);
    for (uint i0 = 0u; i0 < cnt; i0 += MOE_NB) {  // uniform
#define G_XB(t) pc.xoff + (lists[lb + min(i0 + t, cnt - 1u)] / KS) * d
      G_TILE_DOT(R, r0 + qi, MOE_FAST != 0, lane)
      if (!writer) continue;
#define G_OUT(t)                                                                          \
  if (i0 + t < cnt) {                                                                     \
    const uint p = lists[lb + i0 + t], hi = pc.yoff + p * I + q;                          \
    if (pass == 0u) {                                                                     \
      hs[hi] = acc##t; /* g, read back by this invocation in pass 1 */                    \
    } else {                                                                              \
      const float gv = hs[hi], uv = acc##t;                                               \
      const uint j = p % KS;                                                              \
      hs[hi] = swiglu_clamped(gv, uv, L, j < MOE_TOPK ? wr[pc.y_stride + (p / KS) * MOE_TOPK + j] : 1.0); \
    }                                                                                     \
  }
      G_REP(G_OUT)
    }
  }
}

#version 460
#extension GL_GOOGLE_include_directive : require
// MoE phase 2 (kernels/moe.hpp): out[t, r] = Σ over the token's slots in ascending expert id (equal ids: slot
// order, as moe_forward's buckets) of W2_e[r, :] · h[t, j, :], added in that order starting from the first term.
// then (MOE_SHARED) the shared expert E's term last, as moe_forward. One workgroup per (token, block of
// ROWS_PER_WG rows of d); the slots are sorted once per workgroup. An id ≥ E makes the token's outputs NaN.
// Push constants: mat_pc with rows = (E + MOE_SHARED)·d, cols = I, n = tokens, xoff = h, x_stride = ids offset,
// yoff = out, pad = E. Defines: TEAMS, ROWS_PER_WG (divides d), MOE_TOPK, MOE_SHARED, MOE_DIM, MOE_INTER, and the format's.
// Expert cache (MOE_SLOTS > 0): as moe_up.comp — rows = (MOE_SLOTS + MOE_SHARED)·d, routed expert e read at
// stacked index slot_map[e] (binding 8, first word pc.pad; E = the define MOE_E), the sum order still ascending
// expert id; an entry ≥ MOE_SLOTS makes the token's outputs NaN.
#include "common/base.glsl"
#include "common/formats.glsl"
#include "common/moe.glsl"

layout(std430, binding = 4) writeonly buffer Out { float outs[]; };
layout(std430, binding = 6) readonly buffer Ids { uint ids[]; };
#ifndef MOE_SLOTS
#define MOE_SLOTS 0
#endif
#if MOE_SLOTS
layout(std430, binding = 8) readonly buffer SlotMap { uint slot_map[]; };
#endif

#define KS (MOE_TOPK + MOE_SHARED)
shared uint slot_e[KS], slot_j[KS];

void main() {
#if MOE_SLOTS
  const uint E = MOE_E, NS = MOE_SLOTS;  // routed experts, routed matrices stacked
#else
  const uint E = pc.pad, NS = E;
#endif
  const uint d = MOE_DIM, I = pc.cols;
  const uint bpt = d / ROWS_PER_WG;  // row blocks per token
  const uint g = wg_index();
  if (g >= pc.n * bpt) return;  // uniform over the workgroup
  const uint t = g / bpt, blk = g % bpt;
  const uint lid = gl_LocalInvocationID.x, team = lid / LANES, lane = lid % LANES;
  if (lid == 0u) {  // insertion sort of the token's (id, slot) pairs by id, stable
    for (uint j = 0u; j < MOE_TOPK; ++j) {
      const uint e = ids[pc.x_stride + t * MOE_TOPK + j];
      uint i = j;
      for (; i > 0u && slot_e[i - 1u] > e; --i) {
        slot_e[i] = slot_e[i - 1u];
        slot_j[i] = slot_j[i - 1u];
      }
      slot_e[i] = e;
      slot_j[i] = j;
    }
#if MOE_SHARED
    slot_e[MOE_TOPK] = E;  // the shared expert, last
    slot_j[MOE_TOPK] = MOE_TOPK;
#endif
  }
  barrier();
  const uint qi = min(team, ROWS_PER_WG - 1u), q = blk * ROWS_PER_WG + qi;
  float total = 0.0;
  for (uint s = 0u; s < KS; ++s) {
    const uint e = slot_e[s];
#if MOE_SLOTS
    const uint si = s < MOE_TOPK ? (e < E ? slot_map[pc.pad + e] : NS) : NS;  // stacked index
    if (s < MOE_TOPK && si >= NS) {  // uniform: an invalid id or an expert not in a slot
#else
    const uint si = e;
    if (s < MOE_TOPK && e >= E) {  // uniform
#endif
      total = uintBitsToFloat(0x7FC00000u);
      break;
    }
    const uint r0 = si * d + blk * ROWS_PER_WG;
    barrier();  // every team is done with the previous expert's tables
    tables_init(r0 / ROWS_PER_WG);
    const uint hb = pc.xoff + (t * KS + slot_j[s]) * I;  // h of this slot
    const float y = team_sum(row_dot_part(row_begin(r0 + qi, team), r0 + qi, hb, lane));
    total = s == 0u ? y : total + y;
  }
  if (team < ROWS_PER_WG && lane == 0u) outs[pc.yoff + t * d + q] = total;
}

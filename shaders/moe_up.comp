#version 460
#extension GL_GOOGLE_include_directive : require
// MoE phase 1 (kernels/moe.hpp): for every (token t, slot j) pair and block of ROWS_PER_WG rows of the expert
// e = ids[t, j]: g = W1_e x_t, u = W3_e x_t (the gate and up rows of the stacked gate/up matrix: matrix 2e is
// W1_e, 2e + 1 is W3_e, each I rows), then
//   h[t, j, q] = silu(min(g, L)) · clamp(u, −L, L) · w[t, j]          (f32, in that order, as moe.hpp)
// With MOE_SHARED, slot MOE_TOPK of every token is the shared expert (stacked as expert E, weight 1); h holds
// KS = MOE_TOPK + MOE_SHARED slots per token. An id ≥ E gives NaN rows (route_score / route_hash never write one).
// Push constants: common/formats.glsl's mat_pc with rows = 2(E + MOE_SHARED)·I, cols = d, n = tokens, xoff = x,
// x_stride = ids offset, yoff = h, y_stride = weights offset, pad = E (routed experts).
// Defines: TEAMS, ROWS_PER_WG (divides I), MOE_TOPK, MOE_SHARED, MOE_DIM, MOE_INTER, MOE_LIMIT, and the format's (formats_gpu.cpp).
// Expert cache (MOE_SLOTS > 0, kernels::moe's slot_map): the stacked matrix holds MOE_SLOTS routed experts and the
// shared one at index MOE_SLOTS; routed expert e is read at index slot_map[e] (binding 8, first word pc.pad), the
// routed count is the define MOE_E; an entry ≥ MOE_SLOTS gives NaN rows like an invalid id.
#include "common/base.glsl"
#include "common/formats.glsl"
#include "common/moe.glsl"
#include "common/swiglu.glsl"

layout(std430, binding = 4) writeonly buffer H { float hs[]; };
layout(std430, binding = 6) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 7) readonly buffer Wr { float wr[]; };
#ifndef MOE_SLOTS
#define MOE_SLOTS 0
#endif
#if MOE_SLOTS
layout(std430, binding = 8) readonly buffer SlotMap { uint slot_map[]; };
#endif

void main() {
#if MOE_SLOTS
  const uint E = MOE_E, NS = MOE_SLOTS;  // routed experts, routed matrices stacked
#else
  const uint E = pc.pad, NS = E;
#endif
  const uint KS = MOE_TOPK + MOE_SHARED, I = MOE_INTER, d = pc.cols;
  const uint bpp = I / ROWS_PER_WG;  // row blocks per (token, slot)
  const uint g = wg_index();
  if (g >= pc.n * KS * bpp) return;  // uniform over the workgroup
  const uint p = g / bpp, blk = g % bpp, t = p / KS, j = p % KS;
  const uint team = gl_LocalInvocationID.x / LANES, lane = gl_LocalInvocationID.x % LANES;
  const bool routed = j < MOE_TOPK;
  const uint e = routed ? ids[pc.x_stride + t * MOE_TOPK + j] : E;
  const uint q = blk * ROWS_PER_WG + min(team, ROWS_PER_WG - 1u);  // idle teams shadow the last row
#if MOE_SLOTS
  const uint si = routed ? (e < E ? slot_map[pc.pad + e] : NS) : NS;  // stacked index
  if (routed && si >= NS) {  // uniform: an invalid id or an expert not in a slot
#else
  const uint si = e;
  if (routed && e >= E) {  // uniform
#endif
    if (team < ROWS_PER_WG && lane == 0u) hs[pc.yoff + p * I + q] = uintBitsToFloat(0x7FC00000u);
    return;
  }
  const uint xb = pc.xoff + t * d;
  const uint g0 = 2u * si * I + blk * ROWS_PER_WG, u0 = g0 + I;  // first rows of this block: gate, up
  const uint qi = q - blk * ROWS_PER_WG;                             // this team's row in the block
  tables_init(g0 / ROWS_PER_WG);
  const float gv = team_sum(row_dot_part(row_begin(g0 + qi, team), g0 + qi, xb, lane));
  barrier();  // every team is done with the gate block's tables
  tables_init(u0 / ROWS_PER_WG);
  const float uv = team_sum(row_dot_part(row_begin(u0 + qi, team), u0 + qi, xb, lane));
  if (team >= ROWS_PER_WG || lane != 0u) return;
  hs[pc.yoff + p * I + q] = swiglu_clamped(gv, uv, MOE_LIMIT, routed ? wr[pc.y_stride + t * MOE_TOPK + j] : 1.0);
}

#version 460
#extension GL_GOOGLE_include_directive : require
// Expert-grouped MoE (kernels::moe with n >= 2), step 1: the (token, slot) pairs of every expert. Workgroup e < E
// scans ids [n, MOE_TOPK] in order and writes the pairs that chose expert e, in ascending pair order, as h-slot
// indices t·KS + j (KS = MOE_TOPK + MOE_SHARED); workgroup E (MOE_SHARED) lists every token's shared slot.
// Output (binding 1, from word pc.loff): counts [E + MOE_SHARED], then lists [E + MOE_SHARED][pc.n · MOE_TOPK]
// (a token may choose one expert in several slots, so a list can be longer than n).
// An id >= E is in no list (moe_sum.comp turns that token's output into NaN).
// MOE_PASS = slots (kernels::moe_extras::pass): one pass of an expert cache — an expert whose slot-map entry
// (binding 2 from word pc.smoff) is >= MOE_PASS gets an empty list, and the shared expert's list is empty unless
// pc.shared_on. Both only save work: the row kernels skip an unmapped expert anyway, and the shared expert's rows
// are the same bits in every pass that computes them.
#ifndef MOE_PASS
#define MOE_PASS 0
#endif
#include "common/base.glsl"

layout(push_constant) uniform mg_pc {
  uint n, idoff, loff, E, smoff, shared_on;
} pc;
layout(std430, binding = 0) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 1) writeonly buffer Lists { uint lists[]; };
#if MOE_PASS
layout(std430, binding = 2) readonly buffer SlotMap { uint slot_map[]; };
#endif

#define KS (MOE_TOPK + MOE_SHARED)
shared uint scan[WG_SIZE];

void main() {
  const uint e = wg_index(), lid = gl_LocalInvocationID.x;
  const uint ne = pc.E + MOE_SHARED;
  if (e >= ne) return;  // uniform
  const uint lb = pc.loff + ne + e * pc.n * MOE_TOPK;
#if MOE_PASS
  if (e == pc.E ? pc.shared_on == 0u : slot_map[pc.smoff + e] >= uint(MOE_PASS)) {  // uniform: not in this pass
    if (lid == 0u) lists[pc.loff + e] = 0u;
    return;
  }
#endif
  if (e == pc.E) {  // the shared expert: every token
    for (uint t = lid; t < pc.n; t += WG_SIZE) lists[lb + t] = t * KS + MOE_TOPK;
    if (lid == 0u) lists[pc.loff + e] = pc.n;
    return;
  }
  const uint total = pc.n * MOE_TOPK;
  uint base = 0u;
  for (uint p0 = 0u; p0 < total; p0 += WG_SIZE) {  // uniform
    const uint p = p0 + lid;
    const uint hit = p < total && ids[pc.idoff + p] == e ? 1u : 0u;
    scan[lid] = hit;
    barrier();
    for (uint s = 1u; s < WG_SIZE; s <<= 1) {  // inclusive prefix sum (Hillis-Steele)
      const uint v = lid >= s ? scan[lid - s] : 0u;
      barrier();
      scan[lid] += v;
      barrier();
    }
    if (hit != 0u) lists[lb + base + scan[lid] - 1u] = (p / MOE_TOPK) * KS + p % MOE_TOPK;
    base += scan[WG_SIZE - 1u];
    barrier();
  }
  if (lid == 0u) lists[pc.loff + e] = base;
}

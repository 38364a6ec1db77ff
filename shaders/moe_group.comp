#version 460
#extension GL_GOOGLE_include_directive : require
// Expert-grouped MoE (kernels::moe with n >= 2), step 1: the (token, slot) pairs of every expert. Workgroup e < E
// scans ids [n, MOE_TOPK] in order and writes the pairs that chose expert e, in ascending pair order, as h-slot
// indices t·KS + j (KS = MOE_TOPK + MOE_SHARED); workgroup E (MOE_SHARED) lists every token's shared slot.
// Output (binding 1, from word pc.loff): counts [E + MOE_SHARED], then lists [E + MOE_SHARED][pc.n · MOE_TOPK]
// (a token may choose one expert in several slots, so a list can be longer than n).
// An id >= E is in no list (moe_sum.comp turns that token's output into NaN).
#include "common/base.glsl"

layout(push_constant) uniform mg_pc {
  uint n, idoff, loff, E;
} pc;
layout(std430, binding = 0) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 1) writeonly buffer Lists { uint lists[]; };

#define KS (MOE_TOPK + MOE_SHARED)
shared uint scan[WG_SIZE];

void main() {
  const uint e = wg_index(), lid = gl_LocalInvocationID.x;
  const uint ne = pc.E + MOE_SHARED;
  if (e >= ne) return;  // uniform
  const uint lb = pc.loff + ne + e * pc.n * MOE_TOPK;
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

#version 460
#extension GL_GOOGLE_include_directive : require
// Batch-1 MoE, after the down pass (kernels::moe, kernels_moe.cpp): out[r] = Σ_s y[s, r] over the routed slots in
// ascending expert id (ties: slot order), then the shared expert — moe_down.comp's order. A routed id ≥ MOE_E makes
// the whole output NaN (the contract of kernels::moe). Expert cache (MOE_SLOTS > 0): so does a routed expert whose
// slot_map entry (binding 3, first word pc.smoff) is ≥ MOE_SLOTS (the row kernel read slot 0 for it).
#ifndef MOE_SLOTS
#define MOE_SLOTS 0
#endif
#include "common/base.glsl"

layout(push_constant) uniform ms_pc {
  uint d, yoff, ooff, idoff;
#if MOE_SLOTS
  uint smoff;
#endif
} pc;
layout(std430, binding = 0) readonly buffer Yd { float ys[]; };
layout(std430, binding = 1) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 2) writeonly buffer O { float outs[]; };
#if MOE_SLOTS
layout(std430, binding = 3) readonly buffer SlotMap { uint slot_map[]; };
#endif

void main() {
  const uint r = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  if (r >= pc.d) return;
  uint order[MOE_TOPK];
  bool bad = false;
  for (uint j = 0u; j < MOE_TOPK; ++j) {  // stable insertion sort by id (as moe_down.comp)
    const uint e = ids[pc.idoff + j];
    bad = bad || e >= MOE_E;
#if MOE_SLOTS
    bad = bad || (e < MOE_E && slot_map[pc.smoff + e] >= MOE_SLOTS);
#endif
    uint i = j;
    for (; i > 0u && ids[pc.idoff + order[i - 1u]] > e; --i) order[i] = order[i - 1u];
    order[i] = j;
  }
  float total = ys[pc.yoff + order[0] * pc.d + r];
  for (uint j = 1u; j < MOE_TOPK; ++j) total += ys[pc.yoff + order[j] * pc.d + r];
#if MOE_SHARED
  total += ys[pc.yoff + MOE_TOPK * pc.d + r];
#endif
  outs[pc.ooff + r] = bad ? uintBitsToFloat(0x7FC00000u) : total;
}

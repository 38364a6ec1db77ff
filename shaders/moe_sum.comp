#version 460
#extension GL_GOOGLE_include_directive : require
// MoE after the down pass (kernels::moe: the batch-1 int8 path and the expert-grouped path, kernels_moe.cpp):
// out[t, r] = Σ_s y[t·KS + s, r] over token t's routed slots in ascending expert id (ties: slot order), then the
// shared expert — moe_down.comp's order. A routed id ≥ MOE_E makes token t's output NaN (the contract of
// kernels::moe). Expert cache (MOE_SLOTS > 0): so does a routed expert whose slot_map entry (binding 3, first word
// pc.smoff) is ≥ MOE_SLOTS (its y was not written, or the row kernel read slot 0 for it).
// MOE_ADD = 1: out[t, r] = that sum + add[t, r] (binding 4 at pc.aoff; kernels::moe_extras::add).
#ifndef MOE_SLOTS
#define MOE_SLOTS 0
#endif
#ifndef MOE_ADD
#define MOE_ADD 0
#endif
#include "common/base.glsl"
#include "common/moe_sum.glsl"

layout(push_constant) uniform ms_pc {
  uint d, yoff, ooff, idoff, n, smoff, aoff, pad;
} pc;
layout(std430, binding = 0) readonly buffer Yd { float ys[]; };
layout(std430, binding = 1) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 2) writeonly buffer O { float outs[]; };
#if MOE_SLOTS
layout(std430, binding = 3) readonly buffer SlotMap { uint slot_map[]; };
#endif
#if MOE_ADD
layout(std430, binding = 4) readonly buffer Add { float adds[]; };
#endif

#define KS (MOE_TOPK + MOE_SHARED)

void main() {
  const uint i = wg_index() * WG_SIZE + gl_LocalInvocationID.x;
  if (i >= pc.n * pc.d) return;
  const uint t = i / pc.d, r = i % pc.d, io = pc.idoff + t * MOE_TOPK, yo = pc.yoff + t * KS * pc.d + r;
  // The ids and every slot's value in registers first (all loads in flight together; MOE_TOPK is a compile-time
  // constant), then added in order (common/moe_sum.glsl).
  uint id[MOE_TOPK];
  float yv[MOE_TOPK];
  bool bad = false;
  [[unroll]] for (uint j = 0u; j < MOE_TOPK; ++j) {
    id[j] = ids[io + j];
    yv[j] = ys[yo + j * pc.d];
  }
  [[unroll]] for (uint j = 0u; j < MOE_TOPK; ++j) {
    bad = bad || id[j] >= MOE_E;
#if MOE_SLOTS
    bad = bad || (id[j] < MOE_E && slot_map[pc.smoff + id[j]] >= MOE_SLOTS);
#endif
  }
  float total = moe_ordered_sum(id, yv);
#if MOE_SHARED
  total += ys[yo + MOE_TOPK * pc.d];
#endif
#if MOE_ADD
  total += adds[pc.aoff + t * pc.d + r];
#endif
  outs[pc.ooff + t * pc.d + r] = bad ? uintBitsToFloat(0x7FC00000u) : total;
}

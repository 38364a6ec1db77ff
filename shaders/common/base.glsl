// Included first by every cmfx shader (right after #version). The host's preamble defines, for every shader:
//   LANES            threads that share one row (the device's subgroup size when REDUCE_SUBGROUP)
//   REDUCE_SUBGROUP  1: reductions with subgroupAdd/Max; 0: through shared memory only
//   HAS_STORAGE8/16  1: 8-/16-bit storage buffer access; 0: 32-bit words + bit extraction
//   ACC_DOUBLE       1: f64 accumulators in the normalisation reductions (device has shaderFloat64)
//   SHUFFLE_F64      1: f64 subgroup sums as a butterfly of 32-bit shuffles (acc_subgroup_sum) instead of
//                    subgroupAdd(double) (device has subgroup shuffles and f64)
// and the workgroup size comes as specialization constant 0 (WG_SIZE).
#extension GL_EXT_control_flow_attributes : enable
#if REDUCE_SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#endif
#if HAS_STORAGE8
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#endif
#if HAS_STORAGE16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint WG_SIZE = 64;

#if ACC_DOUBLE
#define ACC double
#else
#define ACC float
#endif

#define F32_INF uintBitsToFloat(0x7F800000u)

#if REDUCE_SUBGROUP
#if SHUFFLE_F64 && ACC_DOUBLE
#extension GL_KHR_shader_subgroup_shuffle : require
// Σ over the subgroup of an ACC (every invocation active): an XOR butterfly of 32-bit shuffles. Every invocation
// adds the same pairs (a + b == b + a exactly), so all end with the same bits.
ACC acc_subgroup_sum(ACC v) {
  for (uint m = gl_SubgroupSize >> 1; m > 0u; m >>= 1) v += packDouble2x32(subgroupShuffleXor(unpackDouble2x32(v), m));
  return v;
}
#else
ACC acc_subgroup_sum(ACC v) { return subgroupAdd(v); }
#endif
#endif

// Linear workgroup index of a (possibly 2-D) dispatch: the host spreads large grids over y.
uint wg_index() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

#ifndef CMFX_REDUCE_GLSL
#define CMFX_REDUCE_GLSL
// Workgroup-wide reductions (every invocation of the workgroup must call them: they contain barriers).
// Subgroup variant: one subgroupAdd/Max per subgroup, then the per-subgroup partials in a fixed order.
// Shared variant: a tree over WG_SIZE (a power of two) slots.
shared ACC red_acc[WG_SIZE];
shared float red_f[WG_SIZE];

ACC wg_sum(ACC v) {
#if REDUCE_SUBGROUP
  v = acc_subgroup_sum(v);
  if (subgroupElect()) red_acc[gl_SubgroupID] = v;
  barrier();
  ACC t = ACC(0);
  for (uint i = 0u; i < gl_NumSubgroups; ++i) t += red_acc[i];
  barrier();
  return t;
#else
  const uint id = gl_LocalInvocationID.x;
  red_acc[id] = v;
  barrier();
  for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1) {
    if (id < s) red_acc[id] += red_acc[id + s];
    barrier();
  }
  const ACC t = red_acc[0];
  barrier();
  return t;
#endif
}

// max that never lets a NaN win (as the CPU's `a > m ? a : m`)
float nan_free_max(float a, float b) { return a > b ? a : b; }

float wg_max(float v) {
#if REDUCE_SUBGROUP
  v = subgroupMax(v);  // inputs are NaN-free (callers map NaN away)
  if (subgroupElect()) red_f[gl_SubgroupID] = v;
  barrier();
  float t = -F32_INF;
  for (uint i = 0u; i < gl_NumSubgroups; ++i) t = nan_free_max(red_f[i], t);
  barrier();
  return t;
#else
  const uint id = gl_LocalInvocationID.x;
  red_f[id] = v;
  barrier();
  for (uint s = WG_SIZE / 2u; s > 0u; s >>= 1) {
    if (id < s) red_f[id] = nan_free_max(red_f[id + s], red_f[id]);
    barrier();
  }
  const float t = red_f[0];
  barrier();
  return t;
#endif
}
#endif  // CMFX_REDUCE_GLSL

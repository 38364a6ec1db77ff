// The int8 activations of common/act_q8.glsl formed by 32 invocations per block of 32 values, one value each:
// the block's maximum by a butterfly, each value's rounding by act_q8_block's operations (so the same bits as
// quantize_act.comp's one-invocation-per-block mode), the 8 packed words gathered by invocations 0–7 of the block
// and the scale and sum written by invocation 8 — a short chain and coalesced loads instead of one invocation's 32
// loads and roundings in a row.
// ACT_WIDE_SG = 1 (the host: subgroup arithmetic and shuffles, a subgroup size that is a multiple of 32): the
// butterflies and gathers through subgroup shuffles (lanes e and e ^ m, m < 32, share a subgroup); 0: through shared
// memory (smaller subgroups, e.g. lavapipe's 8).
// The includer declares uint qw[], float qf[], int qi[] (one output binding) and includes common/act_q8.glsl first;
// WG_SIZE must be a multiple of 32, and invocation lid holds value lid % 32 of its block.
#ifndef ACT_WIDE_SG
#define ACT_WIDE_SG 0
#endif
#if ACT_WIDE_SG
#extension GL_KHR_shader_subgroup_shuffle : require
#else
shared float aw_abs[WG_SIZE];
shared int aw_q[WG_SIZE];
#endif

/// v: this invocation's value; live: its block exists (every invocation of the workgroup must call this: barriers);
/// base: the word offset of the block's vector in the output, b: the block in it, blocks: blocks per vector.
void act_q8_wide(float v, bool live, uint base, uint b, uint blocks) {
  const uint lid = gl_LocalInvocationID.x, e = lid % 32u;
  float amax = abs(v);
#if ACT_WIDE_SG
  [[unroll]] for (uint m = 16u; m > 0u; m >>= 1) amax = max(amax, subgroupShuffleXor(amax, m));
#else
  barrier();  // a previous call's readers of the shared arrays are done
  aw_abs[lid] = amax;
  barrier();
  [[unroll]] for (uint m = 16u; m > 0u; m >>= 1) {
    if (e < m) aw_abs[lid] = max(aw_abs[lid], aw_abs[lid + m]);
    barrier();
  }
  amax = aw_abs[lid - e];
#endif
  const float sx = amax > 0.0 ? amax / 127.0 : 1.0, inv = 1.0 / sx;
  const int q = int(clamp(roundEven(v * inv), -127.0, 127.0));
  // word s = e of the block (e < 8): bytes i = the values act_plane_elem(s, i); Σ q over the block
  const uint s = e % 8u;
  uint w = 0u;
  int sum = q;
#if ACT_WIDE_SG
  const uint l0 = gl_SubgroupInvocationID - e;
  [[unroll]] for (uint i = 0u; i < 4u; ++i) w |= (uint(subgroupShuffle(q, l0 + act_plane_elem(s, i))) & 0xFFu) << (8u * i);
  [[unroll]] for (uint m = 16u; m > 0u; m >>= 1) sum += subgroupShuffleXor(sum, m);
#else
  aw_q[lid] = q;
  barrier();
  [[unroll]] for (uint i = 0u; i < 4u; ++i) w |= (uint(aw_q[lid - e + act_plane_elem(s, i)]) & 0xFFu) << (8u * i);
  sum = 0;
  if (e == 8u)
    for (uint i = 0u; i < 32u; ++i) sum += aw_q[lid - e + i];
#endif
  if (!live) return;
  if (e < 8u) qw[base + 8u * b + e] = w;
  if (e == 8u) {
    qf[base + ACT_SCALE_WORD(blocks) + b] = 0.5 * sx;
    qi[base + ACT_BSUM_WORD(blocks) + b] = ACT_OFF2 * sum;
  }
}

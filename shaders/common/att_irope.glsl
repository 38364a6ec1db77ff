// The inverse RoPE of an attention output's rope tail, applied where the output is written
// (kernels::attn_shape::inv_rope_dim; ATT_IROPE = that dimension, 0 = none): channel c of a head's last ATT_IROPE
// channels pairs with c ^ 1 (the tail starts on an even channel) and is rotated by the conjugate of the row's
// cos/sin, through common/rope.glsl as rope.comp's inverse — so the fused output is the unfused one bit for bit.
// The including shader declares cs_rows (cos/sin rows [rows, ATT_IROPE]) and stages each head's values in shared
// memory so that an invocation reads its partner's.
#include "common/rope.glsl"
// v: channel c's value, pv: channel c ^ 1's; row: the query row; csoff: cs_rows' first float.
float att_irope(float v, float pv, uint c, uint row, uint csoff) {
  const uint t0 = ATT_HD - ATT_IROPE;
  if (c < t0) return v;
  const uint j = c - t0, cb = csoff + row * ATT_IROPE + (j & ~1u);
  const float co = cs_rows[cb], s = -cs_rows[cb + 1u];
  return (j & 1u) == 0u ? rope_pair(v, pv, co, s).x : rope_pair(pv, v, co, s).y;
}

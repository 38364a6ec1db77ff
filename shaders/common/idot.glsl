// The integer-dot chunk products of the int8-activation row kernels (matvec_rows.comp with ACT_I8, moe_rows_g8.comp):
// the quantised activations at binding 3 (common/act_q8.glsl's planes), the packed 4×8-bit dot products, and
// chunk_idot, Σ over a chunk's 32 weights of (integer weight) · xq for one row. Include after common/formats.glsl
// (raw_t, the format's defines); call i8_tables() before the first tables_init barrier.
#extension GL_EXT_spirv_intrinsics : require
#include "common/act_q8.glsl"
// OpSUDot / OpSDot of SPV_KHR_integer_dot_product on packed 4×8-bit operands (glslang has no GLSL built-in yet).
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4452)
int dot_su(int a, uint b, spirv_literal int packed_format);
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int dot_ss(int a, int b, spirv_literal int packed_format);
#define PACKED_4X8 0
// The quantised activations (planes of common/act_q8.glsl; pc.xoff = their first word inside binding 3).
layout(std430, binding = 3) readonly buffer XQ4 { uvec4 xq4[]; };
layout(std430, binding = 3) readonly buffer XQF { float xqf[]; };
layout(std430, binding = 3) readonly buffer XQI { int xqi[]; };
#if defined(FMT_MXFP4)
// E2M1 code → int8 (2·value) in the low byte: 16 entries, one per bank, so lookups by random codes never
// conflict (a 256-entry byte-pair table was bank-conflict-bound).
shared uint mx_nib[16];
void i8_tables() {
  if (gl_LocalInvocationID.x < 16u) mx_nib[gl_LocalInvocationID.x] = uint(int(2.0 * tabf[TAB_E2M1 + gl_LocalInvocationID.x])) & 0xFFu;
}
// bytes k0, k0+1 of a weight word → 4 int8 weights in element order
uint mx_word(uint v, uint k0) {
  const uint b0 = (v >> (8u * k0)) & 0xFFu, b1 = (v >> (8u * k0 + 8u)) & 0xFFu;
  return mx_nib[mx_nibble(b0, 0u)] | (mx_nib[mx_nibble(b0, 1u)] << 8) | (mx_nib[mx_nibble(b1, 0u)] << 16) |
         (mx_nib[mx_nibble(b1, 1u)] << 24);
}
#else
void i8_tables() {}
#endif
// Σ over the chunk's 32 weights of (integer weight) · xq for one row: the packed dot products. A chunk's integer
// operands (chunk_ops, from chunk_operands) are what the dot products take: a ladder's raw words (each bit-plane
// is one shift and mask away), MXFP4's codes as 8 words of 4 int8 (2·e2m1, element order) — 32 table lookups,
// which moe_rows_g8.comp does once per (row, chunk) for every pair of its tile (chunk_idot_ops).
#if defined(FMT_MXFP4)
struct chunk_ops {
  uvec4 a, b;  // words 0-3 pair with xa, 4-7 with xb
};
chunk_ops chunk_operands(raw_t q) {
  chunk_ops o;
  o.a = uvec4(mx_word(q.q[0], 0u), mx_word(q.q[0], 2u), mx_word(q.q[1], 0u), mx_word(q.q[1], 2u));
  o.b = uvec4(mx_word(q.q[2], 0u), mx_word(q.q[2], 2u), mx_word(q.q[3], 0u), mx_word(q.q[3], 2u));
  return o;
}
int chunk_idot_ops(chunk_ops o, uvec4 xa, uvec4 xb) {
  int s = 0;
  [[unroll]] for (uint j = 0u; j < 4u; ++j)
    s += dot_ss(int(o.a[j]), int(xa[j]), PACKED_4X8) + dot_ss(int(o.b[j]), int(xb[j]), PACKED_4X8);
  return s;  // Σ (2·e2m1) · xq: the combination multiplies by sx / 2
}
#else
#define chunk_ops raw_t
chunk_ops chunk_operands(raw_t q) { return q; }
#define PLANE_MASK (((1u << LADDER_ELEM_BITS) - 1u) * 0x01010101u)
// Bit-plane p of a word is masked in place, not shifted down: its bytes are 2^(LADDER_ELEM_BITS·p) times the
// elements (at most 0xF0 / 0xC0, inside the unsigned operand's 8 bits). The planes are summed from the top one
// down, the partial sum shifted right by LADDER_ELEM_BITS before the next plane joins (Horner); every partial is
// a multiple of that power of two, so the result is the shifted planes' sum exactly — one shift per plane and
// chunk instead of one per plane and word (q2tp 3 instead of 6 per chunk, q4tp 1 instead of 4).
int chunk_idot_ops(raw_t q, uvec4 xa, uvec4 xb) {
  int s = 0;
  [[unroll]] for (int p = int(ELEMS_PER_BYTE) - 1; p >= 0; --p) {
    if (p + 1 < int(ELEMS_PER_BYTE)) s >>= LADDER_ELEM_BITS;
    [[unroll]] for (uint w = 0u; w < LADDER_VALUE_BYTES / 4u; ++w) {
      const uint slot = w * ELEMS_PER_BYTE + uint(p);
      const uint xw = slot < 4u ? xa[slot] : xb[slot - 4u];
      s += dot_su(int(xw), q.q[w] & (PLANE_MASK << (LADDER_ELEM_BITS * uint(p))), PACKED_4X8);
    }
  }
  return 2 * s;  // 2 Σ q · xq: the combination subtracts 2·off · Σ xq and multiplies by sx / 2
}
#endif
int chunk_idot(raw_t q, uvec4 xa, uvec4 xb) { return chunk_idot_ops(chunk_operands(q), xa, xb); }
// An integer |v| < 2^22 (every chunk sum above: at most 32 · 2 · 15 · 127 in magnitude, less its block's offset
// term) as a float by moving bits, as common/formats.glsl's field_minus does for unsigned fields: 1.5 · 2^23 + v
// lies in [2^23, 2^24), where the float ulp is 1, so its bits minus that float are v exactly — float(v) without the
// integer → float conversion, which NVIDIA GPUs issue at a quarter of the integer instruction rate.
#define IDOT_MAGIC 0x4B400000  // the bits of 1.5 · 2^23
float idot_float(int v) { return intBitsToFloat(v + IDOT_MAGIC) - 12582912.0; }

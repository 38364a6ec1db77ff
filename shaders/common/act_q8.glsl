// Int8 activations for the integer-dot matvec (matvec_rows.comp with ACT_I8), written by quantize_act.comp.
// The rule is include/cmfx/kernels/act_q8.hpp's: per block of 32 values sx = absmax / 127 (1 for an all-zero
// block), xq = round_half_even(x / sx) clamped to ±127.
//
// One token's activations of B = cols / 32 blocks, in 32-bit words from its first word (the next token's start
// ACT_VEC_WORDS(B) words later):
//   [0, 8B)     xq, 8 packed words per block; word s of a block holds 4 int8 (byte i = act_plane_elem(s, i))
//   [8B, 9B)    sx / 2 per block (f32)
//   [9B, 10B)   2·off · Σ xq per block (int32; off = the ladder's value offset, 0 for MXFP4)
// so that word s pairs with bit-plane p of weight word w (s = w·EPB + p) in one packed dot product.
// Needs the weight format's #defines (FMT_*, LADDER_*, MX_*) — or, where a shader packs vectors for another format
// than its own weights' (matvec_rows.comp's SwiGLU tail: h for the down matrix), the target's ACT_T_* defines
// (kernels' act_target_defines, from the format traits): ACT_T_MX (1: MXFP4's natural order), ACT_T_EPB (elements
// per weight byte), ACT_T_LOW_FIRST, ACT_T_OFF2 (2·the ladder's value offset, an integer).
#define ACT_WORDS_PER_BLOCK 10u
// words from one token's vector to the next: padded to 16 bytes (kernels::act_q8_bytes)
#define ACT_VEC_WORDS(blocks) ((ACT_WORDS_PER_BLOCK * (blocks) + 3u) & ~3u)
#define ACT_SCALE_WORD(blocks) (8u * (blocks))
#define ACT_BSUM_WORD(blocks) (9u * (blocks))
#if !defined(ACT_T_MX)
#if defined(FMT_MXFP4)
#define ACT_T_MX 1
#define ACT_T_OFF2 0
#elif defined(FMT_Q4TP) || defined(FMT_Q2TP)
#define ACT_T_MX 0
#define ACT_T_EPB (8u / LADDER_ELEM_BITS)
#define ACT_T_LOW_FIRST LADDER_LOW_FIRST
#define ACT_T_OFF2 int(2.0 * LADDER_OFFSET)
#else
#error "int8 activations are defined for q4tp, q2tp and MXFP4"
#endif
#endif
#if ACT_T_MX
// natural order: the matvec turns each weight byte into two int8 with a LUT
uint act_plane_elem(uint s, uint i) { return 4u * s + i; }
#else
// byte i of value word w holds elements (4w + i)·EPB + pos; bit-plane p holds pos(p) = p when low bits come first
uint act_plane_elem(uint s, uint i) {
  const uint epb = ACT_T_EPB, w = s / epb, p = s % epb;
  return (4u * w + i) * epb + (ACT_T_LOW_FIRST != 0 ? p : epb - 1u - p);
}
#endif
const int ACT_OFF2 = ACT_T_OFF2;

// One block of 32 values quantised by that rule: the 8 packed words, sx / 2 and 2·off·Σ xq (quantize_act.comp, and
// the tail of matvec_rows.comp's MoE gate/up rows that forms h itself).
struct act_block {
  uint w[8];
  float half_sx;
  int bsum2;
};
act_block act_q8_block(const float v[32]) {
  float amax = 0.0;
  [[unroll]] for (uint i = 0u; i < 32u; ++i) amax = max(amax, abs(v[i]));
  const float sx = amax > 0.0 ? amax / 127.0 : 1.0, inv = 1.0 / sx;
  act_block r;
  int sum = 0;
  [[unroll]] for (uint s = 0u; s < 8u; ++s) {
    uint w = 0u;
    [[unroll]] for (uint i = 0u; i < 4u; ++i) {
      const int q = int(clamp(roundEven(v[act_plane_elem(s, i)] * inv), -127.0, 127.0));
      sum += q;
      w |= (uint(q) & 0xFFu) << (8u * i);
    }
    r.w[s] = w;
  }
  r.half_sx = 0.5 * sx;
  r.bsum2 = ACT_OFF2 * sum;
  return r;
}

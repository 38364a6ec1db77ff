// Weight-format decoding for matvec.comp and dequant.comp. Every constant below (FMT_*, HALF_*, LADDER_*, Q4_*,
// TAB_*, ...) is a #define generated on the host from the C++ format traits (src/vk/formats_gpu.cpp,
// include/cmfx/formats/); the per-code values of E2M1 / E4M3 and exp2 of every f16 come in the `tab` buffer,
// also computed on the host from the traits. Nothing about a format is typed here except how the bits combine.
//
// A format provides (r = row relative to the dispatch's first row, slot = its row slot in the workgroup):
//   CHUNK (preamble)            elements decoded at once on the fast path (one 16-byte load, 8 for q2tp)
//   tables_init(wg)             per-workgroup tables (LUTs, ladders of the workgroup's ROWS_PER_WG rows: row
//                               wg·ROWS_PER_WG + j for team j, or TABLE_ROW(wg, j) where the shader defines it);
//                               contains a barrier when it needs one: every invocation must call it
//   row_t row_begin(r, slot)    per-row values (row scale, ladder slot, scale-tile row)
//   raw_t fetch(R, r, k)        the loads of chunk k of row r (fast path: cols % CHUNK == 0, planes aligned)
//   chunk_scale(R, q)           the chunk's scale (1 for dense formats)
//   decode4(R, q, s, k, j)      values 4j .. 4j+3 of the chunk (j < CHUNK/4, a constant at every call site:
//                               no arrays, so no driver can leave a chunk's values in local memory)
//   decode_elem(R, r, c)        element (r, c), any shape and alignment (generic path)
//   CHUNK_WORDS, chunk_word(R, r, k), chunk_aux(R, r, k)   (formats whose fast-path chunks are whole 32-bit words
//                               of plane 0, HAS_CHUNK_WORDS) the chunk's size in words, the w0 index of its first
//                               word and fetch's second load (code / scale), for kernels that split a chunk's
//                               words between lanes (matvec_rows.comp SUB): decode4 reads q.q[] by the index of
//                               the word within what was loaded, so a lane that loaded words p·n .. p·n + n − 1
//                               decodes them with j counted from its first word
// Both paths produce exactly F::decode_row's f32 values: the same products in the same order.

layout(push_constant) uniform mat_pc {
  uint rows;      // rows in this dispatch
  uint cols;
  uint n;         // batch rows of x / y (matvec)
  uint r0;        // global index of row 0 of this dispatch (FP8 scale tiles)
  uint res0;      // byte offsets of the dispatch's start inside bindings 0, 1, 2
  uint res1;
  uint res2;
  uint e_off;     // q4_block / q4t: element offset of row 0 inside its first 32-group
  uint xoff;      // float offset of x (matvec)
  uint x_stride;  // floats between batch rows of x
  uint yoff;      // float offset of y / out
  uint y_stride;  // floats between batch rows of y
  uint aux0;      // groups (or scale tiles) per row
  uint aux1;      // ladder code bytes per row
  uint fast;      // 1: chunked fast path
  uint pad;
#ifdef MAT_PC_TAIL
  uint cntoff;    // matvec_rows.comp's MoE tails: first arrival counter, output and routing-weight offsets
  uint toff;
  uint woff;
  uint tpad;
#endif
} pc;

// The weight planes' block names (W0*, W1*, W2*) are also listed by src/vk/spirv_nontemporal.cpp
// (nontemporal_blocks: device_options::nontemporal_weights marks loads by block name) — rename both together.
layout(std430, binding = 0) readonly buffer W0 { uint w0[]; };
layout(std430, binding = 0) readonly buffer W0Q { uvec4 w0q[]; };
layout(std430, binding = 0) readonly buffer W0D { uvec2 w0d[]; };
layout(std430, binding = 1) readonly buffer W1 { uint w1[]; };
layout(std430, binding = 2) readonly buffer W2 { uint w2[]; };
// Host tables (TAB_* offsets in words): exp2f of every f16 bit pattern (ladders), E2M1 and E4M3 code values.
layout(std430, binding = 5) readonly buffer TABF { float tabf[]; };
#if HAS_STORAGE8
layout(std430, binding = 0) readonly buffer W0B { uint8_t w0b[]; };
layout(std430, binding = 1) readonly buffer W1B { uint8_t w1b[]; };
layout(std430, binding = 2) readonly buffer W2B { uint8_t w2b[]; };
#define LD8(B8, W, b) uint(B8[b])
#else
#define LD8(B8, W, b) ((W[(b) >> 2] >> (((b) & 3u) << 3)) & 0xFFu)
#endif
#if HAS_STORAGE16
layout(std430, binding = 0) readonly buffer W0H { uint16_t w0h[]; };  // q4t's 18-byte tiles are 2-byte aligned
#endif

// Byte, half-word and word loads at any byte offset of a plane.
#define DEF_LOADERS(P, W, B8)                                                        \
  uint ld8_##P(uint b) { return LD8(B8, W, b); }                                          \
  uint ld16_##P(uint b) {                                                                 \
    const uint s = (b & 3u) << 3, i = b >> 2;                                             \
    return ((W[i] >> s) | (s == 24u ? W[i + 1u] << 8 : 0u)) & 0xFFFFu;                    \
  }                                                                                       \
  uint ld32_##P(uint b) {                                                                 \
    const uint s = (b & 3u) << 3;                                                         \
    const uint v = W[b >> 2];                                                             \
    return s == 0u ? v : (v >> s) | (W[(b >> 2) + 1u] << (32u - s));                     \
  }
DEF_LOADERS(w0, w0, w0b)
DEF_LOADERS(w1, w1, w1b)
DEF_LOADERS(w2, w2, w2b)

// 16 bytes of plane 0 at any byte offset (q4t tiles are 18 bytes).
uvec4 ld128_w0(uint b) {
  const uint i = b >> 2, s = (b & 3u) << 3;
  const uvec4 a = uvec4(w0[i], w0[i + 1u], w0[i + 2u], w0[i + 3u]);
  if (s == 0u) return a;
  const uint e = w0[i + 4u], t = 32u - s;
  return uvec4((a.x >> s) | (a.y << t), (a.y >> s) | (a.z << t), (a.z >> s) | (a.w << t), (a.w >> s) | (e << t));
}

// ---------------------------------------------------------------- scalar element decoders (exact)
// IEEE half: no denormal ever enters a floating-point operation (some devices flush them): subnormal halves are
// integer × 2^(1 − bias − mantissa bits), exact.
#define HALF_SUBNORMAL_UNIT uintBitsToFloat(uint(128 - HALF_BIAS - HALF_MAN_BITS) << 23)  // 2^(1 - bias - m)
float half_bits(uint h) {
  const uint em = h & 0x7FFFu;
  const float v = em < (1u << HALF_MAN_BITS) ? float(em) * HALF_SUBNORMAL_UNIT : unpackHalf2x16(em).x;
  return (h & (1u << (HALF_EXP_BITS + HALF_MAN_BITS))) != 0u ? -v : v;
}
// Two halves of a word at once (one conversion instruction), subnormals fixed up as above.
vec2 half2_bits(uint w) {
  vec2 v = unpackHalf2x16(w);
  const uint lo = w & 0x7FFFu, hi = (w >> 16) & 0x7FFFu, sbit = 1u << (HALF_EXP_BITS + HALF_MAN_BITS);
  if (lo < (1u << HALF_MAN_BITS)) v.x = ((w & sbit) != 0u ? -1.0 : 1.0) * (float(lo) * HALF_SUBNORMAL_UNIT);
  if (hi < (1u << HALF_MAN_BITS)) v.y = (((w >> 16) & sbit) != 0u ? -1.0 : 1.0) * (float(hi) * HALF_SUBNORMAL_UNIT);
  return v;
}
float bf16_bits(uint h) { return uintBitsToFloat(h << (32u - BF16_TOTAL_BITS)); }
// UE8M0: 2^(k − bias), the all-ones code is NaN; below 2^−126 the result is an f32 subnormal built from bits.
float ue8m0_bits(uint k) {
  if (k == UE8M0_NAN_CODE) return uintBitsToFloat(0x7FC00000u);
  const int e = int(k) - UE8M0_BIAS;
  return uintBitsToFloat(e >= -126 ? uint(e + 127) << 23 : 1u << uint(e + 149));
}

// ---------------------------------------------------------------- small integers to f32 without a conversion
// The ladders' value codes become floats by moving bits, not by an int → float conversion instruction (NVIDIA
// GPUs issue those at a fraction of the FMA rate; on the H200 this measured +3–7 % on q4tp f32 products at one lane
// per chunk, docs/PERF.md "Thirty-fourth session" — their main bound was the activation loads). An unsigned field
// v < 2^21 written into the mantissa of 2^22 (whose unit in the last place is 0.5) one bit up is the float 2^22 + v,
// exactly; subtracting 2^22 + off (off a multiple of 0.5, |off| < 2^21) leaves v − off, exactly — the same float as
// float(v) − off. `sh` is a constant at every call site.
#define FIELD_MAGIC 0x4A800000u  // 2^22
#define FIELD_MAGIC_F 4194304.0
// ((w >> sh) & mask) − off
float field_minus(uint w, uint sh, uint mask, float off) {
  const uint f = (sh > 0u ? w >> (sh - 1u) : w << 1) & (mask << 1);
  return uintBitsToFloat(f | FIELD_MAGIC) - (FIELD_MAGIC_F + off);
}

#if defined(FMT_MXFP4) || defined(FMT_FP8_B128) || defined(FMT_FP8_B32)
#if SCALE_F32
uint load_scale_raw(uint idx) { return ld32_w1(pc.res1 + 4u * idx); }
float scale_value(uint raw) { return uintBitsToFloat(raw); }
#else
uint load_scale_raw(uint idx) { return ld8_w1(pc.res1 + idx); }
float scale_value(uint raw) { return ue8m0_bits(raw); }
#endif
#endif

// The loads of one chunk: up to 16 bytes of values and one word of scale / code.
struct raw_t {
  uvec4 q;
  uint a;
};
// Per-row values: row scale (q8), ladder slot (q4tp/q2tp), first scale of the tile row (fp8).
struct row_t {
  float s;
  uint slot;
  uint tile;
};

// ---------------------------------------------------------------- per format
#if defined(FMT_F32)
#if CHUNK != 4
#error "f32 chunks are one 16-byte load"
#endif
void tables_init(uint wg) {}
row_t row_begin(uint r, uint slot) { return row_t(0.0, 0u, 0u); }
raw_t fetch(row_t R, uint r, uint k) { return raw_t(w0q[(pc.res0 >> 4) + r * (pc.cols >> 2) + k], 0u); }
float chunk_scale(row_t R, raw_t q) { return 1.0; }
vec4 decode4(row_t R, raw_t q, float s, uint k, uint j) { return uintBitsToFloat(q.q); }
float decode_elem(row_t R, uint r, uint c) { return uintBitsToFloat(ld32_w0(pc.res0 + (r * pc.cols + c) * 4u)); }

#elif defined(FMT_F16) || defined(FMT_BF16)
#if CHUNK != 8
#error "16-bit chunks are one 16-byte load"
#endif
void tables_init(uint wg) {}
row_t row_begin(uint r, uint slot) { return row_t(0.0, 0u, 0u); }
raw_t fetch(row_t R, uint r, uint k) { return raw_t(w0q[(pc.res0 >> 4) + r * (pc.cols >> 3) + k], 0u); }
#define HAS_CHUNK_WORDS 1
#define CHUNK_WORDS 4
uint chunk_word(row_t R, uint r, uint k) { return (pc.res0 >> 2) + (r * (pc.cols >> 3) + k) * 4u; }
uint chunk_aux(row_t R, uint r, uint k) { return 0u; }
float chunk_scale(row_t R, raw_t q) { return 1.0; }
vec4 decode4(row_t R, raw_t q, float s, uint k, uint j) {
  const uint a = q.q[2u * j], b = q.q[2u * j + 1u];
#if defined(FMT_F16)
  return vec4(half2_bits(a), half2_bits(b));
#else
  return vec4(bf16_bits(a & 0xFFFFu), bf16_bits(a >> 16), bf16_bits(b & 0xFFFFu), bf16_bits(b >> 16));
#endif
}
float decode_elem(row_t R, uint r, uint c) {
  const uint h = ld16_w0(pc.res0 + (r * pc.cols + c) * 2u);
#if defined(FMT_F16)
  return half_bits(h);
#else
  return bf16_bits(h);
#endif
}

#elif defined(FMT_Q8_ROW) || defined(FMT_Q8_2F)
#if CHUNK != 16
#error "8-bit chunks are one 16-byte load"
#endif
void tables_init(uint wg) {}
row_t row_begin(uint r, uint slot) { return row_t(half_bits(ld16_w1(pc.res1 + Q8_ROW_SCALE_BYTES * r)), 0u, 0u); }
#if defined(FMT_Q8_2F)
float col_scale(uint c) { return half_bits(ld16_w2(pc.res2 + Q8_COL_SCALE_BYTES * c)); }
#endif
raw_t fetch(row_t R, uint r, uint k) { return raw_t(w0q[(pc.res0 >> 4) + r * (pc.cols >> 4) + k], 0u); }
#if defined(FMT_Q8_ROW)
#define HAS_CHUNK_WORDS 1
#define CHUNK_WORDS 4
uint chunk_word(row_t R, uint r, uint k) { return (pc.res0 >> 2) + (r * (pc.cols >> 4) + k) * 4u; }
uint chunk_aux(row_t R, uint r, uint k) { return 0u; }
#endif
float chunk_scale(row_t R, raw_t q) { return R.s; }
vec4 decode4(row_t R, raw_t q, float s, uint k, uint j) {
  const int v = int(q.q[j]);
  vec4 w = vec4(float(bitfieldExtract(v, 0, 8)), float(bitfieldExtract(v, 8, 8)), float(bitfieldExtract(v, 16, 8)),
                float(bitfieldExtract(v, 24, 8))) * s;
#if defined(FMT_Q8_2F)
  // the 4 column scales: 2 words of a plane that may be 2-byte aligned only; (q * row) * col as the CPU
  const uint b = pc.res2 + Q8_COL_SCALE_BYTES * (16u * k + 4u * j);
  w = w * vec4(half2_bits(ld32_w2(b)), half2_bits(ld32_w2(b + 4u)));
#endif
  return w;
}
float decode_elem(row_t R, uint r, uint c) {
  float v = float(bitfieldExtract(int(ld8_w0(pc.res0 + r * pc.cols + c)), 0, 8)) * R.s;
#if defined(FMT_Q8_2F)
  v = v * col_scale(c);
#endif
  return v;
}

#elif defined(FMT_Q4_BLOCK) || defined(FMT_Q4T)
#if CHUNK != Q4_GROUP || Q4_GROUP_BYTES != 16
#error "q4 chunks are one group of 16 nibble bytes"
#endif
void tables_init(uint wg) {}
row_t row_begin(uint r, uint slot) { return row_t(0.0, 0u, 0u); }
// Flat groups of Q4_GROUP elements over the whole tensor; group g of this dispatch.
#if Q4_TILED
uint nib_byte(uint g, uint j) { return ld8_w0(pc.res0 + Q4_TILE_BYTES * g + Q4_GROUP_SCALE_BYTES + j); }
#if HAS_STORAGE16  // tiles start on even bytes: 16-bit loads, no funnel shifts
uint group_scale_bits(uint g) { return uint(w0h[(pc.res0 + Q4_TILE_BYTES * g) >> 1]); }
uvec4 nib_bytes(uint g) {
  const uint h = (pc.res0 + Q4_TILE_BYTES * g + Q4_GROUP_SCALE_BYTES) >> 1;
  uvec4 q;
  [[unroll]] for (uint i = 0u; i < 4u; ++i) q[i] = uint(w0h[h + 2u * i]) | (uint(w0h[h + 2u * i + 1u]) << 16);
  return q;
}
#else
uint group_scale_bits(uint g) { return ld16_w0(pc.res0 + Q4_TILE_BYTES * g); }
uvec4 nib_bytes(uint g) { return ld128_w0(pc.res0 + Q4_TILE_BYTES * g + Q4_GROUP_SCALE_BYTES); }
#endif
#else
uint group_scale_bits(uint g) { return ld16_w1(pc.res1 + Q4_GROUP_SCALE_BYTES * g); }
uint nib_byte(uint g, uint j) { return ld8_w0(pc.res0 + Q4_GROUP_BYTES * g + j); }
uvec4 nib_bytes(uint g) { return w0q[(pc.res0 >> 4) + g]; }
#endif
uint nibble(uint byte, uint odd) { return (odd == (Q4_LOW_FIRST != 0 ? 1u : 0u)) ? byte >> 4 : byte & 15u; }
raw_t fetch(row_t R, uint r, uint k) {
  const uint g = r * (pc.cols / Q4_GROUP) + k;
  return raw_t(nib_bytes(g), group_scale_bits(g));
}
float chunk_scale(row_t R, raw_t q) { return half_bits(q.a); }
vec4 decode4(row_t R, raw_t q, float s, uint k, uint j) {  // bytes 2j, 2j+1
  const uint b = q.q[j >> 1] >> (16u * (j & 1u)), b0 = b & 0xFFu, b1 = (b >> 8) & 0xFFu;
  return (vec4(float(nibble(b0, 0u)), float(nibble(b0, 1u)), float(nibble(b1, 0u)), float(nibble(b1, 1u))) - Q4_OFFSET) * s;
}
float decode_elem(row_t R, uint r, uint c) {
  const uint i = pc.e_off + r * pc.cols + c, g = i / Q4_GROUP, j = i % Q4_GROUP;
  return (float(nibble(nib_byte(g, j >> 1), j & 1u)) - Q4_OFFSET) * half_bits(group_scale_bits(g));
}

#elif defined(FMT_Q4TP) || defined(FMT_Q2TP)
#if CHUNK != LADDER_GROUP
#error "ladder chunks are one group"
#endif
// The per-row ladder t[c] = t[c-1] * 2^step, t[0] = 2^lo, built once per row by ONE invocation with a
// sequential loop (the format's definition; 2^(lo + c*step) differs by ulps). 2^x of every f16 x comes from
// the host table (exp2f of every f16, the table the CPU ladder kernels use).
shared float ladder[ROWS_PER_WG * LADDER_RUNGS];
void tables_init(uint wg) {
  for (uint j = gl_LocalInvocationID.x; j < ROWS_PER_WG; j += WG_SIZE) {  // one pass unless ROWS_PER_WG > WG_SIZE
#ifdef TABLE_ROW
    const uint r = TABLE_ROW(wg, j);  // the including shader's row of team j
#else
    const uint r = wg * ROWS_PER_WG + j;
#endif
    if (r >= pc.rows) continue;
    const uint p = pc.res1 + LADDER_PARAM_BYTES * r;
    const float ratio = tabf[TAB_EXP2 + ld16_w1(p + 2u)];
    precise float t = tabf[TAB_EXP2 + ld16_w1(p)];
    // Entry c of the row's table is code c's scale: with LADDER_CODE0_ZERO, entry 0 holds the zero and code c ≥ 1
    // rung c − 1 (the last rung is no code's), so code_scale is one shared load with no compare and select.
    const uint c0 = LADDER_CODE0_ZERO != 0 ? 1u : 0u;
    if (c0 != 0u) ladder[j * LADDER_RUNGS] = 0.0;
    ladder[j * LADDER_RUNGS + c0] = t;
    for (uint c = c0 + 1u; c < LADDER_RUNGS; ++c) {
      t = t * ratio;
      ladder[j * LADDER_RUNGS + c] = t;
    }
  }
  barrier();
}
row_t row_begin(uint r, uint slot) { return row_t(0.0, slot, 0u); }
// Group g's code: its bits counted from the 32-bit word that holds the row's first code byte (the row's part is
// loop-invariant in the row kernels), one word shifted down and the next word's bits only where the code crosses
// into it — as fetch2 below; a byte-addressed 16-bit load took ~5 instructions more per chunk.
uint group_code(uint r, uint g) {
  const uint b = pc.res2 + r * pc.aux1, bit = ((b & 3u) << 3) + LADDER_CODE_BITS * g;
  const uint i = (b >> 2) + (bit >> 5), s = bit & 31u;
  uint c = w2[i] >> s;
  if (s > 32u - LADDER_CODE_BITS) c |= w2[i + 1u] << (32u - s);
  return c & (LADDER_RUNGS - 1u);
}
float code_scale(row_t R, uint code) { return ladder[R.slot * LADDER_RUNGS + code]; }
#define ELEMS_PER_BYTE (8u / LADDER_ELEM_BITS)
#define ELEM_MASK ((1u << LADDER_ELEM_BITS) - 1u)
// element i of a group from its byte (LSB first when LADDER_LOW_FIRST)
uint ladder_elem(uint byte, uint i) {
  const uint pos = i % ELEMS_PER_BYTE;
  return (byte >> (LADDER_ELEM_BITS * (LADDER_LOW_FIRST != 0 ? pos : ELEMS_PER_BYTE - 1u - pos))) & ELEM_MASK;
}
raw_t fetch(row_t R, uint r, uint k) {
  const uint g = r * pc.aux0 + k;
#if LADDER_VALUE_BYTES == 16
  const uvec4 q = w0q[(pc.res0 >> 4) + g];
#else
  const uvec4 q = uvec4(w0d[(pc.res0 >> 3) + g], 0u, 0u);
#endif
  return raw_t(q, group_code(r, k));
}
#define HAS_CHUNK_WORDS 1
#define CHUNK_WORDS (LADDER_VALUE_BYTES / 4)
uint chunk_word(row_t R, uint r, uint k) { return (pc.res0 >> 2) + (r * pc.aux0 + k) * CHUNK_WORDS; }
uint chunk_aux(row_t R, uint r, uint k) { return group_code(r, k); }
float chunk_scale(row_t R, raw_t q) { return code_scale(R, q.a); }
#if LADDER_VALUE_BYTES == 8
// Groups 2p and 2p + 1 of row r (matvec_rows.comp PAIR): their values in one 16-byte load (an even number of
// groups per row and plane 0 on 16 bytes: the host checks) and both codes in c, group 2p's in its low
// LADDER_CODE_BITS bits: the 32-bit word of the code plane that holds their first bit, shifted down, and the next
// word's bits only where the 2·CB bits cross into it (c's bits above 2·CB are not the pair's: the caller masks).
#if 2 * LADDER_CODE_BITS > 32
#error "fetch2 reads two codes from one 32-bit window"
#endif
struct raw2_t {
  uvec4 q;
  uint c;
};
raw2_t fetch2(row_t R, uint r, uint p) {
  const uint b = pc.res2 + r * pc.aux1, bit = ((b & 3u) << 3) + 2u * LADDER_CODE_BITS * p;
  const uint i = (b >> 2) + (bit >> 5), s = bit & 31u;
  uint c = w2[i] >> s;
  if (s > 32u - 2u * LADDER_CODE_BITS) c |= w2[i + 1u] << (32u - s);
  return raw2_t(w0q[(pc.res0 >> 4) + ((r * pc.aux0) >> 1) + p], c);
}
#endif
// element i of the chunk's value bytes minus LADDER_OFFSET (ladder_elem's bits, read from the word)
float lad_value(raw_t q, uint i) {
  const uint pos = i % ELEMS_PER_BYTE;
  const uint sh = 8u * ((i / ELEMS_PER_BYTE) & 3u) +
                  LADDER_ELEM_BITS * (LADDER_LOW_FIRST != 0 ? pos : ELEMS_PER_BYTE - 1u - pos);
  return field_minus(q.q[i / ELEMS_PER_BYTE / 4u], sh, ELEM_MASK, LADDER_OFFSET);
}
vec4 decode4(row_t R, raw_t q, float s, uint k, uint j) {
  const uint i = 4u * j;
  return vec4(lad_value(q, i), lad_value(q, i + 1u), lad_value(q, i + 2u), lad_value(q, i + 3u)) * s;
}
// The f16 tiles' decode (gemm.comp with GEMM_COOP, which enables f16 arithmetic): values 8m .. 8m+7 of the chunk
// as 8 packed halves, (code − offset) · s16, s16 = the chunk's scale rounded to f16 — where decode8_h_ok(s): s16
// normal (or 0) and no value past the f16 range; otherwise the caller rounds decode4's f32 values. code − offset is
// exact: the bits 0x6000 | code << 1 are the half 512 + code (its ulp is 0.5), minus the half 512 + offset (the
// offset is a multiple of 0.5). So each value is rounded once, in the multiply; decode4 rounds the f32 product, so
// the two differ by an f16 rounding of the scale (≤ 2^-11 relative).
#if GEMM_COOP
#define HAS_DECODE8_H 1
uint lad_code(raw_t q, uint i) {
  return ladder_elem((q.q[i / ELEMS_PER_BYTE / 4u] >> (8u * ((i / ELEMS_PER_BYTE) & 3u))) & 0xFFu, i);
}
uint lad_h2(raw_t q, uint i, f16vec2 s2) {
  const uint w = 0x60006000u | (lad_code(q, i) << 1) | (lad_code(q, i + 1u) << 17);
  return packFloat2x16((unpackFloat2x16(w) - f16vec2(float16_t(512.0 + LADDER_OFFSET))) * s2);
}
uvec4 decode8_h(raw_t q, f16vec2 s2, uint m) {
  const uint i = 8u * m;
  return uvec4(lad_h2(q, i, s2), lad_h2(q, i + 2u, s2), lad_h2(q, i + 4u, s2), lad_h2(q, i + 6u, s2));
}
// largest |code − offset|, and the largest scale whose values all stay within the f16 range
#define LADDER_MAX_ABS max(LADDER_OFFSET, float(ELEM_MASK) - LADDER_OFFSET)
float16_t decode8_h_scale(float s) { return float16_t(s); }
bool decode8_h_ok(float s) {
  const float h = abs(float(decode8_h_scale(s)));  // the scale as the multiply sees it (rounded; inf past 65504)
  return s == 0.0 || (h >= 6.103515625e-05 && h * LADDER_MAX_ABS <= 65504.0);
}
#endif
float decode_elem(row_t R, uint r, uint c) {
  const uint g = c / LADDER_GROUP, i = c % LADDER_GROUP;
  const uint byte = ld8_w0(pc.res0 + (r * pc.aux0 + g) * LADDER_VALUE_BYTES + i / ELEMS_PER_BYTE);
  return (float(ladder_elem(byte, i)) - LADDER_OFFSET) * code_scale(R, group_code(r, g));
}

#elif defined(FMT_MXFP4)
#if CHUNK != MX_BLOCK || MX_BLOCK_BYTES != 16
#error "mxfp4 chunks are one block of 16 bytes"
#endif
shared float e2m1_lut[16];
void tables_init(uint wg) {
  if (gl_LocalInvocationID.x < 16u) e2m1_lut[gl_LocalInvocationID.x] = tabf[TAB_E2M1 + gl_LocalInvocationID.x];
  barrier();
}
row_t row_begin(uint r, uint slot) { return row_t(0.0, 0u, 0u); }
uint mx_nibble(uint byte, uint odd) { return (odd == (MX_LOW_FIRST != 0 ? 1u : 0u)) ? byte >> 4 : byte & 15u; }
raw_t fetch(row_t R, uint r, uint k) {
  const uint blk = r * pc.aux0 + k;
  return raw_t(w0q[(pc.res0 >> 4) + blk], load_scale_raw(blk));
}
#define HAS_CHUNK_WORDS 1
#define CHUNK_WORDS 4
uint chunk_word(row_t R, uint r, uint k) { return (pc.res0 >> 2) + (r * pc.aux0 + k) * 4u; }
uint chunk_aux(row_t R, uint r, uint k) { return load_scale_raw(r * pc.aux0 + k); }
float chunk_scale(row_t R, raw_t q) { return scale_value(q.a); }
vec4 decode4(row_t R, raw_t q, float s, uint k, uint j) {  // bytes 2j, 2j+1
  const uint b = q.q[j >> 1] >> (16u * (j & 1u)), b0 = b & 0xFFu, b1 = (b >> 8) & 0xFFu;
  return vec4(e2m1_lut[mx_nibble(b0, 0u)], e2m1_lut[mx_nibble(b0, 1u)], e2m1_lut[mx_nibble(b1, 0u)],
              e2m1_lut[mx_nibble(b1, 1u)]) * s;
}
float decode_elem(row_t R, uint r, uint c) {
  const uint blk = r * pc.aux0 + c / MX_BLOCK;
  const uint b = ld8_w0(pc.res0 + blk * MX_BLOCK_BYTES + (c % MX_BLOCK) / 2u);
  return e2m1_lut[mx_nibble(b, c & 1u)] * scale_value(load_scale_raw(blk));
}

#elif defined(FMT_FP8_B128) || defined(FMT_FP8_B32)
#if CHUNK != 16 || (FP8_TILE % 16) != 0
#error "fp8 chunks are one 16-byte load inside one scale tile"
#endif
shared float e4m3_lut[256];
void tables_init(uint wg) {
  for (uint i = gl_LocalInvocationID.x; i < 256u; i += WG_SIZE) e4m3_lut[i] = tabf[TAB_E4M3 + i];
  barrier();
}
row_t row_begin(uint r, uint slot) { return row_t(0.0, 0u, ((pc.r0 + r) / FP8_TILE) * pc.aux0); }
raw_t fetch(row_t R, uint r, uint k) {
  return raw_t(w0q[(pc.res0 >> 4) + r * (pc.cols >> 4) + k], load_scale_raw(R.tile + (k * 16u) / FP8_TILE));
}
#define HAS_CHUNK_WORDS 1
#define CHUNK_WORDS 4
uint chunk_word(row_t R, uint r, uint k) { return (pc.res0 >> 2) + (r * (pc.cols >> 4) + k) * 4u; }
uint chunk_aux(row_t R, uint r, uint k) { return load_scale_raw(R.tile + (k * 16u) / FP8_TILE); }
float chunk_scale(row_t R, raw_t q) { return scale_value(q.a); }
vec4 decode4(row_t R, raw_t q, float s, uint k, uint j) {
  const uint v = q.q[j];
  return vec4(e4m3_lut[v & 0xFFu], e4m3_lut[(v >> 8) & 0xFFu], e4m3_lut[(v >> 16) & 0xFFu], e4m3_lut[v >> 24]) * s;
}
float decode_elem(row_t R, uint r, uint c) {
  return e4m3_lut[ld8_w0(pc.res0 + r * pc.cols + c)] * scale_value(load_scale_raw(R.tile + c / FP8_TILE));
}
// The batch-1 kernels' E4M3 (matvec_rows.comp, matvec_xreg.comp) without the 256-entry shared-memory LUT (random
// byte indices make its lookups bank-conflict-bound): the sign moves to bit 15 and exponent|mantissa to bits 7..13
// of an f16, whose value is then the E4M3 value times 2^-8 (bias 7 vs 15) for every code, subnormals included; the
// caller folds 2^8 into the chunk scale. Two bytes per unpackHalf2x16. The NaN codes (0x7F, 0xFF) become ±480 — as in the CPU's AVX2 decoder; checkpoints hold
// no NaN weights. Exact for every other code (dequant.comp keeps the LUT decode, bit-exact for all 256).
vec2 e4m3_pair(uint w) {  // bytes in bits 0..7 and 16..23
  return unpackHalf2x16(((w & 0x00800080u) << 8) | ((w & 0x007F007Fu) << 7));
}
vec4 fp8_dec4(raw_t q, uint j) {
  const uint v = q.q[j];
  const vec2 a = e4m3_pair(v & 0x00FF00FFu), b = e4m3_pair((v >> 8) & 0x00FF00FFu);
  return vec4(a.x, b.x, a.y, b.y);
}
// The f16 tiles' decode (GEMM_COOP, as the ladders' above): E4M3 → f16 by moving bits, no table — the sign to bit
// 15 and exponent|mantissa to bits 7..13 give the E4M3 value times 2^-8 exactly for every code (subnormals
// included; the NaN codes 0x7F / 0xFF become the halves ±1.875 = ±480 · 2^-8: checkpoints hold no NaN weights, as
// matvec_rows.comp's decode says), so the chunk's values are (that half) · s16, s16 = f16(s · 256), each rounded
// once in the packed multiply. With a power-of-two scale (UE8M0) s16 is exact and the result is decode4's f32
// value rounded to f16, bit for bit; an f32 scale adds the f16 rounding of s16 (≤ 2^-11 relative).
#if GEMM_COOP
#define HAS_DECODE8_H 1
// bytes 0..3 of v → halves in element order: (b0, b1), (b2, b3)
uvec2 e4m3_h4(uint v) {
  const uint a = ((v & 0x00800080u) << 8) | ((v & 0x007F007Fu) << 7);  // bytes 0 and 2 as halves
  const uint b = (v & 0x80008000u) | ((v >> 1) & 0x3F803F80u);         // bytes 1 and 3
  return uvec2((a & 0xFFFFu) | (b << 16), (a >> 16) | (b & 0xFFFF0000u));
}
uint mul_h2(uint w, f16vec2 s2) { return packFloat2x16(unpackFloat2x16(w) * s2); }
uvec4 decode8_h(raw_t q, f16vec2 s2, uint m) {  // values 8m .. 8m+7 (words 2m, 2m + 1)
  const uvec2 lo = e4m3_h4(q.q[2u * m]), hi = e4m3_h4(q.q[2u * m + 1u]);
  return uvec4(mul_h2(lo.x, s2), mul_h2(lo.y, s2), mul_h2(hi.x, s2), mul_h2(hi.y, s2));
}
// the half the multiply sees for a chunk scale s (decode8_h's caller passes f16vec2(decode8_h_scale(s)))
float16_t decode8_h_scale(float s) { return float16_t(256.0 * s); }
// s16 normal (or s = 0), and the largest |half| (1.875: the NaN codes'; 448 = 1.75 · 2^8 is the largest value) times
// it within the f16 range
bool decode8_h_ok(float s) {
  const float h = abs(float(decode8_h_scale(s)));
  return s == 0.0 || (h >= 6.103515625e-05 && h * 1.875 <= 65504.0);
}
#endif

#else
#error "no weight format defined (the host preamble must define one FMT_*)"
#endif

#if HAS_CHUNK_WORDS
// Words p·n .. p·n + n − 1 of chunk k of row r (n = 1 or 2, a constant at every call site; the chunk's words
// split between CHUNK_WORDS / n lanes) in q.q[0 ..], with the chunk's code / scale.
raw_t fetch_words(row_t R, uint r, uint k, uint p, uint n) {
  const uint w = chunk_word(R, r, k) + p * n;
  return raw_t(n == 1u ? uvec4(w0[w], 0u, 0u, 0u) : uvec4(w0d[w >> 1], 0u, 0u), chunk_aux(R, r, k));
}
#endif

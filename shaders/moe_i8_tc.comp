#version 460
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
// Expert-grouped MoE products with int8 activations on the int8 tensor cores (kernels_moe.cpp moe_grouped_i8 with
// matvec_tuning::moe_i8_tc; the prefill chunks of `--act i8` with q4tp / q2tp experts): y[p, r] = Σ_c W_e[r, c] ·
// x_p[c] for every (token, slot) pair p of expert e — the numbers of moe_rows_g8.comp (per block of 32 columns: the
// integer dot product of the weights' integer values with the activations' int8 values, times the group's ladder
// scale and the activations' sx / 2) with the integer products on the tensor cores (16 × 16 × 32 s8 · s8 → s32).
//
// Workgroup (rb, q): row block rb (SG subgroups × RT tiles of 16 rows) of the expert whose pairs fill tile q of
// moe_i8_gather.comp's tiles (16 pairs each, expert order; off[] at binding 7 maps tiles to experts). Each subgroup
// walks the columns KB blocks of 32 at a time, without workgroup barriers:
//   1. its lanes load the weights of a later step (one row and half of its KB groups each; on the tensor cores two
//      steps ahead, in named registers: register sets A and B for even and odd steps),
//   2. decode the current step into its own shared region: every 2-bit (q2tp) or 4-bit (q4tp) code c as the int8
//      2·(c − offset) (a SWAR add per word), bytes in the activation vectors' plane order (common/act_q8.glsl), and
//      each group's ladder scale per row (from the rows' ladders, built once in shared memory),
//   3. per block kb and row tile: the s32 16 × 16 product of the int8 weights (16 rows × 32) and the tile's
//      activations (32 × 16 pairs, loaded as a fragment straight from the gather's layout), then
//      acc[r, t] += float(product) · (scale[r, kb] · sx[t, kb] / 2) — the block's two scales applied per element
//      (a cooperative matrix is multiplied only by scalars: each component's (r, t) comes from a matrix of indices
//      loaded once, since matrices of one type share their component layout).
// Epilogue: the f32 accumulators stored column-major into the subgroup's region, then y[p · MOE_ROWS_E + row] for the
// tile's pairs (as moe_rows_g8.comp: moe_sum.comp adds them per token).
// Numerics: the integer dot products are exact and the scales are the format's (the rows' ladders built as
// formats.glsl builds them), as on the other int8 paths; the blocks' f32 sums run in column order, so results
// agree with moe_rows_g8.comp's to f32 rounding, not bit for bit.
//
// TC 1: VK_NV_cooperative_matrix (LANES = 32); 2: the same layout, decode, scales and epilogue with the products in
// plain GLSL (component c of a lane is element c·LANES + lane, row-major) — devices without int8 cooperative
// matrices (lavapipe in CI) run everything else of this kernel.
// Bindings: 0–2 the weight planes, 3 the gathered tiles (pc.xoff words), 4 y (pc.yoff floats), 5 tables, 6 lists
// (moe_group.comp's layout from word pc.x_stride), 7 off[] (pc.y_stride), 8 the slot map (MOE_SLOTS, from pc.pad).
// Push constants: common/formats.glsl's mat_pc (cols, n = tokens, the planes, aux0 = groups per row, aux1 = code
// bytes per row); pad = E (or the slot map's offset with MOE_SLOTS; E = MOE_E).
// Defines: TC, SG, RT (1, 2, 4), KB (1, 2, 4; divides cols / 32), VEC (1, 2, 4), MOE_TOPK, MOE_SHARED,
// MOE_ROWS_E (a multiple of 16·RT·SG), [MOE_SLOTS, MOE_E], the format's (q4tp, q2tp).
#if TC == 1
#extension GL_NV_cooperative_matrix : require
#extension GL_NV_integer_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#if LANES != 32
#error "moe_i8_tc.comp: the tensor-core mode is laid out for subgroups of 32"
#endif
#endif
#define ROWS_PER_WG 1  // formats.glsl's workgroup ladder table is not used here (the scales come per group)
#include "common/base.glsl"
#include "common/formats.glsl"
#if !defined(FMT_Q4TP) && !defined(FMT_Q2TP)
#error "moe_i8_tc.comp takes the ladder formats"
#endif
#include "common/act_q8.glsl"
#include "common/moe_i8_tiles.glsl"

#define WG_ROWS (16u * RT * SG)
#define VW (LADDER_VALUE_BYTES / 4)  // value words per group of 32
#define EPB (8 / LADDER_ELEM_BITS)    // codes per byte = int8 words per value word
#if KB >= 2
#define HW (KB * VW / 2)  // value words per lane and row tile (half of the row's step)
#else
#define HW (VW / 2)
#endif
// A subgroup's int8 weights of a step, [tile][kb] blocks of 16 rows at a stride of AS words (48 bytes: the 16-byte
// stores of 8 consecutive rows, and the fragment loads, fall into 8 distinct groups of 4 banks), as uvec4.
#define AS I8T_ROW_WORDS
#define ABLK (16u * AS)  // words per (tile, kb) block
#define AREG (RT * KB * ABLK)
#define REGION (AREG > RT * 256 ? AREG : RT * 256)  // ... and the epilogue's f32 accumulators
shared uvec4 sa4[SG * REGION / 4];
shared float ssw[SG * RT * 16 * KB];  // the groups' scales: [tile][row][kb]
// the ladders of the subgroup's rows (formats.glsl's definition) at a stride of I8T_LADDER_STRIDE words (from the
// host: LADDER_RUNGS + 1, so that the lanes building them, one row each, hit distinct banks)
#define LSTR I8T_LADDER_STRIDE
shared float lad[SG * RT * 16 * LSTR];

layout(std430, binding = 3) readonly buffer XT1 { uint xt1[]; };
layout(std430, binding = 3) readonly buffer XTF { float xtf[]; };
layout(std430, binding = 3) readonly buffer XT4F { vec4 xtf4[]; };
layout(std430, binding = 4) writeonly buffer Y { float ys[]; };
layout(std430, binding = 6) readonly buffer Lists { uint lists[]; };
layout(std430, binding = 7) readonly buffer Off { uint offs[]; };
#ifndef MOE_SLOTS
#define MOE_SLOTS 0
#endif
#if MOE_SLOTS
layout(std430, binding = 8) readonly buffer SlotMap { uint slot_map[]; };
#endif

// 4 codes (one per byte, ≤ 15) → 4 int8 2·(code − offset): 2·code never carries out of its byte, and the constant's
// low 7 bits neither (2·15 + 127 < 256); its top bit goes in by XOR.
#define I8_K (uint(256.0 - 2.0 * LADDER_OFFSET) & 0xFFu)
uint codes_i8(uint m) { return ((m << 1) + (I8_K & 0x7Fu) * 0x01010101u) ^ ((I8_K & 0x80u) * 0x01010101u); }
#define PLANE_MASK (((1u << LADDER_ELEM_BITS) - 1u) * 0x01010101u)

#if TC == 1
#define ACC_T fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define ACC_ZERO ACC_T(0.0)
#define NC 8  // components per lane of a 16 × 16 f32 matrix (subgroups of 32)
shared float idx_map[256];
#else
#define NC (256 / LANES)
#if NC * LANES != 256
#error "moe_i8_tc.comp: the subgroup size must divide 256"
#endif
#endif

#define VPL (32 / LANES)  // virtual lanes per lane (1 on the tensor cores)
// the lanes' loops: unrolled on the tensor cores; emulated (lavapipe: 8 lanes, 4 virtual lanes each) as loops,
// which its LLVM compiles in a fraction of the time
#if TC == 1
#define LOOP [[unroll]]
#else
#define LOOP [[dont_unroll]]
#endif

// per block of a step (KB), with the tile index passed through
#if KB == 1
#define KBS(M, i) M(i, 0)
#define FRAGS(M) M(0)
#elif KB == 2
#define KBS(M, i) M(i, 0) M(i, 1)
#define FRAGS(M) M(0) M(1)
#elif KB == 4
#define KBS(M, i) M(i, 0) M(i, 1) M(i, 2) M(i, 3)
#define FRAGS(M) M(0) M(1) M(2) M(3)
#else
#error "KB must be 1, 2 or 4"
#endif
// the activation fragment of block kbl of the step (tensor cores)
#define FRAG_LD(kbl)                              \
  icoopmatNV<8, gl_ScopeSubgroup, 32, 16> bm##kbl; \
  coopMatLoadNV(bm##kbl, xt1, tb + I8T_VALUE_WORDS * (st * KB + kbl), 8u, true);
#define T_LOAD_0(S, i) T_LOAD(S, i, 0u)
#define T_LOAD_1(S, i) T_LOAD(S, i, 1u)
#define T_LOAD_AHEAD(S, i) T_LOAD(S, i, st + 2u)
#define T_LOAD_S(S, i) T_LOAD(S, i, s)

#if RT == 1
#define TILES(M) M(0)
#define TILES_S(M, S) M(S, 0)
#elif RT == 2
#define TILES(M) M(0) M(1)
#define TILES_S(M, S) M(S, 0) M(S, 1)
#elif RT == 4
#define TILES(M) M(0) M(1) M(2) M(3)
#define TILES_S(M, S) M(S, 0) M(S, 1) M(S, 2) M(S, 3)
#else
#error "RT must be 1, 2 or 4"
#endif

void main() {
#if MOE_SLOTS
  const uint E = MOE_E, NS = MOE_SLOTS;
#else
  const uint E = pc.pad, NS = E;
#endif
  const uint ne = E + MOE_SHARED, nrb = MOE_ROWS_E / WG_ROWS, g = wg_index(), rb = g % nrb, q = g / nrb;
  const uint sg = gl_LocalInvocationID.x / LANES, lane = gl_LocalInvocationID.x % LANES;
#if TC == 1
  for (uint i = gl_LocalInvocationID.x; i < 256u; i += WG_SIZE) idx_map[i] = float(i);
  barrier();
#endif
  if (16u * q >= offs[pc.y_stride + ne]) return;  // uniform: past the last tile
  uint lo = 0u, hi = ne;  // the expert whose tiles hold tile q: the largest e with off[e] <= 16q
  while (hi - lo > 1u) {
    const uint mid = (lo + hi) / 2u;
    if (offs[pc.y_stride + mid] <= 16u * q) lo = mid;
    else hi = mid;
  }
  const uint e = lo, j0 = 16u * q - offs[pc.y_stride + e], cnt = lists[pc.x_stride + e];
#if MOE_SLOTS
  const uint si = e < E ? slot_map[pc.pad + e] : NS;
  if (e < E && si >= NS) return;  // not in a slot (uniform)
#else
  const uint si = e;
#endif
  const uint rloc = rb * WG_ROWS + sg * 16u * RT;  // the subgroup's first row within e's matrix
  const uint row0 = si * MOE_ROWS_E + rloc;        // ... within the stack
  const uint B = pc.aux0, tb = pc.xoff + q * I8T_BLOCK_WORDS * B;
  const uint abase = sg * REGION, sbase = sg * RT * 16u * KB;
  const uint nstep = B / KB;

  // each row's ladder t[c] = t[c − 1] · 2^step, t[0] = 2^lo: the format's repeated f32 product (formats.glsl's
  // tables_init), by one lane per row
  for (uint k = lane; k < 16u * RT; k += LANES) {
    const uint pb = pc.res1 + LADDER_PARAM_BYTES * (row0 + k), lb0 = (sg * RT * 16u + k) * LSTR;
    const float ratio = tabf[TAB_EXP2 + ld16_w1(pb + 2u)];
    precise float t = tabf[TAB_EXP2 + ld16_w1(pb)];
    lad[lb0] = t;
    for (uint c = 1u; c < LADDER_RUNGS; ++c) {
      t = t * ratio;
      lad[lb0 + c] = t;
    }
  }

  // ---- a lane's weights of a step: virtual lane v < 32 takes row v % 16 of each tile and half v / 16 of the step,
  // HW value words (in qa, then qb) and the codes of the (at most 2) groups that start in them (ca, cb). Named
  // variables, no arrays: nothing a driver could keep in local memory, so the loads of step s + 1 stay in flight
  // while step s multiplies.
#if HW > 8
#error "moe_i8_tc.comp: at most 8 value words per lane"
#endif
#define NGS (HW >= VW ? HW / VW : 1)  // group starts per lane (the second lane of a 1-block step has none)
#if VEC == 4
#define LDQ(w) w0q[(w) >> 2]
#elif VEC == 2
#define LDQ(w) uvec4(w0d[(w) >> 1], w0d[((w) >> 1) + 1u])
#else
#define LDQ(w) uvec4(w0[w], w0[(w) + 1u], w0[(w) + 2u], w0[(w) + 3u])
#endif
#if HW >= 4
#define LD_WORDS(S, i, w) qa##S##i = LDQ(w); if (HW == 8) qb##S##i = LDQ((w) + 4u);
#elif HW == 2 && VEC >= 2
#define LD_WORDS(S, i, w) qa##S##i = uvec4(w0d[(w) >> 1], 0u, 0u);
#elif HW == 2
#define LD_WORDS(S, i, w) qa##S##i = uvec4(w0[w], w0[(w) + 1u], 0u, 0u);
#else
#define LD_WORDS(S, i, w) qa##S##i = uvec4(w0[w], 0u, 0u, 0u);
#endif
#define T_DECL(S, i) uvec4 qa##S##i = uvec4(0u), qb##S##i = uvec4(0u); uint ca##S##i = 0u, cb##S##i = 0u;
#define T_LOAD(S, i, s)                                                                                 \
  {                                                                                                   \
    const uint row = row0 + 16u * i + v % 16u, s0 = (v / 16u) * HW; /* first value word of the span */ \
    LD_WORDS(S, i, (pc.res0 >> 2) + row * B * VW + (s) * KB * VW + s0)                                \
    if (s0 % VW == 0u) ca##S##i = group_code(row, (s) * KB + s0 / VW);                                \
    if (NGS == 2) cb##S##i = group_code(row, (s) * KB + s0 / VW + 1u);                                \
  }
#define WORD(S, i, j) ((j) < 4u ? qa##S##i[(j) & 3u] : qb##S##i[(j) & 3u])
#define T_DECODE(S, i)                                                                                \
  {                                                                                                   \
    const uint r = v % 16u, a0 = (v / 16u) * HW * EPB; /* the span's first int8 word within the step */ \
    [[unroll]] for (uint q4 = 0u; q4 < HW * EPB / 4u; ++q4) {                                         \
      uvec4 o;                                                                                        \
      [[unroll]] for (uint m = 0u; m < 4u; ++m) { /* int8 word a: bit plane a % EPB of value word a / EPB */ \
        const uint a = 4u * q4 + m;                                                                   \
        o[m] = codes_i8((WORD(S, i, a / EPB) >> (LADDER_ELEM_BITS * (a % EPB))) & PLANE_MASK);        \
      }                                                                                               \
      const uint g = a0 + 4u * q4; /* word g of the row's step: block g / 8, word g % 8 */            \
      sa4[(abase + (i * KB + g / 8u) * ABLK + r * AS + g % 8u) / 4u] = o;                             \
    }                                                                                                 \
    const uint lr = (sg * RT * 16u + 16u * i + r) * LSTR, kb0 = (v / 16u) * HW / VW;                  \
    if (((v / 16u) * HW) % VW == 0u) ssw[sbase + (16u * i + r) * KB + kb0] = SCALE(lr, ca##S##i);     \
    if (NGS == 2) ssw[sbase + (16u * i + r) * KB + kb0 + 1u] = SCALE(lr, cb##S##i);                   \
  }
#if LADDER_CODE0_ZERO
#define SCALE(lr, code) ((code) == 0u ? 0.0 : lad[(lr) + (code) - 1u])
#else
#define SCALE(lr, code) lad[(lr) + (code)]
#endif
  TILES_S(T_DECL, A)

#if TC == 1
  // two steps of loads in flight: register sets A (even steps) and B (odd steps)
  TILES_S(T_DECL, B)
  const uint v = lane;
  TILES_S(T_LOAD_0, A)
  if (1u < nstep) {
    TILES_S(T_LOAD_1, B)
  }
  ACC_T idxm;
  coopMatLoadNV(idxm, idx_map, 0u, 16u, false);
  const icoopmatNV<32, gl_ScopeSubgroup, 16, 16> izero = icoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0);
  uint rt_of[NC];  // component c's row * 16 + column
  [[unroll]] for (uint c = 0u; c < NC; ++c) rt_of[c] = uint(idxm[c]);
#define ACC_DECL(i) ACC_T acc##i = ACC_ZERO;
#else
#define ACC_DECL(i) float acc##i[NC]; LOOP for (uint c = 0u; c < NC; ++c) acc##i[c] = 0.0;
#endif
  TILES(ACC_DECL)
  subgroupMemoryBarrierShared();
  subgroupBarrier();  // the ladders

#if TC == 1
  // step st from register set S: the step's activation fragments and the components' activation scales first
  // (their latency behind the decode), the decode, the loads of step st + 2 into S, the products. (Everything
  // unrolled takes 255 registers on the H200 — 2 workgroups per SM; the blocks as a loop took 112 and ran slower,
  // 7.9 against 6.0 ms: docs/PERF.md "Eighteenth session".) The product is converted from a variable: glslang 11
  // folds a conversion of the call's result into an invalid OpSpecConstantOp.
#if KB == 4
#define XS_LOAD vec4 xs[NC]; [[unroll]] for (uint c = 0u; c < NC; ++c) xs[c] = xtf4[(xsb + (rt_of[c] & 15u) * B) >> 2];
#define XS(c, kbl) xs[c][kbl]
#define SW_DECL(i)                                                       \
  vec4 sw[NC];                                                           \
  [[unroll]] for (uint c = 0u; c < NC; ++c) {                            \
    const uint w = sbase + (16u * i + (rt_of[c] >> 4)) * 4u;             \
    sw[c] = vec4(ssw[w], ssw[w + 1u], ssw[w + 2u], ssw[w + 3u]);         \
  }
#define SW(i, c, kbl) sw[c][kbl]
#else
#define XS_LOAD
#define XS(c, kbl) xtf[xsb + (rt_of[c] & 15u) * B + kbl]
#define SW_DECL(i)
#define SW(i, c, kbl) ssw[sbase + (16u * i + (rt_of[c] >> 4)) * KB + kbl]
#endif
#define KB_MMA(i, kbl)                                                                               \
      {                                                                                              \
        icoopmatNV<8, gl_ScopeSubgroup, 16, 32> am;                                                  \
        coopMatLoadNV(am, sa4, (abase + (i * KB + kbl) * ABLK) / 4u, AS / 4u, false);                \
        icoopmatNV<32, gl_ScopeSubgroup, 16, 16> pi = izero;                                         \
        pi = coopMatMulAddNV(am, bm##kbl, pi);                                                       \
        ACC_T pf = ACC_T(pi);                                                                        \
        [[unroll]] for (uint c = 0u; c < NC; ++c) acc##i[c] += pf[c] * (SW(i, c, kbl) * XS(c, kbl)); \
      }
#define TILE_MMA(i) { SW_DECL(i) KBS(KB_MMA, i) }
#define TC_STEP(S, st_)                                                                              \
  {                                                                                                  \
    const uint st = st_, xsb = tb + I8T_SCALE_WORD(B) + st * KB; /* + t·B + kbl: the activation scales */    \
    FRAGS(FRAG_LD)                                                                                   \
    XS_LOAD                                                                                          \
    TILES_S(T_DECODE, S)                                                                             \
    subgroupMemoryBarrierShared();                                                                   \
    subgroupBarrier();                                                                               \
    if (st + 2u < nstep) {                                                                           \
      TILES_S(T_LOAD_AHEAD, S)                                                                       \
    }                                                                                                \
    TILES(TILE_MMA)                                                                                  \
    subgroupBarrier(); /* every lane is done with the region before the next step overwrites it */   \
  }
  for (uint s = 0u; s < nstep; s += 2u) {
    TC_STEP(A, s)
    if (s + 1u < nstep) TC_STEP(B, s + 1u)
  }
#else
  for (uint s = 0u; s < nstep; ++s) {
    const uint xsb = tb + I8T_SCALE_WORD(B) + s * KB;  // + t·B + kbl: the tile's activation scales ([t][kb])
    LOOP for (uint u = 0u; u < VPL; ++u) {
      const uint v = lane + u * LANES;
      TILES_S(T_LOAD_S, A)
      TILES_S(T_DECODE, A)
    }
    subgroupMemoryBarrierShared();
    subgroupBarrier();
#define TILE_MMA(i)                                                                                  \
    LOOP for (uint kbl = 0u; kbl < KB; ++kbl) {                                                      \
      const uint kb = s * KB + kbl, xb = tb + I8T_VALUE_WORDS * kb, at = abase + (i * KB + kbl) * ABLK; \
      LOOP for (uint c = 0u; c < NC; ++c) {                                                          \
        const uint idx = c * LANES + lane, r = idx >> 4, t = idx & 15u;                             \
        int sum = 0;                                                                                 \
        LOOP for (uint w = 0u; w < 8u; ++w) {                                                        \
          const uint a = sa4[(at + r * AS + w) / 4u][w % 4u], b = xt1[xb + t * 8u + w];             \
          LOOP for (uint y = 0u; y < 32u; y += 8u)                                                   \
            sum += bitfieldExtract(int(a), int(y), 8) * bitfieldExtract(int(b), int(y), 8);          \
        }                                                                                            \
        acc##i[c] += float(sum) * (ssw[sbase + (16u * i + r) * KB + kbl] * xtf[xsb + t * B + kbl]);  \
      }                                                                                              \
    }
    TILES(TILE_MMA)
    subgroupBarrier();  // every lane is done with the region before the next step overwrites it
  }
#endif

  // ---- epilogue: accumulators → region (column-major: element (r, t) at t·16 + r) → y
#if TC == 1
#define ACC_ST(i) coopMatStoreNV(acc##i, sa4, (abase + i * 256u) / 4u, 4u, true);
#else
#define ACC_ST(i)                                                                          \
  LOOP for (uint c = 0u; c < NC; ++c) {                                                    \
    const uint idx = c * LANES + lane, w = abase + i * 256u + (idx & 15u) * 16u + (idx >> 4); \
    sa4[w / 4u][w % 4u] = floatBitsToUint(acc##i[c]);                                      \
  }
#endif
  TILES(ACC_ST)
  subgroupMemoryBarrierShared();
  subgroupBarrier();
  const uint lb = pc.x_stride + ne + e * pc.n * MOE_TOPK;
  LOOP for (uint u = 0u; u < VPL; ++u) {
    const uint v = lane + u * LANES, t = v / 2u, hf = v & 1u;
    if (j0 + t < cnt) {
      const uint yb = pc.yoff + lists[lb + j0 + t] * MOE_ROWS_E + rloc + 8u * hf;
      LOOP for (uint i = 0u; i < RT; ++i)
        LOOP for (uint r = 0u; r < 8u; ++r) {
          const uint w = abase + i * 256u + t * 16u + 8u * hf + r;
          ys[yb + 16u * i + r] = uintBitsToFloat(sa4[w / 4u][w % 4u]);
        }
    }
  }
}

#version 460
#extension GL_GOOGLE_include_directive : require
// Expert-grouped MoE products with int8 activations (kernels::moe with n >= 2 and act_precision::i8: the prefill
// chunks of `--act i8`): y[p, r] = Σ_c W_e[r, c] · x_p[c] for every (token, slot) pair p that chose expert e — the
// grouped counterpart of matvec_rows.comp's ACT_I8 mode, with the same chunk products (common/idot.glsl).
//
// One workgroup per (expert e, block of ROWS_PER_WG rows of e's matrix). Subgroup `team` owns RPT consecutive
// rows; lane l takes chunks l, l + LANES, ... of them; e's pairs (moe_group.comp's list) go by in tiles of MOE_NB,
// so each weight chunk is fetched and unpacked once per tile and its integer dot products serve MOE_NB activation
// vectors (read from global memory: L1/L2-resident, shared by the RPT rows). No shared memory beyond the format's
// tables, no barrier after them; one subgroupAdd per (row, pair) at the end of a tile. The f16 tiled GEMM
// (gemm.comp's MOE_GEMM) decodes every weight into shared memory between two barriers; here nothing is decoded
// to floats: a ladder's codes are the integer dot products' operands (docs/VULKAN.md "Prefill experts in int8").
//
// Activations (binding 3, quantize_act.comp's layout, ACT_VEC_WORDS(cols/32) words per vector from pc.xoff): MOE_X_TOKEN = 1: pair p reads its token's vector (p / KS: gate/up on x), 0: its own (down on h).
// Outputs: y[pc.yoff + p·MOE_ROWS_E + (row within e's matrix)] (binding 4).
// Push constants: common/formats.glsl's mat_pc: cols, n = tokens, xoff (words), x_stride = the lists' first word
// (binding 6), yoff, pad = E (or the slot map's offset at binding 7 with MOE_SLOTS; E = MOE_E). An expert not in a
// slot is skipped (moe_sum.comp writes NaN for its tokens).
// Defines: TEAMS, RPT (1, 2, 4, 8), ROWS_PER_WG (= TEAMS·RPT, divides MOE_ROWS_E), MOE_NB (2, 4, 8, 16), MOE_UNROLL
// (1, 2: chunks whose loads a lane issues together), MOE_TOPK,
// MOE_SHARED, MOE_ROWS_E, MOE_X_TOKEN, [MOE_SLOTS, MOE_E], the format's (q4tp, q2tp, MXFP4).
#include "common/base.glsl"
#include "common/formats.glsl"
#if CHUNK != 32
#error "the int8 path needs 32-element chunks (one activation block per chunk)"
#endif
#include "common/idot.glsl"
#if ROWS_PER_WG != TEAMS * RPT || MOE_ROWS_E % ROWS_PER_WG != 0
#error "ROWS_PER_WG must be TEAMS * RPT and divide MOE_ROWS_E"
#endif

layout(std430, binding = 4) writeonly buffer Y { float ys[]; };
layout(std430, binding = 6) readonly buffer Lists { uint lists[]; };
#ifndef MOE_SLOTS
#define MOE_SLOTS 0
#endif
#if MOE_SLOTS
layout(std430, binding = 7) readonly buffer SlotMap { uint slot_map[]; };
#endif
#define KS (MOE_TOPK + MOE_SHARED)
#if MOE_X_TOKEN
#define XVEC(p) ((p) / KS)
#else
#define XVEC(p) (p)
#endif

#if RPT == 1
#define ROWS(M, a) M(a, 0)
#define ROWS1(M) M(0)
#elif RPT == 2
#define ROWS(M, a) M(a, 0) M(a, 1)
#define ROWS1(M) M(0) M(1)
#elif RPT == 4
#define ROWS(M, a) M(a, 0) M(a, 1) M(a, 2) M(a, 3)
#define ROWS1(M) M(0) M(1) M(2) M(3)
#elif RPT == 8
#define ROWS(M, a) M(a, 0) M(a, 1) M(a, 2) M(a, 3) M(a, 4) M(a, 5) M(a, 6) M(a, 7)
#define ROWS1(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#else
#error "RPT must be 1, 2, 4 or 8"
#endif
#ifndef MOE_UNROLL
#define MOE_UNROLL 1
#endif
#if MOE_NB == 2
#define PAIRS(M) M(0) M(1)
#elif MOE_NB == 4
#define PAIRS(M) M(0) M(1) M(2) M(3)
#elif MOE_NB == 8
#define PAIRS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#elif MOE_NB == 16
#define PAIRS(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)
#else
#error "MOE_NB must be 2, 4, 8 or 16"
#endif

// Everything per (row i, pair t) is a named variable (acc<i>_<t>), unrolled by the preprocessor: no arrays that a
// driver could leave in local memory.
#define ROW_DECL(i) const uint row##i = rbase + i; const row_t R##i = row_begin(row##i, team * RPT + i);
// pair t of the tile (a pair past the list's end repeats the last one's loads, and is not summed or written)
#define P_DECL(t)                                                                   \
  const uint p##t = lists[lb + min(i0 + t, cnt - 1u)];                              \
  const uint xb##t = pc.xoff + XVEC(p##t) * ACT_VEC_WORDS(nct);                    \
  ROWS(ACC_DECL, t)
#define ACC_DECL(t, i) float acc##i##_##t = 0.0;
// Step u of an iteration (MOE_UNROLL steps, chunk k<u>): every weight and activation load of all steps is issued
// before the first product.
// A chunk's operands are formed here, once for all pairs of the tile (MXFP4: its E2M1 table lookups).
#define FETCH_(u, i)                                                                \
  const raw_t q##u##_##i = fetch(R##i, row##i, k##u);                               \
  const float s##u##_##i = chunk_scale(R##i, q##u##_##i);                           \
  const chunk_ops o##u##_##i = chunk_operands(q##u##_##i);
#define XLD_(u, t)                                                                  \
  const uvec4 xa##u##_##t = xq4[(xb##t >> 2) + 2u * k##u], xc##u##_##t = xq4[(xb##t >> 2) + 2u * k##u + 1u]; \
  const float xs##u##_##t = xqf[xb##t + ACT_SCALE_WORD(nct) + k##u];                \
  const int xo##u##_##t = xqi[xb##t + ACT_BSUM_WORD(nct) + k##u];
// matvec_rows.comp's RI: the chunk's scale · (sx / 2) · (integer dot − 2·off · Σ xq)
#define RI_(u, t, i) \
  acc##i##_##t +=    \
      s##u##_##i * (xs##u##_##t * idot_float(chunk_idot_ops(o##u##_##i, xa##u##_##t, xc##u##_##t) - xo##u##_##t));
#define FETCH0(i) FETCH_(0, i)
#define FETCH1(i) FETCH_(1, i)
#define XLD0(t) XLD_(0, t)
#define XLD1(t) XLD_(1, t)
#define RI0(t, i) RI_(0, t, i)
#define RI1(t, i) RI_(1, t, i)
// Pairs past the list's end are skipped (uniform over the workgroup), so a ragged last tile costs no products.
// (MXFP4 used to compute them: with the skip its table lookups were made per pair — 15.1 instead of 7.4 ms on the
// H200, docs/PERF.md "Twelfth session" — until chunk_operands moved them out of the pair loop.)
#define MAC0(t) if (i0 + t < cnt) { ROWS(RI0, t) }
#define MAC1(t) if (i0 + t < cnt) { ROWS(RI1, t) }
#ifndef MOE_BUTTERFLY
#define MOE_BUTTERFLY 0
#endif
#if MOE_BUTTERFLY
// The tile's RPT·MOE_NB sums in groups of G = min(RPT·MOE_NB, LANES) values: each step of a butterfly halves the
// values a lane holds (lanes with bit m keep the upper half and receive the lower half's partner sums, the others
// the reverse), so after log2(G) steps lane l holds value l / (LANES / G) of the group summed over LANES·... lanes,
// and log2(LANES / G) plain steps finish the sums: G − 1 + log2(LANES / G) shuffles per group instead of
// 5 per value of subgroupAdd (8 values of 32 lanes: 9 instead of 40). Value j of the tile is row j % RPT of pair
// j / RPT. Another summation order than subgroupAdd's, the same in every run.
#extension GL_KHR_shader_subgroup_shuffle : require
#define BF_M (RPT * MOE_NB)
#define BF_G (BF_M < LANES ? BF_M : LANES)
#define BF_PUT(t, i) v[t * RPT + i] = acc##i##_##t;
#define BF_PUTP(t) ROWS(BF_PUT, t) pv[t] = p##t;
#else
#define P_RED(t, i) acc##i##_##t = subgroupAdd(acc##i##_##t);
#endif
#define P_WR(t, i) ys[yb + i] = acc##i##_##t;
#define P_OUT(t)                                                                    \
  if (i0 + t < cnt) { /* uniform over the workgroup */                              \
    ROWS(P_RED, t)                                                                  \
    if (lane == 0u) {                                                               \
      const uint yb = pc.yoff + p##t * MOE_ROWS_E + (rbase - si * MOE_ROWS_E);      \
      ROWS(P_WR, t)                                                                 \
    }                                                                               \
  }

void main() {
#if MOE_SLOTS
  const uint E = MOE_E, NS = MOE_SLOTS;
#else
  const uint E = pc.pad, NS = E;
#endif
  const uint bpe = MOE_ROWS_E / ROWS_PER_WG, ne = E + MOE_SHARED, g = wg_index();
  if (g >= ne * bpe) return;  // uniform over the workgroup
  const uint e = g / bpe, blk = g % bpe;
  const uint cnt = lists[pc.x_stride + e];
  if (cnt == 0u) return;  // uniform
#if MOE_SLOTS
  const uint si = e < E ? slot_map[pc.pad + e] : NS;
  if (e < E && si >= NS) return;  // not in a slot
#else
  const uint si = e;
#endif
  const uint lb = pc.x_stride + ne + e * pc.n * MOE_TOPK;  // moe_group.comp's layout
  const uint team = gl_LocalInvocationID.x / LANES, lane = gl_LocalInvocationID.x % LANES;
  const uint first = si * MOE_ROWS_E + blk * ROWS_PER_WG, rbase = first + team * RPT;
  const uint nct = pc.cols / CHUNK;
  ROWS1(ROW_DECL)
  i8_tables();
  tables_init(first / ROWS_PER_WG);  // its barrier (every format here has one) also covers i8_tables
  for (uint i0 = 0u; i0 < cnt; i0 += MOE_NB) {  // uniform
    PAIRS(P_DECL)
#if MOE_UNROLL == 2
    for (uint k0 = lane; k0 < nct; k0 += 2u * LANES) {
      const uint k1 = min(k0 + LANES, nct - 1u);  // clamped: past the end its loads are made, its products skipped
      ROWS1(FETCH0) ROWS1(FETCH1)
      PAIRS(XLD0) PAIRS(XLD1)
      PAIRS(MAC0)
      if (k0 + LANES < nct) {
        PAIRS(MAC1)
      }
    }
#else
    for (uint k0 = lane; k0 < nct; k0 += LANES) {
      ROWS1(FETCH0)
      PAIRS(XLD0)
      PAIRS(MAC0)
    }
#endif
#if MOE_BUTTERFLY
    float v[BF_M];
    uint pv[MOE_NB];
    PAIRS(BF_PUTP)
    [[unroll]] for (uint g0 = 0u; g0 < BF_M; g0 += BF_G) {
      [[unroll]] for (uint h = BF_G / 2u; h >= 1u; h /= 2u) {  // 2h values per lane → h
        const uint m = (LANES / BF_G) * h;
        const bool up = (lane & m) != 0u;
        [[unroll]] for (uint i = 0u; i < h; ++i) {
          const float a = v[g0 + i], b = v[g0 + i + h];
          v[g0 + i] = (up ? b : a) + subgroupShuffleXor(up ? a : b, m);
        }
      }
      [[unroll]] for (uint m = LANES / BF_G / 2u; m >= 1u; m /= 2u) v[g0] += subgroupShuffleXor(v[g0], m);
      const uint j = g0 + lane / (LANES / BF_G), t = j / RPT;
      if (lane % (LANES / BF_G) == 0u && i0 + t < cnt)
        ys[pc.yoff + pv[t] * MOE_ROWS_E + (rbase - si * MOE_ROWS_E) + j % RPT] = v[g0];
    }
#else
    PAIRS(P_OUT)
#endif
  }
}

#version 460
#extension GL_GOOGLE_include_directive : require
// y[r] = Σ_c W[r, c] · x[c]: the batch-1 matvec on the fast path (cols % CHUNK == 0, planes aligned) of devices
// with subgroup reductions. (matvec.comp keeps GEMM, the element-wise path and devices without subgroup ops.)
//
// A workgroup is TEAMS subgroups of LANES invocations. Subgroup `team` owns RPT consecutive rows; lane l handles
// chunks l, l + LANES, ... of ALL of them, so every activation value it reads from shared memory serves RPT rows
// (the activation traffic per weight byte is divided by RPT: for 4-bit weights and f32 activations it is 8 bytes
// per weight byte at RPT = 1, which starves the shared-memory pipe long before DRAM). The activation vector is
// staged in shared memory X_TILE columns at a time — all of it for the model's shapes, so there is one barrier —
// and, with a single tile, the first UNROLL chunks of weights are requested before the staging so that their
// DRAM latency overlaps it. No barrier in the hot loop; one subgroupAdd per row at the end.
//
// ACT_I8 = 1 (q4tp, q2tp, MXFP4 on devices with integer dot products): binding 3 holds the activations already
// quantised by quantize_act.comp (int8 in blocks of 32 by the rule of include/cmfx/kernels/act_q8.hpp, each
// 32-bit word paired with one bit-plane of a weight word; common/act_q8.glsl), read straight from global memory —
// coalesced, L1/L2-resident, no staging and no barrier after the tables. A chunk is CHUNK / 4 packed 4×8-bit dot
// products (OpSUDot / OpSDot) and one float combination per row:
//   ladders: (q - off) · s · x  →  s · (sx / 2) · (2 Σ q·xq − 2·off · Σ xq)      (2·off is an integer)
//   MXFP4:   e2m1(q) · s · x    →  s · (sx / 2) · Σ (2·e2m1(q)) · xq              (2·e2m1 is an integer)
// The error is that of the CPU's int8-activation path (docs/FORMATS.md); the f32 path stays the reference.
//
// KSPLIT > 1 (X_GLOBAL or ACT_I8): KSPLIT consecutive subgroups share a team's RPT rows, subgroup p taking chunks
// p·LANES + lane, p·LANES + lane + KSPLIT·LANES, ...; their sums meet in shared memory (one barrier) and are added
// in subgroup order. Decode runs every matvec as a dependent dispatch: more subgroups per row put more of a
// matrix's loads in flight at once (the latency of one dispatch, not the throughput of many, sets its time).
//
// MOE_TAIL (MOE_ROWS with ACT_I8; kernels::moe at batch 1): the MoE's next step in the workgroups that finish its
// inputs, so that it costs no dependent dispatch of its own. Each workgroup makes its rows visible and counts its
// arrival (device-scope arrival counters, binding 8 from word pc.cntoff, 0 between uses); the last to arrive does:
//   MOE_TAIL 1 (gate/up rows): per block of 32 h values of a slot (its 32 gate and 32 up rows): h = SwiGLU · routing
//     weight (common/swiglu.glsl; weights at binding 10, pc.woff) quantised for the down rows by the block's 32
//     invocations (common/act_q8_wide.glsl; the ACT_T_* defines where the down matrix has another format) into
//     binding 9 at pc.toff — quantize_act.comp's ACT_SWIGLU values;
//   MOE_TAIL 2 (down rows): per row block, the slots' rows summed as moe_sum.comp does (common/moe_sum.glsl; a bad
//     routed id makes the row NaN) into binding 9 at pc.toff.
// PAIR = 1 (q2tp with ACT_I8, an even number of chunks per row): a lane's unit is two consecutive chunks — their
// 16 value bytes in one load, both ladder codes from one 32-bit window (formats.glsl fetch2), their activations in 4
// + 1 + 1 loads — instead of one 8-byte chunk with its own code and activation loads. Lane l takes units l,
// l + KSTRIDE, ...; the loop counts units.
// SUB > 1 (X_GLOBAL, f32 activations): a lane's unit is 1/SUB of a chunk — CHUNK_WORDS / SUB consecutive words
// of its values (and the chunk's code / scale, the same load for the SUB lanes that share it) — so that the lanes
// of a subgroup read the activations of consecutive units: a chunk's activations are 4·CHUNK bytes (128 for a
// 32-value chunk), and with one chunk per lane every 16-byte activation load of the subgroup touched 32 different
// cache lines (each line one L1 pass); with SUB lanes per chunk it touches 32 / SUB. The units of a row are its
// chunks × SUB, lane l taking units l, l + KSTRIDE, ...
// RBATCH > 1 (ACT_I8): a workgroup's rows are RBATCH batches of TEAMS / KSPLIT · RPT rows, walked in order by its
// subgroups — the tables (ladders, int8 LUT), the expert id and the MoE tail's arrival count are paid once per
// RBATCH batches instead of once per batch, and with UNROLL covering a row's units every batch's loads are all in
// flight at once. Each row's sum is the same as with RBATCH = 1 (the same lanes, units and order): the same bits.
// Defines: TEAMS, KSPLIT (1, 2, 4, 8; divides TEAMS), RPT (1, 2, 4), RBATCH (1, 2, 4, 8; 1 by default),
// ROWS_PER_WG (= TEAMS / KSPLIT * RPT * RBATCH), UNROLL
// (1, 2, 4), X_TILE (f32), X_GLOBAL (f32: 1 = activations read from the buffer, 0 = staged in shared memory),
// SUB (1, 2, 4), ACT_I8, PAIR, the format's; MOE_TAIL with MOE_LIMIT (1).
#ifndef MOE_TAIL
#define MOE_TAIL 0
#endif
#if MOE_TAIL
#define MAT_PC_TAIL
#endif
#include "common/base.glsl"
#include "common/formats.glsl"
#ifndef KSPLIT
#define KSPLIT 1
#endif
#if KSPLIT > 1 && !X_GLOBAL && !ACT_I8
#error "KSPLIT needs activations read from the buffer (X_GLOBAL) or int8 activations"
#endif
#ifndef RBATCH
#define RBATCH 1
#endif
#if RBATCH > 1 && !ACT_I8
#error "RBATCH: batches of rows on the int8-activation path"
#endif
#define BATCH_ROWS (TEAMS / KSPLIT * RPT)
#if TEAMS % KSPLIT != 0 || ROWS_PER_WG != BATCH_ROWS * RBATCH
#error "KSPLIT must divide TEAMS and ROWS_PER_WG = TEAMS / KSPLIT * RPT * RBATCH"
#endif
#ifndef PAIR
#define PAIR 0
#endif
#if PAIR && !(ACT_I8 && defined(FMT_Q2TP))
#error "PAIR is the int8-activation path of q2tp"
#endif
#ifndef SUB
#define SUB 1
#endif
#if SUB > 1 && (ACT_I8 || !X_GLOBAL || !HAS_CHUNK_WORDS || CHUNK_WORDS % SUB != 0 || (CHUNK / 4) % SUB != 0)
#error "SUB splits the words of a chunk of f32-activation products read from the buffer (X_GLOBAL)"
#endif
// Units (chunks; chunk pairs with PAIR; 1/SUB chunks with SUB) between a lane's consecutive units of a row.
#define KSTRIDE (LANES * KSPLIT)

#if MOE_TAIL
layout(std430, binding = 4) coherent buffer Y { float ys[]; };  // read back by the tail of another workgroup
#else
layout(std430, binding = 4) writeonly buffer Y { float ys[]; };
#endif
#ifndef MOE_ROWS
#define MOE_ROWS 0
#endif
#if MOE_ROWS
// Expert-indirect mode (kernels::moe at batch 1): virtual row block (slot, block) reads the row block of expert
// ids[slot] in the stacked matrix (slot MOE_TOPK = the shared expert, stacked last) and writes rows
// [slot·MOE_RPE, (slot+1)·MOE_RPE) of y; slot s reads its activations at xoff + s·MOE_XSTRIDE. An invalid routed id
// computes expert 0 (moe_sum.comp turns that token's output into NaN).
// Expert cache (MOE_SLOTS > 0): the stacked matrix holds MOE_SLOTS routed experts and the shared one at index
// MOE_SLOTS; routed expert e is read at stacked index slot_map[e] (binding 7, first word pc.x_stride); an entry
// ≥ MOE_SLOTS computes slot 0 (moe_sum.comp makes that output NaN).
layout(std430, binding = 6) readonly buffer MoeIds { uint moe_ids[]; };
#ifndef MOE_SLOTS
#define MOE_SLOTS 0
#endif
#if MOE_SLOTS
layout(std430, binding = 7) readonly buffer MoeSlotMap { uint moe_slot_map[]; };
#endif
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
#else
#error "RPT must be 1, 2 or 4"
#endif
#if UNROLL == 1
#define REP_U(M) M(0)
#elif UNROLL == 2
#define REP_U(M) M(0) M(1)
#elif UNROLL == 4
#define REP_U(M) M(0) M(1) M(2) M(3)
#else
#error "UNROLL must be 1, 2 or 4"
#endif

// ------------------------------------------------------------------------------------------ activations
#if !ACT_I8
layout(std430, binding = 3) readonly buffer X4 { vec4 xv[]; };
#define XQ (CHUNK / 4)
// the vec4 of activations of one unit (a chunk, or 1/SUB of one)
#define XQS (XQ / SUB)
#if XQS == 1
#define REP_J(M) M(0)
#elif XQS == 2
#define REP_J(M) M(0) M(1)
#elif XQS == 4
#define REP_J(M) M(0) M(1) M(2) M(3)
#elif XQS == 8
#define REP_J(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#endif
#if SUB > 1
raw_t fetch_sub(row_t R, uint r, uint k, uint p) { return fetch_words(R, r, k, p, CHUNK_WORDS / SUB); }
#endif
// vec4 j of tile chunk kt, swizzled so that 8 lanes reading 8 consecutive chunks hit 8 different 16-byte bank
// groups (one 128-bit shared load serves 8 lanes per pass).
uint xswz(uint kt, uint j) { return kt * XQ + (j ^ ((kt / (8u / XQ)) % XQ)); }
#if X_GLOBAL
// X_GLOBAL = 1: no staging — every lane reads its chunks' activations from the buffer (L1/L2-resident, shared by
// the subgroup's RPT rows), so the hot loop starts without a barrier and the workgroup holds no shared tile.
#define XLD(KT, j) xv[(xo >> 2) + (KT) * XQ + XP + (j)]
#else
shared vec4 xsh[X_TILE / 4];
void stage(uint xo, uint c0, uint ncols) {
  const uint tv = ncols / 4u;
  for (uint e = gl_LocalInvocationID.x; e < tv; e += WG_SIZE) xsh[xswz(e / XQ, e % XQ)] = xv[((xo + c0) >> 2) + e];
}
#define XLD(KT, j) xsh[xswz(KT, j)]
#endif
#else
#if CHUNK != 32
#error "the int8 path needs 32-element chunks (one activation block per chunk)"
#endif
#include "common/idot.glsl"
#if PAIR
// two blocks' sx / 2 and 2·off·Σ xq in one load each (xo and 8 · chunks are even)
layout(std430, binding = 3) readonly buffer XQF2 { vec2 xqf2[]; };
layout(std430, binding = 3) readonly buffer XQI2 { ivec2 xqi2[]; };
#endif
#endif

// ------------------------------------------------------------------------------------------ MoE tails
#if MOE_TAIL
#if !MOE_ROWS || !ACT_I8
#error "MOE_TAIL needs MOE_ROWS and ACT_I8 (and workgroups of at least 32 invocations: the host checks WG_SIZE)"
#endif
#define KS (MOE_TOPK + MOE_SHARED)
layout(std430, binding = 8) coherent buffer Cnt { uint cnt[]; };
#if MOE_TAIL == 1
#include "common/swiglu.glsl"
// h's quantised vectors, under the names common/act_q8_wide.glsl writes
layout(std430, binding = 9) writeonly buffer HQW { uint qw[]; };
layout(std430, binding = 9) writeonly buffer HQF { float qf[]; };
layout(std430, binding = 9) writeonly buffer HQI { int qi[]; };
layout(std430, binding = 10) readonly buffer Wr { float wr[]; };
// h's blocks quantised by the first 32 invocations, one value each (common/act_q8_wide.glsl: its butterflies through
// subgroup shuffles where the host defines ACT_WIDE_SG, else through shared memory with barriers) — the bits of
// act_q8_block, without one invocation's 32 roundings in a row at the end of the dispatch
#include "common/act_q8_wide.glsl"
// h blocks of 32 a workgroup's rows feed (its rows lie in one half, gate or up, of one slot's 2I rows), and the
// workgroups that feed one block: its gate rows and its up rows
#define TAIL_NB (ROWS_PER_WG >= 32 ? ROWS_PER_WG / 32 : 1)
#define TAIL_ARRIVALS (ROWS_PER_WG >= 32 ? 2u : 2u * (32u / ROWS_PER_WG))
#else
#include "common/moe_sum.glsl"
layout(std430, binding = 9) writeonly buffer TO { float touts[]; };
#define TAIL_NB 1
#define TAIL_ARRIVALS uint(KS)
#endif
shared bool tail_last[TAIL_NB];

// Counts this workgroup's arrival at its TAIL_NB blocks (first counter c0); tail_last[j]: it arrived last at block j.
void tail_count(uint c0) {
  memoryBarrierBuffer();
  barrier();
  const uint j = gl_LocalInvocationID.x;
  if (j < TAIL_NB) {  // device-scope fences on both sides of the count (release before, acquire after)
    memoryBarrierBuffer();
    const bool last = atomicAdd(cnt[c0 + j], 1u) + 1u == TAIL_ARRIVALS;
    if (last) cnt[c0 + j] = 0u;  // 0 again for the next dispatch that takes this counter
    tail_last[j] = last;
    memoryBarrierBuffer();
  }
  barrier();
}

#if MOE_TAIL == 1
void moe_tail(uint mslot, uint mblk) {
  const uint I = MOE_RPE / 2u, blocks = I / 32u, r_in = mblk * ROWS_PER_WG, hb0 = (r_in % I) / 32u;
  tail_count(pc.cntoff + mslot * blocks + hb0);
  const uint lid = gl_LocalInvocationID.x;
  for (uint j = 0u; j < TAIL_NB; ++j) {
    if (!tail_last[j]) continue;  // uniform (shared)
    memoryBarrierBuffer();
    const uint hb = hb0 + j;
    float v = 0.0;
    if (lid < 32u) {
      const uint g = pc.yoff + mslot * MOE_RPE + hb * 32u + lid;
      v = swiglu_clamped(ys[g], ys[g + I], MOE_LIMIT, mslot < MOE_TOPK ? wr[pc.woff + mslot] : 1.0);
    }
    act_q8_wide(v, lid < 32u, pc.toff + mslot * ACT_VEC_WORDS(blocks), hb, blocks);  // every invocation calls it
  }
}
#else
void moe_tail(uint mslot, uint mblk) {
  tail_count(pc.cntoff + mblk);
  if (!tail_last[0]) return;  // uniform (shared)
  memoryBarrierBuffer();
  for (uint r = gl_LocalInvocationID.x; r < ROWS_PER_WG; r += WG_SIZE) {
    const uint row = mblk * ROWS_PER_WG + r;
    uint id[MOE_TOPK];
    float yv[MOE_TOPK];
    bool bad = false;
    [[unroll]] for (uint j = 0u; j < MOE_TOPK; ++j) {
      id[j] = moe_ids[pc.pad + j];
      yv[j] = ys[pc.yoff + j * MOE_RPE + row];
    }
    [[unroll]] for (uint j = 0u; j < MOE_TOPK; ++j) {
      bad = bad || id[j] >= MOE_E;
#if MOE_SLOTS
      bad = bad || (id[j] < MOE_E && moe_slot_map[pc.x_stride + id[j]] >= MOE_SLOTS);
#endif
    }
    float total = moe_ordered_sum(id, yv);
#if MOE_SHARED
    total += ys[pc.yoff + MOE_TOPK * MOE_RPE + row];
#endif
    touts[pc.toff + row] = bad ? uintBitsToFloat(0x7FC00000u) : total;
  }
}
#endif
#endif

// ------------------------------------------------------------------------------------------ hot loop
// FR(u, i): the loads of unit k + u·KSTRIDE of row i (clamped into range; a clamped unit is not consumed).
#if PAIR
#define FR(u, i) const raw2_t q##u##_##i = fetch2(R##i, row##i, min(k + u * KSTRIDE, nu - 1u));
#elif SUB > 1
#define FR(u, i)                                                                                          \
  const raw_t q##u##_##i = fetch_sub(R##i, row##i, min(k + u * KSTRIDE, nu - 1u) / SUB, min(k + u * KSTRIDE, nu - 1u) % SUB);
#else
#define FR(u, i) const raw_t q##u##_##i = fetch(R##i, row##i, k0 + min(k + u * KSTRIDE, nu - 1u));
#endif
#define FETCH(u) ROWS(FR, u)
#if !ACT_I8
#if defined(FMT_FP8_B128) || defined(FMT_FP8_B32)
// fp8_dec4 (formats.glsl): E4M3 by moving bits, the value times 2^-8.
// A subgroup's RPT rows (rbase a multiple of RPT, r0 a multiple of the tile) lie in one scale tile, so every row
// takes row 0's scale (the other rows' scale loads are dead code); a clamped row past the end is never written.
#if FP8_TILE % RPT != 0
#error "a subgroup's rows must share one FP8 scale tile"
#endif
// The chunk's 16 products are summed unscaled and the sum scaled once (C, then acc += S·C): with a power-of-two
// scale (UE8M0) the same bits as scaling every value, with an f32 scale one rounding instead of one per product;
// a multiplication fewer per weight, +4 % kernel throughput on the H200 (docs/PERF.md "Fifteenth session").
#define BIND(u, i) const raw_t Q##i = q##u##_##i; const float S##i = 256.0 * chunk_scale(R0, q##u##_0); float C##i = 0.0;
#define RD(j, i) C##i += dot(fp8_dec4(Q##i, j), X);
#define FIN(u, i) acc##i += S##i * C##i;
#else
#define BIND(u, i) const raw_t Q##i = q##u##_##i; const float S##i = chunk_scale(R##i, Q##i);
#define RD(j, i) acc##i += dot(decode4(R##i, Q##i, S##i, K, j), X);
#define FIN(u, i)
#endif
#define DOTJ(j) { const vec4 X = XLD(KT, j); ROWS(RD, j) }
// KT: the unit's chunk in the tile, XP: its first vec4 of activations in the chunk (SUB)
#define CONSUME(u)                                                                  \
  if (k + u * KSTRIDE < nu) {                                                       \
    const uint KT = (k + u * KSTRIDE) / SUB, K = k0 + KT, XP = (k + u * KSTRIDE) % SUB * XQS; \
    ROWS(BIND, u)                                                                   \
    REP_J(DOTJ)                                                                     \
    ROWS(FIN, u)                                                                    \
  }
#elif PAIR
#define CODE_MASK (LADDER_RUNGS - 1u)
#define RI(u, i)                                                                                                   \
  {                                                                                                                \
    const raw2_t Q = q##u##_##i;                                                                                   \
    acc##i += code_scale(R##i, Q.c & CODE_MASK) *                                                                  \
              (XS.x * idot_float(chunk_idot(raw_t(uvec4(Q.q.xy, 0u, 0u), 0u), XA, XB) - XB2.x));                   \
    acc##i += code_scale(R##i, (Q.c >> LADDER_CODE_BITS) & CODE_MASK) *                                            \
              (XS.y * idot_float(chunk_idot(raw_t(uvec4(Q.q.zw, 0u, 0u), 0u), XC, XD) - XB2.y));                   \
  }
#define CONSUME(u)                                                                             \
  if (k + u * KSTRIDE < nu) {                                                                  \
    const uint K = k + u * KSTRIDE, X4 = (xo >> 2) + 4u * K;                                   \
    const uvec4 XA = xq4[X4], XB = xq4[X4 + 1u], XC = xq4[X4 + 2u], XD = xq4[X4 + 3u];         \
    const vec2 XS = xqf2[((xo + ACT_SCALE_WORD(nct)) >> 1) + K];                               \
    const ivec2 XB2 = xqi2[((xo + ACT_BSUM_WORD(nct)) >> 1) + K];                              \
    ROWS(RI, u)                                                                                \
  }
#else
#define RI(u, i) acc##i += chunk_scale(R##i, q##u##_##i) * (XS * idot_float(chunk_idot(q##u##_##i, XA, XB) - XB2));
#define CONSUME(u)                                                          \
  if (k + u * KSTRIDE < nu) {                                               \
    const uint K = k + u * KSTRIDE;                                         \
    const uvec4 XA = xq4[(xo >> 2) + 2u * K], XB = xq4[(xo >> 2) + 2u * K + 1u]; \
    const float XS = xqf[xo + ACT_SCALE_WORD(nct) + K];                \
    const int XB2 = xqi[xo + ACT_BSUM_WORD(nct) + K];                  \
    ROWS(RI, u)                                                             \
  }
#endif
#define ROW_DECL(i)                                                  \
  const uint row##i = min(rbase + i, pc.rows - 1u);                 \
  const row_t R##i = row_begin(row##i, slot0 + i);                  \
  float acc##i = 0.0;
#define REDUCE(i) acc##i = subgroupAdd(acc##i);
#define WRITE(i) if (rbase + i < pc.rows) ys[pc.yoff + ob + i] = acc##i;
#if KSPLIT > 1
shared float ksum[TEAMS * RPT];  // [subgroup][row of its team]
#define KPUT(i) ksum[team * RPT + i] = acc##i;
#define KADD(i)                                                                    \
  acc##i = ksum[rteam * KSPLIT * RPT + i];                                         \
  for (uint p = 1u; p < KSPLIT; ++p) acc##i += ksum[(rteam * KSPLIT + p) * RPT + i];
#endif

// the rows' sums: reduced over the subgroup (and its KSPLIT partners), written by one lane
#if RBATCH > 1
#define KSUM_FREE barrier();  // ksum is free for the next batch
#else
#define KSUM_FREE
#endif
#if KSPLIT > 1
#define ROW_OUT                  \
  ROWS1(REDUCE)                  \
  if (lane == 0u) {              \
    ROWS1(KPUT)                  \
  }                              \
  barrier();                     \
  if (part == 0u && lane == 0u) { \
    ROWS1(KADD)                  \
    ROWS1(WRITE)                 \
  }                              \
  KSUM_FREE
#else
#define ROW_OUT     \
  ROWS1(REDUCE)     \
  if (lane == 0u) { \
    ROWS1(WRITE)    \
  }
#endif

void main() {
  const uint team = gl_LocalInvocationID.x / LANES, lane = gl_LocalInvocationID.x % LANES;
  const uint rteam = team / KSPLIT, part = team % KSPLIT;  // the team's rows, its share of their chunks
#if MOE_ROWS
  const uint bpe = MOE_RPE / ROWS_PER_WG, vwg = wg_index(), mslot = vwg / bpe, mblk = vwg % bpe;
  if (mslot >= MOE_TOPK + MOE_SHARED) return;  // uniform over the workgroup
#if MOE_SLOTS
  uint me = MOE_SLOTS;  // the shared expert
  if (mslot < MOE_TOPK) {
    const uint ex = moe_ids[pc.pad + mslot];
    me = ex < MOE_E ? moe_slot_map[pc.x_stride + ex] : 0u;
    if (me >= MOE_SLOTS) me = 0u;
  }
#else
  uint me = mslot < MOE_TOPK ? moe_ids[pc.pad + mslot] : MOE_E;
  if (mslot < MOE_TOPK && me >= MOE_E) me = 0u;
#endif
  const uint wg = me * bpe + mblk;  // the row block read
  const uint xo = pc.xoff + mslot * MOE_XSTRIDE;
  const uint obase = mslot * MOE_RPE + mblk * ROWS_PER_WG + rteam * RPT;  // (batch 0)
#else
  const uint wg = wg_index(), xo = pc.xoff;
  const uint obase = wg * ROWS_PER_WG + rteam * RPT;  // (batch 0)
#endif
  // rows past the end are computed on the last row (uniform control flow for the barriers) and not written
#if ACT_I8
  const uint nct = pc.cols / CHUNK, k0 = 0u, nu = nct / (PAIR + 1u);
  for (uint b = 0u; b < RBATCH; ++b) {  // uniform over the workgroup
    const uint slot0 = b * BATCH_ROWS + rteam * RPT, rbase = wg * ROWS_PER_WG + slot0, ob = obase + b * BATCH_ROWS;
    ROWS1(ROW_DECL)
    uint k = part * LANES + lane;
    REP_U(FETCH)  // in flight while the tables are built (batch 0)
    if (b == 0u) {
      i8_tables();
      tables_init(wg);  // its barrier (every format here has one) also covers i8_tables
    }
    REP_U(CONSUME)
    for (k += UNROLL * KSTRIDE; k < nu; k += UNROLL * KSTRIDE) {
      REP_U(FETCH)
      REP_U(CONSUME)
    }
    ROW_OUT
  }
#else
  const uint slot0 = rteam * RPT, rbase = wg * ROWS_PER_WG + slot0, ob = obase;
  ROWS1(ROW_DECL)
#if X_GLOBAL
  const uint nct = pc.cols / CHUNK, k0 = 0u, nu = nct * SUB;
  uint k = part * LANES + lane;
  REP_U(FETCH)  // in flight while the tables are built
  tables_init(wg);
  REP_U(CONSUME)
  for (k += UNROLL * KSTRIDE; k < nu; k += UNROLL * KSTRIDE) {
    REP_U(FETCH)
    REP_U(CONSUME)
  }
#else
  tables_init(wg);

  for (uint c0 = 0u; c0 < pc.cols; c0 += X_TILE) {  // uniform over the workgroup
    const uint ncols = min(X_TILE, pc.cols - c0), nct = ncols / CHUNK, k0 = c0 / CHUNK, nu = nct;
    uint k = lane;
    barrier();  // the previous tile (or the tables) are done with
    if (c0 == 0u) {
      REP_U(FETCH)  // in flight during the staging
      stage(xo, c0, ncols);
      barrier();
      REP_U(CONSUME)
      k += UNROLL * LANES;
    } else {
      stage(xo, c0, ncols);
      barrier();
    }
    for (; k < nu; k += UNROLL * LANES) {
      REP_U(FETCH)
      REP_U(CONSUME)
    }
  }
#endif
  ROW_OUT
#endif
#if MOE_TAIL
  moe_tail(mslot, mblk);
#endif
}

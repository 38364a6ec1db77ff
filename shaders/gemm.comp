#version 460
#extension GL_GOOGLE_include_directive : require
// Y[t, r] = Σ_c W[r, c] · X[t, c] for many batch rows (prefill chunks): a tiled GEMM. A workgroup of 256
// invocations owns a tile of GM = 64 matrix rows × GN = 64 batch rows (GEMM_GN) and walks the columns in steps of TK: the
// weight tile is fetched and decoded once per step (common/formats.glsl: fetch / chunk_scale / decode4, the same
// f32 values as F::decode_row) into shared memory, the activation tile copied next to it, and every invocation
// accumulates a 4 × 4 block of outputs from the two tiles (8 FMAs per shared-memory load), in column order.
// matvec.comp with NB = 8 reads and decodes every weight once per 8 batch rows; this once per 64.
// Fast path only (kernels.cpp picks it): cols a multiple of TK, chunks aligned, X rows 16-byte aligned.
//
// MOE_GEMM (kernels::moe's expert-grouped path, kernels_moe.cpp): a workgroup owns expert e's rows
// [si·MOE_ROWS + 64·rb, +64) of a stacked expert matrix and walks e's (token, slot) pairs (moe_group.comp's lists,
// binding 6 from word pc.x_stride) in tiles of 64: batch row i of the tile is pair p = list[i]; its activations are
// x[(p / KS)·cols] (MOE_X_TOKEN: the token's input, gate/up) or x[p·cols] (the pair's own h, down), its outputs
// go to y[p·MOE_ROWS + row]. pad = E (or the slot map's offset with MOE_SLOTS; E = MOE_E); an expert not in a slot
// is skipped (moe_sum.comp writes NaN for its tokens). MOE_ROWS is a multiple of 64.
// Push constants: common/formats.glsl's mat_pc (n = batch rows of this dispatch, x_stride / y_stride in floats).
// Defines: ROWS_PER_WG (= GM, the ladder tables' rows), GEMM_GM, GEMM_TK, GEMM_GN, GEMM_WG (= WG_SIZE = GM/4 · GN/4),
// the format's.
//
// GEMM_COOP (kernels::set_gemm_precision(f16)): the tiles are held in shared memory as f16 (weights decoded to f32
// then rounded once, activations rounded once) and the products summed in f32: 1 = the tensor cores through
// VK_NV_cooperative_matrix (each subgroup owns GEMM_BPS 16 × 16 output blocks and issues 16 × 16 × 16 f16
// multiply-adds; the accumulators go through a shared f32 tile to the guarded stores); 2 = the same tiles and
// numerics in plain GLSL (every invocation sums GM·GN/GEMM_WG outputs in column order) so that devices without
// cooperative matrices (lavapipe in CI) run this mode's loads, layout and stores. Defines: GEMM_SG (subgroup size),
// GEMM_WT2 (mode 1: a subgroup's blocks as 2 rows of blocks, below).
#ifndef GEMM_COOP
#define GEMM_COOP 0
#endif
#if GEMM_COOP
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#if GEMM_COOP == 1
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require  // gl_SubgroupID (base.glsl enables it only with REDUCE_SUBGROUP)
#endif
#include "common/base.glsl"
#include "common/formats.glsl"

layout(std430, binding = 3) readonly buffer X4 { vec4 xv[]; };
layout(std430, binding = 4) writeonly buffer Y { float ys[]; };
#ifndef MOE_GEMM
#define MOE_GEMM 0
#endif
#if MOE_GEMM
layout(std430, binding = 6) readonly buffer Lists { uint lists[]; };
#ifndef MOE_SLOTS
#define MOE_SLOTS 0
#endif
#if MOE_SLOTS
layout(std430, binding = 8) readonly buffer SlotMap { uint slot_map[]; };
#endif
#define KS (MOE_TOPK + MOE_SHARED)
#endif

#ifndef GEMM_GM
#define GEMM_GM 64
#endif
#define GM GEMM_GM  // matrix rows per tile (64; 128 for the MoE where the shared memory allows)
#ifndef GEMM_GN
#define GEMM_GN 64
#endif
#define GN GEMM_GN  // batch rows per tile (64, or 16 for the MoE's few pairs per expert); WG_SIZE = GM/4 · GN/4
#define TK GEMM_TK  // columns per step: a multiple of CHUNK (host: max(CHUNK, 32))
#define KCH (TK / CHUNK)  // chunks of a row per step
#define XQ (CHUNK / 4)
#if XQ == 1
#define REP_J(M) M(0)
#elif XQ == 2
#define REP_J(M) M(0) M(1)
#elif XQ == 4
#define REP_J(M) M(0) M(1) M(2) M(3)
#elif XQ == 8
#define REP_J(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#elif XQ == 16
#define REP_J(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)
#endif
#if ROWS_PER_WG != GM
#error "gemm.comp: ROWS_PER_WG must be GM (the ladder tables cover the tile's rows)"
#endif

#if GEMM_COOP
#define TKP (TK + 8)  // row stride of the f16 tiles in halves (16-byte multiple; rows shifted across banks)
// The f16 tiles as packed words of one array, written 4 or 8 halves per store (the stores of single halves
// conflicted on the shared-memory banks): th[(r · TKP + k) / 8] holds weight row r, columns k .. k + 7 (k % 8 ==
// 0); th[XH0 + (t · TKP + k) / 8] batch row t. The cooperative-matrix loads count in these units. GEMM_COOP 1: after
// the last step the same words carry the accumulators on their way to y (f32 [t · GM + r]), GN / GEMM_NR batch rows
// at a time (GEMM_NR rounds: as many as the tiles' space needs).
#define XH0 (GM * TKP / 8)
shared uvec4 th[(GM + GN) * TKP / 8];
#define wh4 th
#define GEMM_NR ((GM * GN * 4 + (GM + GN) * TKP * 2 - 1) / ((GM + GN) * TKP * 2))
#if (GN / 16) % GEMM_NR != 0
#error "gemm.comp: the output rounds must split the tile's 16-row blocks evenly"
#endif
#include "common/f16_sat.glsl"
// one half of the tiles (the emulated mode's reads)
float wh_at(uint i) { return float(unpackFloat2x16(wh4[i >> 3u][(i >> 1u) & 3u])[i & 1u]); }
float xh_at(uint i) { return wh_at(XH0 * 8u + i); }
// 4 halves at a multiple of 4 of the weight tile: the .xy or .zw half of a uvec4
void wh_put4(uint i, uvec2 v) {
  if ((i & 4u) == 0u) wh4[i >> 3u].xy = v;
  else wh4[i >> 3u].zw = v;
}
#else
shared vec4 ws[TK * GM / 4];  // ws[k · GM/4 + r/4]: column k of the tile's rows, 4 rows per vec4
shared vec4 xsm[TK * GN / 4];  // xsm[k · GN/4 + t/4]: column k of the tile's batch rows
#define WZERO(rr, k) ws[(k) * (GM / 4) + (rr) / 4u][(rr) % 4u] = 0.0
#define XPUT(tt, k, v) xsm[(k) * (GN / 4) + (tt) / 4u][(tt) % 4u] = (v)
#endif

#if GEMM_COOP
// The decoded chunk into the f16 tile: 8 halves per store (chunks of 4: 4).
#if XQ == 1
#define WST_CHUNK() wh_put4(rr * TKP + kc * CHUNK, h4sat(decode4(R, q, s, k, 0)));
#define WZERO_CHUNK() wh_put4(rr * TKP + kc * CHUNK, uvec2(0u));
#else
#define WST8(m)                                                                                 \
  wh4[(rr * TKP + kc * CHUNK) / 8u + m] =                                                       \
      uvec4(h4sat(decode4(R, q, s, k, 2u * m)), h4sat(decode4(R, q, s, k, 2u * m + 1u)));
#if XQ == 2
#define WST_F32() WST8(0)
#elif XQ == 4
#define WST_F32() WST8(0) WST8(1)
#elif XQ == 8
#define WST_F32() WST8(0) WST8(1) WST8(2) WST8(3)
#elif XQ == 16
#define WST_F32() WST8(0) WST8(1) WST8(2) WST8(3) WST8(4) WST8(5) WST8(6) WST8(7)
#endif
#if HAS_DECODE8_H && (XQ == 8 || XQ == 4)
// formats with an f16 decode (formats.glsl decode8_h: the ladders, FP8): packed f16 arithmetic where the chunk's
// scale allows it
#define WSTH8(m) wh4[(rr * TKP + kc * CHUNK) / 8u + m] = decode8_h(q, s2, m);
#if XQ == 8
#define WSTH_ALL() WSTH8(0) WSTH8(1) WSTH8(2) WSTH8(3)
#else
#define WSTH_ALL() WSTH8(0) WSTH8(1)
#endif
#define WST_CHUNK()                                                                             \
  if (decode8_h_ok(s)) {                                                                        \
    const f16vec2 s2 = f16vec2(decode8_h_scale(s));                                             \
    WSTH_ALL()                                                                                  \
  } else {                                                                                      \
    WST_F32()                                                                                   \
  }
#else
#define WST_CHUNK() WST_F32()
#endif
#define WZERO_CHUNK() for (uint i = 0u; i < CHUNK / 8u; ++i) wh4[(rr * TKP + kc * CHUNK) / 8u + i] = uvec4(0u);
#endif
#define XST_VEC4(tt, c4, v) wh_put4(XH0 * 8u + (tt) * TKP + 4u * (c4), h4sat(v))
#else
#define WST(j)                                                                                  \
  {                                                                                             \
    const vec4 v = decode4(R, q, s, k, j);                                                      \
    const uint c0 = kc * CHUNK + 4u * j;                                                        \
    wsf_store(c0, rr, v);                                                                       \
  }
#define WST_CHUNK() REP_J(WST)
#define WZERO_CHUNK() for (uint i = 0u; i < CHUNK; ++i) WZERO(rr, kc * CHUNK + i);
#define XST_VEC4(tt, c4, v) [[unroll]] for (uint i = 0u; i < 4u; ++i) XPUT(tt, 4u * (c4) + i, (v)[i]);
#endif

// Per-invocation shares of a step's loads (GEMM_WG = WG_SIZE as a define): weight chunks and activation vec4.
#define GEMM_WF ((GM * KCH + GEMM_WG - 1) / GEMM_WG)
#define GEMM_XF ((GN * TK / 4 + GEMM_WG - 1) / GEMM_WG)
#if GEMM_WF == 1
#define REP_F(M) M(0)
#elif GEMM_WF == 2
#define REP_F(M) M(0) M(1)
#elif GEMM_WF == 4
#define REP_F(M) M(0) M(1) M(2) M(3)
#elif GEMM_WF == 8
#define REP_F(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#elif GEMM_WF == 16
#define REP_F(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7) M(8) M(9) M(10) M(11) M(12) M(13) M(14) M(15)
#else
#error "gemm.comp: unsupported weight chunks per invocation"
#endif
#if GEMM_XF == 1
#define REP_X(M) M(0)
#elif GEMM_XF == 2
#define REP_X(M) M(0) M(1)
#elif GEMM_XF == 4
#define REP_X(M) M(0) M(1) M(2) M(3)
#elif GEMM_XF == 8
#define REP_X(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#else
#error "gemm.comp: unsupported activation loads per invocation"
#endif
// The next step's loads in registers (cn: the columns they hold). Tried on the H200: a second register set (two
// steps in flight) gained nothing on the expert GEMMs.
#define WDECL(u) raw_t wq##u; bool wv##u = false;
#define WLOAD(u)                                                                                \
  {                                                                                             \
    const uint f = lid + u * GEMM_WG, rr = f / KCH, kc = f % KCH, r = row0 + rr;                \
    wv##u = f < GM * KCH && r < row_end;                                                        \
    if (wv##u) wq##u = fetch(row_begin(r, rr), r, cn / CHUNK + kc);                             \
  }
#define WSTORE(u)                                                                               \
  {                                                                                             \
    const uint f = lid + u * GEMM_WG, rr = f / KCH, kc = f % KCH, r = row0 + rr;                \
    if (wv##u) {                                                                                \
      const row_t R = row_begin(r, rr);                                                         \
      const raw_t q = wq##u;                                                                    \
      const uint k = cn / CHUNK + kc;                                                           \
      const float s = chunk_scale(R, q);                                                        \
      WST_CHUNK()                                                                               \
    } else if (f < GM * KCH) {                                                                  \
      WZERO_CHUNK()                                                                             \
    }                                                                                           \
  }
// Each invocation loads the same batch row at every step: its offset in x (XOFF: for the MoE a lookup in the
// expert's pair list) is computed once per tile of batch rows (XROW), so a step's loads never wait on another load.
#define XROW(u)                                                                                 \
  uint xr##u = 0xFFFFFFFFu;                                                                     \
  {                                                                                             \
    const uint f = lid + u * GEMM_WG, t = t_base + f / (TK / 4);                                \
    if (f < GN * (TK / 4) && t < count) xr##u = XOFF(t);                                        \
  }
#define XDECL(u) vec4 xq##u = vec4(0.0);
#define XLOAD(u)                                                                                \
  {                                                                                             \
    const uint c4 = (lid + u * GEMM_WG) % (TK / 4);                                             \
    xq##u = xr##u != 0xFFFFFFFFu ? xv[((xr##u + cn) >> 2) + c4] : vec4(0.0);                     \
  }
#define XSTORE(u)                                                                               \
  {                                                                                             \
    const uint f = lid + u * GEMM_WG, tt = f / (TK / 4), c4 = f % (TK / 4);                     \
    if (f < GN * (TK / 4)) XST_VEC4(tt, c4, xq##u);                                             \
  }

#if !GEMM_COOP
// scalar stores into the vec4 tiles (transposed: consecutive rows of one column are consecutive floats)
void wsf_store(uint c0, uint rr, vec4 v) {
  [[unroll]] for (uint i = 0u; i < 4u; ++i) ws[(c0 + i) * (GM / 4) + rr / 4u][rr % 4u] = v[i];
}
#endif

#if GEMM_COOP == 1
#define GEMM_BLOCKS ((GM / 16) * (GN / 16))  // 16 × 16 output blocks of a tile
#define GEMM_BPS (GEMM_BLOCKS / (GEMM_WG / GEMM_SG))  // blocks per subgroup (host: 1, 2, 4 or 8)
#define ACC_T fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define HALF_T fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#if GEMM_BPS == 1
#define REP_B(M) M(0)
#elif GEMM_BPS == 2
#define REP_B(M) M(0) M(1)
#elif GEMM_BPS == 4
#define REP_B(M) M(0) M(1) M(2) M(3)
#elif GEMM_BPS == 8
#define REP_B(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#else
#error "gemm.comp: unsupported output blocks per subgroup"
#endif
#ifndef GEMM_WT2
#define GEMM_WT2 0
#endif
#if GEMM_WT2
// GEMM_WT2 = 1 (matvec_tuning::gemm_warp_tile = 2): a subgroup's BPS blocks are 2 rows × NC = BPS / 2 batch columns of
// blocks, so each 16-column step loads 2 A and NC B fragments for its BPS products (6 loads for 8, 4 for 4) where
// one row of blocks loads 1 A and BPS B (9 for 8, 5 for 4). Block j: row 2·mr + j / NC, column NC·nc + j % NC of
// the subgroup's (mr, nc) in a grid of GN / (16·NC) subgroup columns.
#define WT_NC (GEMM_BPS / 2)
#if (GEMM_BPS != 4 && GEMM_BPS != 8) || (GM / 32) * (GN / (16 * WT_NC)) != GEMM_WG / GEMM_SG
#error "gemm.comp GEMM_WT2: 4 or 8 blocks per subgroup tiling the tile in 2-row groups"
#endif
#define BLK_M(j) (16u * (2u * (gl_SubgroupID / (GN / (16 * WT_NC))) + (j) / WT_NC))
#define BLK_N(j) (16u * (WT_NC * (gl_SubgroupID % (GN / (16 * WT_NC))) + (j) % WT_NC))
#else
// block b = subgroup · BPS + j: rows 16·(b / (GN/16)), batch rows 16·(b % (GN/16))
#define BLK_M(j) (16u * ((gl_SubgroupID * GEMM_BPS + j) / (GN / 16)))
#define BLK_N(j) (16u * ((gl_SubgroupID * GEMM_BPS + j) % (GN / 16)))
#endif
#define ACC_DECL(j) ACC_T cacc##j = ACC_T(0.0);
#define LOAD_A(a, j) coopMatLoadNV(a, wh4, (BLK_M(j) * TKP + kk) / 8u, TKP / 8u, false)
#define LOAD_B(b, j) coopMatLoadNV(b, th, XH0 + (BLK_N(j) * TKP + kk) / 8u, TKP / 8u, true)
// A fragment shared by every block of the subgroup is loaded once per 16 columns (the compiler did not merge the
// repeated loads: 10 % of a 4096 × 8192 product on the H200, docs/PERF.md "Twentieth session"): the blocks lie in one
// row of blocks where BPS divides GN / 16 (every tile the host builds: the dense ones, and the experts' one block per
// subgroup).
#if GEMM_WT2
#define GEMM_SHARE 2
// batch column k of the subgroup's blocks: one B fragment for the blocks k (row a0) and k + NC (row a1)
#define WT_MMA(j, jj)                                                                           \
  {                                                                                             \
    HALF_T b;                                                                                   \
    LOAD_B(b, j);                                                                               \
    cacc##j = coopMatMulAddNV(a0, b, cacc##j);                                                  \
    cacc##jj = coopMatMulAddNV(a1, b, cacc##jj);                                                \
  }
#if GEMM_BPS == 8
#define WT_ALL() WT_MMA(0, 4) WT_MMA(1, 5) WT_MMA(2, 6) WT_MMA(3, 7)
#else
#define WT_ALL() WT_MMA(0, 2) WT_MMA(1, 3)
#endif
#elif (GN / 16) % GEMM_BPS == 0
#define GEMM_SHARE 1
#define ACC_MMA(j)                                                                              \
  {                                                                                             \
    HALF_T b;                                                                                   \
    LOAD_B(b, j);                                                                               \
    cacc##j = coopMatMulAddNV(a, b, cacc##j);                                                   \
  }
#else
#define GEMM_SHARE 0
#define ACC_MMA(j)                                                                              \
  {                                                                                             \
    HALF_T a, b;                                                                                \
    LOAD_A(a, j);                                                                               \
    LOAD_B(b, j);                                                                               \
    cacc##j = coopMatMulAddNV(a, b, cacc##j);                                                   \
  }
#endif
#define ACC_STORE(j)                                                                            \
  if (BLK_N(j) / (GN / GEMM_NR) == rnd)                                                          \
    coopMatStoreNV(cacc##j, th, ((BLK_N(j) % (GN / GEMM_NR)) * GM + BLK_M(j)) / 4u, GM / 4u, true);
#elif GEMM_COOP == 2
#define GEMM_EPI (GM * GN / GEMM_WG)  // outputs per invocation: lid + i·WG → batch row / GM, row % GM
#endif

// One step's products from the shared tiles into the accumulators.
#if GEMM_COOP == 1 && GEMM_SHARE == 2
#define GEMM_COMPUTE()                                                                          \
  [[unroll]] for (uint kk = 0u; kk < TK; kk += 16u) {                                           \
    HALF_T a0, a1;                                                                              \
    LOAD_A(a0, 0);                                                                              \
    LOAD_A(a1, WT_NC);                                                                          \
    WT_ALL()                                                                                    \
  }
#elif GEMM_COOP == 1 && GEMM_SHARE == 1
#define GEMM_COMPUTE() [[unroll]] for (uint kk = 0u; kk < TK; kk += 16u) { HALF_T a; LOAD_A(a, 0); REP_B(ACC_MMA) }
#elif GEMM_COOP == 1
#define GEMM_COMPUTE() [[unroll]] for (uint kk = 0u; kk < TK; kk += 16u) { REP_B(ACC_MMA) }
#elif GEMM_COOP == 2
#define GEMM_COMPUTE()                                                                          \
  [[unroll]] for (uint i = 0u; i < GEMM_EPI; ++i) {                                             \
    const uint o = lid + i * GEMM_WG, r = o % GM, t = o / GM;                                   \
    float a = eacc[i];                                                                          \
    for (uint kk = 0u; kk < TK; ++kk) a += wh_at(r * TKP + kk) * xh_at(t * TKP + kk);          \
    eacc[i] = a;                                                                                \
  }
#else
#define GEMM_COMPUTE()                                                                          \
  for (uint kk = 0u; kk < TK; ++kk) {                                                           \
    const vec4 a = ws[kk * (GM / 4) + ty], b = xsm[kk * (GN / 4) + tx];                         \
    acc0 += a.x * b;                                                                            \
    acc1 += a.y * b;                                                                            \
    acc2 += a.z * b;                                                                            \
    acc3 += a.w * b;                                                                            \
  }
#endif

void main() {
  const uint lid = gl_LocalInvocationID.x, g = wg_index();
#if MOE_GEMM
#if MOE_SLOTS
  const uint E = MOE_E, NS = MOE_SLOTS;
#else
  const uint E = pc.pad, NS = E;
#endif
  const uint ne = E + MOE_SHARED, nrb = MOE_ROWS / GM;
  // Workgroups: E · nrb routed tiles (each loops over its expert's pairs, ~n·top_k/E of them), then — the shared
  // expert sees every token — nrb · ceil(n / GN) shared tiles, one tile of pairs each (a loop over all n would
  // leave nrb workgroups running long after the rest).
  uint e, rb, tb_first = 0u, tb_step = 1u;
  if (g < E * nrb) {  // uniform over the workgroup
    e = g / nrb, rb = g % nrb;
  } else {
#if MOE_SHARED
    const uint gs = g - E * nrb;
    e = E, rb = gs % nrb, tb_first = gs / nrb, tb_step = 0xFFFFu;  // its count is n: past it, the check below
#else
    return;
#endif
  }
  const uint count = lists[pc.x_stride + e];
  if (count <= tb_first * GN) return;  // uniform
#if MOE_SLOTS
  const uint si = e < E ? slot_map[pc.pad + e] : NS;
  if (e < E && si >= NS) return;  // not in a slot
#else
  const uint si = e;
#endif
  const uint lb = pc.x_stride + ne + e * pc.n * MOE_TOPK;
  const uint row0 = si * MOE_ROWS + rb * GM, row_end = row0 + GM;
#if MOE_X_TOKEN
#define XOFF(i) (pc.xoff + (lists[lb + (i)] / KS) * pc.cols)
#else
#define XOFF(i) (pc.xoff + lists[lb + (i)] * pc.cols)
#endif
#define YIDX(i, r) (pc.yoff + lists[lb + (i)] * MOE_ROWS + (r) - si * MOE_ROWS)
#else
  const uint nrb = (pc.rows + GM - 1u) / GM, rb = g % nrb;
  const uint row0 = rb * GM, row_end = min(pc.rows, row0 + GM), count = pc.n;
  const uint tb_first = g / nrb, tb_step = 0xFFFFu;  // one tile of batch rows per workgroup
#define XOFF(i) (pc.xoff + (i) * pc.x_stride)
#define YIDX(i, r) (pc.yoff + (i) * pc.y_stride + (r))
#endif
  tables_init(row0 / GM);
#if !GEMM_COOP
  const uint tx = lid % (GN / 4u), ty = lid / (GN / 4u);  // outputs: rows 4ty .. 4ty+3, batch rows 4tx .. 4tx+3
#endif
  for (uint tb = tb_first; tb * GN < count; tb += tb_step) {  // uniform
    const uint t_base = tb * GN;
#if GEMM_COOP == 1
    REP_B(ACC_DECL)
#elif GEMM_COOP == 2
    float eacc[GEMM_EPI];
    [[unroll]] for (uint i = 0u; i < GEMM_EPI; ++i) eacc[i] = 0.0;
#else
    vec4 acc0 = vec4(0.0), acc1 = vec4(0.0), acc2 = vec4(0.0), acc3 = vec4(0.0);  // acc_i[j]: row 4ty+i, batch 4tx+j
#endif
    // The next step's weight chunks and activations are loaded into registers before this step's FMAs, so their
    // latency overlaps the arithmetic (each invocation: GEMM_WF chunks, GEMM_XF vec4).
    REP_X(XROW)
    uint cn = 0u;
    REP_F(WDECL)
    REP_X(XDECL)
    REP_F(WLOAD)
    REP_X(XLOAD)
    for (uint c0 = 0u; c0 < pc.cols; c0 += TK) {
      barrier();  // the previous step's tiles are consumed
      REP_F(WSTORE)  // weight tile: GM rows × KCH chunks, decoded
      REP_X(XSTORE)  // activation tile: GN batch rows × TK columns
      barrier();
      if (c0 + TK < pc.cols) {  // uniform
        cn = c0 + TK;
        REP_F(WLOAD)
        REP_X(XLOAD)
      }
      GEMM_COMPUTE()
    }
#if GEMM_COOP == 1
    [[unroll]] for (uint rnd = 0u; rnd < GEMM_NR; ++rnd) {
      barrier();  // the tiles (or the round before) are consumed
      REP_B(ACC_STORE)
      barrier();
      [[unroll]] for (uint i = 0u; i < GM * GN / GEMM_NR / GEMM_WG; ++i) {
        // consecutive invocations: consecutive rows
        const uint o = lid + i * GEMM_WG, r = o % GM, t = t_base + rnd * (GN / GEMM_NR) + o / GM;
        const float v = uintBitsToFloat(th[o >> 2u][o & 3u]);
        if (row0 + r < row_end && t < count) ys[YIDX(t, row0 + r)] = v;
      }
    }
#elif GEMM_COOP == 2
    [[unroll]] for (uint i = 0u; i < GM * GN / GEMM_WG; ++i) {
      const uint o = lid + i * GEMM_WG, r = o % GM, t = t_base + o / GM;  // consecutive invocations: consecutive rows
      const float v = eacc[i];
      if (row0 + r < row_end && t < count) ys[YIDX(t, row0 + r)] = v;
    }
#else
    const uint r0 = row0 + 4u * ty;
#define OUT_ROW(i)                                                                              \
  if (r0 + i < row_end) {                                                                       \
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {                                                 \
      const uint t = t_base + 4u * tx + j;                                                      \
      if (t < count) ys[YIDX(t, r0 + i)] = acc##i[j];                                           \
    }                                                                                           \
  }
    OUT_ROW(0) OUT_ROW(1) OUT_ROW(2) OUT_ROW(3)
#endif
  }
}

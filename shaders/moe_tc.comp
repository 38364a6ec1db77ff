#version 460
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
// Expert-grouped MoE products on f16 tiles (kernels::moe with n >= 2 in the f16 GEMM modes and
// matvec_tuning::moe_tiles = 2; kernels_moe.cpp moe_grouped_tc), steps 3 (TC_GU 1: gate/up, then SwiGLU) and 4
// (TC_GU 0: down) of 5. Opt-in: on the H200 gemm.comp's MOE_GEMM tiles (one decoded weight tile per workgroup between
// two barriers) are faster for every format measured (q2tp 6.90 against 8.94 ms, MXFP4 5.32 against 5.53; 256
// experts of 4096 × 2048, 512 tokens; docs/PERF.md "Fourteenth session").
//
// The work is split by subgroups, not by workgroups: subgroup s of a workgroup owns 32 weight rows of expert e —
// TC_GU 1: gate rows [g, g + 16) and the up rows [I + g, I + g + 16) beside them (g = 16·(TC_SG·rb + s)); TC_GU 0:
// down rows [32·(TC_SG·rb + s), +32) — and walks the columns TK at a time: it decodes its rows' chunks into its own
// region of shared memory as f16 (common/f16_sat.glsl; the same values as gemm.comp's weight tile), then multiplies
// them by the activations of up to 16·TC_NT of e's pairs, loaded straight from memory: moe_tc_gather.comp wrote every
// expert's pairs as f16 rows in blocks of 16 (xg, from row off[e]), each block as 16 × 16 tiles of 512 contiguous
// bytes, so an activation fragment is one contiguous load. No workgroup barrier after the tables: a subgroup waits
// only for its own lanes. Rows past e's count (the block's padding) are multiplied too and never stored.
//
// Epilogue, through the same shared region (the accumulators stored column-major, 16 rows per pair):
//   TC_GU 1: h[q, g + i] = silu(min(gate, L)) · clamp(up, −L, L) · w(p) (common/swiglu.glsl, moe_act.comp's
//            arithmetic) rounded to f16 into hg at row q = off[e] + i, in xg's block layout — the down product's
//            input;
//   TC_GU 0: y[p · MOE_ROWS + row] (f32), p the pair: moe_sum.comp adds them per token as on the other paths.
// Numerics: f16 weights and activations, f32 sums (the f16 GEMM mode's; the products' order is the tensor cores').
//
// TC_COOP 1: VK_NV_cooperative_matrix, 16 × 16 × 16 f16 multiply-adds into f32; 2: the same tiles, loads and
// epilogue in plain GLSL (each lane sums 256 / LANES outputs of each 16 × 16 block in column order), so devices
// without cooperative matrices (lavapipe in CI) run this kernel's layout, gather and epilogue.
//
// Workgroups: E · nrb routed (each loops over its expert's pairs, 16·TC_NT per pass), then with MOE_SHARED
// nrb · ceil(n / (16·TC_NT)) for the shared expert (one pass each). An expert not in a slot (MOE_SLOTS) is skipped.
// Push constants: common/formats.glsl's mat_pc — rows (stacked rows), cols, n, the format's planes; xoff: the
// activations (xg or hg, blocks of 16 rows × cols halves) in uvec4 units; x_stride: the lists' first word (binding
// 6); yoff: hg (TC_GU 1, words) or y (floats); y_stride: off[] (binding 7); e_off: the routing weights (binding 8,
// TC_GU 1); pad: E (or the slot map's offset at binding 9 with MOE_SLOTS; E = MOE_E).
// Defines: TC_COOP, TC_GU, TC_SG (subgroups per workgroup), TC_NT (16-pair blocks per pass, 1 or 2), TK (columns
// per step, a multiple of 16 and of CHUNK), MOE_TOPK, MOE_SHARED, MOE_ROWS (output rows per expert: I or d), MOE_I,
// MOE_LIMIT, [MOE_SLOTS, MOE_E], the format's (fast path only).
#if TC_COOP == 1
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#endif
#define GEMM_COOP 1  // formats.glsl's f16 decode (decode8_h) where the format has one
#define ROWS_PER_WG (TC_SG * 32u)
#if TC_GU
// the ladder table row of slot j (subgroup j / 32: 16 gate rows, then the 16 up rows I further)
#define TABLE_ROW(f, j) ((f) + ((j) / 32u) * 16u + ((j) % 16u) + (((j) % 32u) >= 16u ? MOE_I : 0u))
#else
#define TABLE_ROW(f, j) ((f) + (j))
#endif
#include "common/base.glsl"
#include "common/formats.glsl"
#include "common/f16_sat.glsl"
#include "common/swiglu.glsl"

#define TKP (TK + 8)  // row stride of a subgroup's f16 tile in halves (16-byte multiple; rows shifted across banks)
#define REGION (32 * TKP / 8)  // a subgroup's region in uvec4: 32 rows × TKP halves; the epilogue's f32 blocks fit
#if 2 * TC_NT * 256 > 32 * TKP / 2
#error "moe_tc.comp: the accumulators do not fit the subgroup's region"
#endif
#if TC_COOP == 1 && TK != 64
#error "moe_tc.comp: the tensor-core mode's fragments are written out for TK = 64"
#endif
shared uvec4 th[TC_SG * REGION];
layout(std430, binding = 3) readonly buffer XG4 { uvec4 xg4[]; };
#if TC_COOP == 2
layout(std430, binding = 3) readonly buffer XG1 { uint xg1[]; };
#endif
#if TC_GU
layout(std430, binding = 4) writeonly buffer HG { uint hgw[]; };
layout(std430, binding = 8) readonly buffer Wr { float wr[]; };
#else
layout(std430, binding = 4) writeonly buffer Y { float ys[]; };
#endif
layout(std430, binding = 6) readonly buffer Lists { uint lists[]; };
layout(std430, binding = 7) readonly buffer Off { uint offs[]; };
#ifndef MOE_SLOTS
#define MOE_SLOTS 0
#endif
#if MOE_SLOTS
layout(std430, binding = 9) readonly buffer SlotMap { uint slot_map[]; };
#endif
#define KS (MOE_TOPK + MOE_SHARED)
#define KCH (TK / CHUNK)
#define CPL (32 * KCH / LANES)  // chunks per lane per step
// the lane's chunk loops: unrolled on the tensor cores; emulated (lavapipe: 8 lanes, 8–16 chunks each) as loops,
// which its LLVM compiles in a fraction of the time
#if TC_COOP == 1
#define CPL_LOOP [[unroll]]
#else
#define CPL_LOOP [[dont_unroll]]
#endif
#if CPL * LANES != 32 * KCH
#error "moe_tc.comp: a step's chunks must split evenly over the lanes"
#endif

// q2tp: the f16 pair (code0 − offset, code1 − offset) of every 4-bit pair of codes, so that a decoded pair is one
// lookup and one f16 multiply (the 16 words sit in 16 banks: lanes never conflict). Each value is rounded once, in
// the multiply by the f16 scale: bit-identical to formats.glsl's decode8_h.
#if defined(FMT_Q2TP) && CHUNK == 32 && LADDER_LOW_FIRST != 0 && LADDER_VALUE_BYTES == 8
#define TC_Q2_PAIRS 1
shared uint q2h[16];
void tc_tables() {  // before tables_init, whose barrier covers it
  const uint i = gl_LocalInvocationID.x;
  if (i < 16u) q2h[i] = packFloat2x16(f16vec2(float(i & 3u) - LADDER_OFFSET, float(i >> 2) - LADDER_OFFSET));
}
uint q2_pair(uint v, f16vec2 s2) { return packFloat2x16(unpackFloat2x16(q2h[v & 15u]) * s2); }
#else
void tc_tables() {}
#endif

// The chunk's f16 values into the tile at half index hidx (a multiple of 8).
void put_chunk(uint hidx, row_t R, raw_t q, uint k) {
  const float s = chunk_scale(R, q);
  const uint w = hidx / 8u;
#if TC_Q2_PAIRS
  if (decode8_h_ok(s)) {
    const f16vec2 s2 = f16vec2(decode8_h_scale(s));
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {  // halves 8j .. 8j + 7: pairs 4(j % 2) .. of value word j / 2
      const uint v = q.q[j >> 1u] >> (16u * (j & 1u));
      th[w + j] = uvec4(q2_pair(v, s2), q2_pair(v >> 4u, s2), q2_pair(v >> 8u, s2), q2_pair(v >> 12u, s2));
    }
    return;
  }
#elif HAS_DECODE8_H && (CHUNK == 32 || CHUNK == 16)
  if (decode8_h_ok(s)) {
    const f16vec2 s2 = f16vec2(decode8_h_scale(s));
    [[unroll]] for (uint m = 0u; m < CHUNK / 8u; ++m) th[w + m] = decode8_h(q, s2, m);
    return;
  }
#endif
  [[unroll]] for (uint m = 0u; m < CHUNK / 8u; ++m)
    th[w + m] = uvec4(h4sat(decode4(R, q, s, k, 2u * m)), h4sat(decode4(R, q, s, k, 2u * m + 1u)));
}

#if TC_COOP == 1
#define ACC_T fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define HALF_T fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#else
#define EPL (256 / LANES)  // outputs per lane of a 16 × 16 block: o = lane + i·LANES, row o % 16, pair o / 16
vec2 th_w2(uint w) { return vec2(unpackFloat2x16(th[w >> 2u][w & 3u])); }  // halves 2w, 2w + 1 of the tiles
#endif

void main() {
  const uint g = wg_index(), lane = gl_SubgroupInvocationID, sg = gl_SubgroupID;
#if MOE_SLOTS
  const uint E = MOE_E, NS = MOE_SLOTS;
#else
  const uint E = pc.pad, NS = E;
#endif
  const uint ne = E + MOE_SHARED, RPW = TC_SG * (TC_GU != 0 ? 16u : 32u), nrb = MOE_ROWS / RPW;
  uint e, rb, tb_first = 0u, tb_step = 1u;
  if (g < E * nrb) {  // uniform over the workgroup
    e = g / nrb, rb = g % nrb;
  } else {
#if MOE_SHARED
    const uint gs = g - E * nrb;
    e = E, rb = gs % nrb, tb_first = gs / nrb, tb_step = 0xFFFFu;  // one pass: past it, the loop's check
#else
    return;
#endif
  }
  const uint count = lists[pc.x_stride + e];
  if (count <= tb_first * 16u * TC_NT) return;  // uniform
#if MOE_SLOTS
  const uint si = e < E ? slot_map[pc.pad + e] : NS;
  if (e < E && si >= NS) return;  // not in a slot
#else
  const uint si = e;
#endif
  const uint lb = pc.x_stride + ne + e * pc.n * MOE_TOPK, q0 = offs[pc.y_stride + e];
  // stacked rows: gate/up si·2I + [0, 2I), down si·d + [0, d)
  const uint first = si * (TC_GU != 0 ? 2u * MOE_I : MOE_ROWS) + rb * RPW;
  tc_tables();
  tables_init(first);
  const uint abase = sg * REGION * 8u;  // this subgroup's region, in halves
  // lane's chunks: f = lane + u·LANES → tile row f / KCH, chunk f % KCH of the step
#define AROW(ar) (TC_GU != 0 ? first + sg * 16u + (ar) % 16u + ((ar) >= 16u ? MOE_I : 0u) : first + sg * 32u + (ar))
  const uint nct = pc.cols / CHUNK;
  for (uint tb = tb_first; tb * 16u * TC_NT < count; tb += tb_step) {  // uniform
    const uint t0 = tb * 16u * TC_NT;
    const bool two = TC_NT == 2 && t0 + 16u < count;  // uniform
#if TC_COOP == 1
    ACC_T c00 = ACC_T(0.0), c01 = ACC_T(0.0), c10 = ACC_T(0.0), c11 = ACC_T(0.0);  // c<a><block>: rows 16a, pairs 16b
#else
    float c00[EPL], c01[EPL], c10[EPL], c11[EPL];
    [[unroll]] for (uint i = 0u; i < EPL; ++i) c00[i] = 0.0, c01[i] = 0.0, c10[i] = 0.0, c11[i] = 0.0;
#endif
    raw_t wq[CPL];
    CPL_LOOP for (uint u = 0u; u < CPL; ++u) {
      const uint f = lane + u * LANES, ar = f / KCH;
      wq[u] = fetch(row_begin(AROW(ar), sg * 32u + ar), AROW(ar), f % KCH);
    }
    // halves: the first tile of pair block 0 (block 1: 16·cols further; the tile of columns c: 16c further)
    const uint xb0 = (pc.xoff << 3) + (q0 + t0) * pc.cols;
#if TC_COOP == 1
    // The step's activation fragments (b<block>_<k tile>) are loaded one step ahead (n<block>_<k tile>), like the
    // weights: a fragment from memory takes the L2's latency, which the step's products then cover.
    HALF_T b00, b01, b02, b03, b10, b11, b12, b13, n00, n01, n02, n03, n10, n11, n12, n13;
#define BLOAD(P, c)                                                                             \
  coopMatLoadNV(P##00, xg4, (xb0 + 16u * (c)) / 8u, 2u, true);                                  \
  coopMatLoadNV(P##01, xg4, (xb0 + 16u * (c) + 256u) / 8u, 2u, true);                           \
  coopMatLoadNV(P##02, xg4, (xb0 + 16u * (c) + 512u) / 8u, 2u, true);                           \
  coopMatLoadNV(P##03, xg4, (xb0 + 16u * (c) + 768u) / 8u, 2u, true);                           \
  if (two) {                                                                                    \
    coopMatLoadNV(P##10, xg4, (xb0 + 16u * pc.cols + 16u * (c)) / 8u, 2u, true);                \
    coopMatLoadNV(P##11, xg4, (xb0 + 16u * pc.cols + 16u * (c) + 256u) / 8u, 2u, true);         \
    coopMatLoadNV(P##12, xg4, (xb0 + 16u * pc.cols + 16u * (c) + 512u) / 8u, 2u, true);         \
    coopMatLoadNV(P##13, xg4, (xb0 + 16u * pc.cols + 16u * (c) + 768u) / 8u, 2u, true);         \
  }
#define MMA_K(j)                                                                                \
  {                                                                                             \
    HALF_T a0, a1;                                                                              \
    coopMatLoadNV(a0, th, (abase + 16u * j) / 8u, TKP / 8u, false);                             \
    coopMatLoadNV(a1, th, (abase + 16u * TKP + 16u * j) / 8u, TKP / 8u, false);                 \
    c00 = coopMatMulAddNV(a0, b0##j, c00);                                                      \
    c10 = coopMatMulAddNV(a1, b0##j, c10);                                                      \
    if (two) {                                                                                  \
      c01 = coopMatMulAddNV(a0, b1##j, c01);                                                    \
      c11 = coopMatMulAddNV(a1, b1##j, c11);                                                    \
    }                                                                                           \
  }
    BLOAD(b, 0u)
#endif
    for (uint c0 = 0u; c0 < pc.cols; c0 += TK) {
      CPL_LOOP for (uint u = 0u; u < CPL; ++u) {
        const uint f = lane + u * LANES, ar = f / KCH, kc = f % KCH;
        put_chunk(abase + ar * TKP + kc * CHUNK, row_begin(AROW(ar), sg * 32u + ar), wq[u], c0 / CHUNK + kc);
      }
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      const bool more = c0 + TK < pc.cols;  // uniform
      if (more) {  // the next step's chunks and fragments while this one multiplies
        CPL_LOOP for (uint u = 0u; u < CPL; ++u) {
          const uint f = lane + u * LANES, ar = f / KCH;
          wq[u] = fetch(row_begin(AROW(ar), sg * 32u + ar), AROW(ar), (c0 + TK) / CHUNK + f % KCH);
        }
#if TC_COOP == 1
        BLOAD(n, c0 + TK)
#endif
      }
#if TC_COOP == 1
      MMA_K(0) MMA_K(1) MMA_K(2) MMA_K(3)
      if (more) {
        b00 = n00, b01 = n01, b02 = n02, b03 = n03;
        if (two) b10 = n10, b11 = n11, b12 = n12, b13 = n13;
      }
#else
      const uint xrow = xb0 + c0 * 16u;
      // two halves per load, in column order; not unrolled (lavapipe's LLVM compiles it in a fraction of the time)
      [[dont_unroll]] for (uint i = 0u; i < EPL; ++i) {
        const uint o = lane + i * LANES, r = o % 16u, t = o / 16u;
        const uint aw0 = (abase + r * TKP) / 2u, aw1 = (abase + (16u + r) * TKP) / 2u, bw = (xrow + 16u * t) / 2u;
#define BW(kk) (((kk) / 8u) * 128u + (kk) % 8u)  // words: column pair kk of a pair's row across the 16-column tiles
        float s00 = c00[i], s10 = c10[i];
        for (uint kk = 0u; kk < TK / 2u; ++kk) {
          const vec2 a0 = th_w2(aw0 + kk), a1 = th_w2(aw1 + kk), b0 = vec2(unpackFloat2x16(xg1[bw + BW(kk)]));
          s00 += a0.x * b0.x, s10 += a1.x * b0.x;
          s00 += a0.y * b0.y, s10 += a1.y * b0.y;
        }
        c00[i] = s00, c10[i] = s10;
        if (two) {
          const uint bw1 = bw + 8u * pc.cols;  // pair block 1: 16 rows further
          float s01 = c01[i], s11 = c11[i];
          for (uint kk = 0u; kk < TK / 2u; ++kk) {
            const vec2 a0 = th_w2(aw0 + kk), a1 = th_w2(aw1 + kk), b1 = vec2(unpackFloat2x16(xg1[bw1 + BW(kk)]));
            s01 += a0.x * b1.x, s11 += a1.x * b1.x;
            s01 += a0.y * b1.y, s11 += a1.y * b1.y;
          }
          c01[i] = s01, c11[i] = s11;
        }
      }
#endif
      subgroupBarrier();  // every lane is done with the tile before the next step overwrites it
    }
    // epilogue: block (a, b) at word 256·(2b + a) of the region, column-major (row r of pair t at 16t + r)
    const uint wbase = abase / 2u;  // the region in 32-bit words
#if TC_COOP == 1
    coopMatStoreNV(c00, th, wbase / 4u, 4u, true);
    coopMatStoreNV(c10, th, (wbase + 256u) / 4u, 4u, true);
    if (two) {
      coopMatStoreNV(c01, th, (wbase + 512u) / 4u, 4u, true);
      coopMatStoreNV(c11, th, (wbase + 768u) / 4u, 4u, true);
    }
#else
    [[unroll]] for (uint i = 0u; i < EPL; ++i) {
      const uint o = lane + i * LANES, w = wbase + (o / 16u) * 16u + o % 16u;
      th[w >> 2u][w & 3u] = floatBitsToUint(c00[i]);
      th[(w + 256u) >> 2u][(w + 256u) & 3u] = floatBitsToUint(c10[i]);
      th[(w + 512u) >> 2u][(w + 512u) & 3u] = floatBitsToUint(c01[i]);
      th[(w + 768u) >> 2u][(w + 768u) & 3u] = floatBitsToUint(c11[i]);
    }
#endif
    subgroupMemoryBarrierShared();
    subgroupBarrier();
#define TH_F(w) uintBitsToFloat(th[(w) >> 2u][(w) & 3u])
#if TC_GU
    // h of 2 rows per lane and step: gate rows 2j, 2j + 1 of pair t (8 lanes per pair: one 32-byte store)
    const uint hrow = rb * RPW + sg * 16u;  // h column of the subgroup's first gate row
    for (uint i = lane; i < TC_NT * 128u; i += LANES) {
      const uint b = i / 128u, t = (i % 128u) / 8u, j = i % 8u, tt = t0 + 16u * b + t;
      if (tt >= count) continue;
      const uint w = wbase + 512u * b + 16u * t + 2u * j, p = lists[lb + tt], slot = p % KS;
      const float wt = slot < MOE_TOPK ? wr[pc.e_off + (p / KS) * MOE_TOPK + slot] : 1.0;
      const float h0 = swiglu_clamped(TH_F(w), TH_F(w + 256u), MOE_LIMIT, wt);
      const float h1 = swiglu_clamped(TH_F(w + 1u), TH_F(w + 257u), MOE_LIMIT, wt);
      const uint q = q0 + tt, c = hrow + 2u * j;  // hg's block layout (moe_tc_gather.comp's)
      hgw[pc.yoff + ((q / 16u) * 16u * MOE_I + (c / 16u) * 256u + (q % 16u) * 16u + c % 16u) / 2u] = h2sat(h0, h1);
    }
#else
    const uint yrow = rb * RPW + sg * 32u;  // row within the expert of the subgroup's first row
    for (uint i = lane; i < TC_NT * 512u; i += LANES) {
      const uint b = i / 512u, a = (i % 512u) / 256u, t = (i % 256u) / 16u, r = i % 16u, tt = t0 + 16u * b + t;
      if (tt >= count) continue;
      ys[pc.yoff + lists[lb + tt] * MOE_ROWS + yrow + 16u * a + r] = TH_F(wbase + 512u * b + 256u * a + 16u * t + r);
    }
#endif
    subgroupBarrier();  // the region is free again
  }
}
